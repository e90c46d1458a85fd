"""The TUI's screens, each with its ``.tcss`` beside it."""
