"""``config.toml``'s ``[keys]``: the TUI's bindable actions and the user's keys for them.

``action = "key"`` (several keys comma-separated: ``quit = "ctrl+q,ctrl+d"``). The
actions, their default keys and where they live are :data:`KEY_ACTIONS`, the one
table the TUI builds its bindings from (``docs/tui.md`` lists it). An unknown action
or a key Textual cannot name is a :class:`ValueError` naming it, which
:func:`sparkcode.config.parse_config` reports with the file.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Literal

from textual.keys import KEY_NAME_REPLACEMENTS, Keys

Where = Literal["app", "screen", "prompt"]


@dataclass(frozen=True)
class KeyAction:
    """One bindable action of the TUI."""

    name: str
    """The ``[keys]`` name (``editor``)."""
    action: str
    """The Textual action it runs (``open_editor``)."""
    key: str
    """The default key (Textual's key string)."""
    where: Where
    """Whose binding it is: the app, the main screen or the prompt."""
    description: str
    """What the footer and the docs call it."""
    show: bool = True
    """Shown in the footer."""
    priority: bool = False
    """Wins over the focused widget's own keys (the prompt's, a card's)."""

    @property
    def binding_id(self) -> str:
        """The Textual binding id a keymap overrides."""
        return f"sparkcode.{self.name}"


KEY_ACTIONS: tuple[KeyAction, ...] = (
    KeyAction("quit", "quit", "ctrl+q", "app", "Quit", priority=True),
    KeyAction("engine", "toggle_engine", "f2", "screen", "Engine"),
    KeyAction("stop", "stop_turn", "escape", "screen", "Stop turn"),
    KeyAction("send_now", "send_now", "ctrl+s", "screen", "Send now"),
    KeyAction("thinking", "toggle_thinking", "ctrl+t", "screen", "Thinking"),
    KeyAction("clear", "clear", "ctrl+l", "screen", "Clear"),
    KeyAction("editor", "open_editor", "ctrl+g", "screen", "Editor"),
    KeyAction("complete", "complete", "tab", "prompt", "Complete", show=False),
    KeyAction("unfold", "toggle_pastes", "ctrl+o", "prompt", "Unfold pastes", show=False),
)
"""Every action ``[keys]`` can bind, with its default key."""

ACTIONS_BY_NAME = {action.name: action for action in KEY_ACTIONS}
_MODIFIERS = frozenset({"ctrl", "shift", "alt", "meta", "super", "hyper"})
_NAMED = (
    frozenset(key.value for key in Keys)
    | frozenset(KEY_NAME_REPLACEMENTS.values())
    | frozenset({"enter", "space", "tab", "backspace", "escape"})
)


def action_for(name: str) -> KeyAction:
    """The action ``name`` names; ``ValueError`` listing the valid ones."""
    try:
        return ACTIONS_BY_NAME[name]
    except KeyError:
        valid = ", ".join(ACTIONS_BY_NAME)
        raise ValueError(
            f"{name!r} is not an action that can be bound; the actions are: {valid}"
        ) from None


def check_keys(text: str) -> str:
    """``text`` as Textual's key string (spaces dropped, lower case): one key or several
    comma-separated, each modifiers and a key (``ctrl+g``, ``f2``, ``alt+x``, ``!``);
    ``ValueError`` naming the bad part."""
    keys = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not key for key in keys):
        raise ValueError(
            f'{text!r} is not a key: give a key like "ctrl+g", "f2" or '
            '"alt+x" (several comma-separated)'
        )
    return ",".join(_check_key(key) for key in keys)


def _check_key(key: str) -> str:
    *modifiers, base = key.split("+") if key != "+" else ["+"]
    wrong = [m for m in modifiers if m.lower() not in _MODIFIERS]
    if wrong or not base:
        raise ValueError(
            f"{key!r} is not a key: the modifiers are "
            f"{', '.join(sorted(_MODIFIERS))}, joined with '+' before one key"
        )
    if len(base) == 1:
        return "+".join([*(m.lower() for m in modifiers), base])
    name = base.lower()
    if name.startswith("f") and name[1:].isdigit():
        if not 1 <= int(name[1:]) <= 24:
            raise ValueError(f"{key!r} is not a key: function keys are f1 to f24")
    elif name not in _NAMED and not _is_character_name(name):
        raise ValueError(
            f"{key!r} is not a key: {base!r} is no key name Textual knows "
            "(letters, digits, f1-f24, enter, escape, tab, space, up, home, "
            "pageup, ...)"
        )
    return "+".join([*(m.lower() for m in modifiers), name])


def _is_character_name(name: str) -> bool:
    """A Unicode character's name as Textual writes it (``exclamation_mark``)."""
    try:
        unicodedata.lookup(name.upper().replace("_", " "))
    except KeyError:
        return False
    return True


def _text_area_keys() -> dict[str, str]:
    """The keys the prompt's editor (Textual's ``TextArea``) binds, with their actions."""
    from textual.binding import Binding
    from textual.widgets import TextArea

    keys: dict[str, str] = {}
    for binding in TextArea.BINDINGS:
        if isinstance(binding, Binding):
            for key in binding.key.split(","):
                keys[key.strip()] = binding.action.replace("_", " ")
    return keys


def parse_keys(table: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """``[keys]`` checked: (binding id, key string) pairs for ``App.set_keymap``;
    ``ValueError`` for an unknown action, a bad key or one key given two actions."""
    out: list[tuple[str, str]] = []
    chosen = {action.name: action.key for action in KEY_ACTIONS}
    for name, text in table.items():
        action = action_for(name)
        try:
            chosen[name] = check_keys(text)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        out.append((action.binding_id, chosen[name]))
    owner: dict[str, str] = {}
    taken = _text_area_keys() if table else {}
    for name, keys in chosen.items():
        for key in keys.split(",") if name in table else ():
            action = ACTIONS_BY_NAME[name]
            if key in taken and action.where != "prompt" and not action.priority:
                raise ValueError(
                    f"{name}: {key!r} is the prompt's own key ({taken[key]}), "
                    "which the prompt takes first; choose another"
                )
    for name, keys in chosen.items():
        for key in keys.split(","):
            if key in owner:
                first, second = (owner[key], name) if name in table else (name, owner[key])
                raise ValueError(f"{second}: {key!r} is already the key of {first}")
            owner[key] = name
    return tuple(out)
