"""The conversation: the agent loop and its turns, the events it emits, its settings,
context accounting and compaction, permissions, undo and rewind, subagents, the
``!cmd`` shell and the final answer under an output schema.

``loop.py`` holds the conversation; ``_turn.py`` runs one request and its tool calls
(``_request.py`` builds it, ``_reply.py`` reads it, ``_execute.py`` runs the calls).
The small-model mechanisms are not here: a turn calls ``scaffold/`` at named points.
"""
