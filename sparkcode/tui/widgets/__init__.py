"""The TUI's widgets, one idea per module; styles live beside them in ``.tcss`` files."""

from __future__ import annotations

from .approval import ApprovalCard, ApprovalStack
from .chat import AssistantMessage, ErrorMessage, Notice, ThinkingBlock, UserMessage
from .conversation import Conversation
from .engine_panel import EnginePanel
from .prompt import PromptInput
from .status_bar import StatusBar
from .todo_panel import TodoPanel
from .tool_card import ToolCard

__all__ = [
    "ApprovalCard",
    "ApprovalStack",
    "AssistantMessage",
    "Conversation",
    "EnginePanel",
    "ErrorMessage",
    "Notice",
    "PromptInput",
    "StatusBar",
    "ThinkingBlock",
    "TodoPanel",
    "ToolCard",
    "UserMessage",
]
