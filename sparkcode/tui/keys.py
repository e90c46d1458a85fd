"""The TUI's key bindings, built from the one table of bindable actions
(:data:`sparkcode.config.KEY_ACTIONS`); ``config.toml``'s ``[keys]`` overrides them
through Textual's keymap (each binding's id is its action's ``binding_id``)."""

from __future__ import annotations

from textual.binding import Binding, BindingType

from sparkcode.config import KEY_ACTIONS, Where


def bindings(where: Where) -> list[BindingType]:
    """The bindings of the app, the main screen or the prompt, with their default keys."""
    return [
        Binding(
            action.key,
            action.action,
            action.description,
            show=action.show,
            id=action.binding_id,
            priority=action.priority,
        )
        for action in KEY_ACTIONS
        if action.where == where
    ]
