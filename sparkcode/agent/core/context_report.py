"""``/context``: where the context window goes, part by part.

The parts are estimated at 4 characters a token (the same rule as compaction's
estimate: off by up to ~20 % for code against a BPE tokenizer), because the
server reports one prompt total, not a breakdown. ``measured`` is that total
from the last response, so the user can see how far the estimate is off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..extensions.instructions import HEADING
from ..scaffold.structured import tools_prompt
from .context import estimate_tokens
from .images import content_text, image_tokens, image_urls

if TYPE_CHECKING:
    from .loop import Agent


@dataclass(frozen=True)
class ContextReport:
    """Estimated tokens by part, against the engine's ``max_model_len``."""

    parts: tuple[tuple[str, int], ...]
    """(part, tokens) in prompt order: system prompt, AGENTS.md, tools, history,
    images (one token per 28x28 pixels, :func:`~.images.image_tokens`), thinking
    kept, tool results."""
    limit: int | None
    """The engine's max_model_len (None: the server did not say)."""
    measured: int
    """Prompt + completion tokens of the last response (0: no request yet)."""

    @property
    def used(self) -> int:
        return sum(tokens for _, tokens in self.parts)

    def text(self) -> str:
        """The report as the TUI shows it (a Markdown table)."""

        def share(tokens: int) -> str:
            return f"{tokens / self.limit:.1%}" if self.limit else "–"

        rows = [f"| {name} | {tokens:,} | {share(tokens)} |" for name, tokens in self.parts]
        if self.limit:
            rows.append(
                f"| free | {max(self.limit - self.used, 0):,} | "
                f"{share(max(self.limit - self.used, 0))} |"
            )
        limit = f"{self.limit:,}" if self.limit else "unknown"
        measured = (
            f"the last request measured {self.measured:,}"
            if self.measured
            else "no request measured yet"
        )
        return (
            "| part | tokens (est.) | of context |\n|---|---:|---:|\n"
            + "\n".join(rows)
            + f"\n\ncontext window {limit} tokens; in use ~{self.used:,} estimated at 4 "
            f"characters a token, images at one per 28x28 pixels ({measured})"
        )


def context_report(agent: Agent) -> ContextReport:
    """Where ``agent``'s context goes now."""
    system = str(agent.history[0].get("content") or "") if agent.history else ""
    tools_text = json.dumps(agent.tools.specs())
    if agent.settings.structured_tools:
        described = tools_prompt(agent.tools)
        if system.endswith(described):
            system, tools_text = system[: -len(described)], described
    base, sep, instructions = system.partition("\n" + HEADING)
    history = thinking = results = images = 0
    field = agent.settings.thinking_field
    for message in agent.history[1:]:
        urls = image_urls(message.get("content"))
        if urls:  # an image's estimate, not its base64 text (images.image_tokens)
            images += sum(image_tokens(url) for url in urls)
            message = {**message, "content": content_text(message["content"])}
        if message.get("role") == "tool":
            results += estimate_tokens([message])
            continue
        if field in message:
            thinking += len(str(message[field])) // 4
            message = {k: v for k, v in message.items() if k != field}
        history += estimate_tokens([message])
    parts = (
        ("system prompt", len(base) // 4),
        ("AGENTS.md", len(sep + instructions) // 4),
        ("tools", len(tools_text) // 4),
        ("history", history),
        ("images", images),
        ("thinking kept", thinking),
        ("tool results", results),
    )
    return ContextReport(
        parts=parts, limit=agent.settings.context_limit, measured=agent.context.used
    )
