"""Strict TOML files declared as msgspec structs, with errors that name the file,
the table, the key and what it must be.

msgspec checks the types, the ranges (``Meta(ge=..., description=...)``) and
unknown keys (``forbid_unknown_fields``); :func:`describe_error` turns its
message (``Expected `float` <= 2.0 - at `$.agent.temperature```) into the
project's: ``config.toml: [agent] temperature: must be between 0 and 2, got 3``.
Profiles and ``config.toml`` word a bad value a little differently (the
profile: ``[agent] temperature must be ...``, types as ``expected an integer,
got str``; the config: ``[agent] temperature: must be ...``), as they did when
each had its own reader; ``colon`` picks the config's wording.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from msgspec import inspect as mi

from engine.errors import UserError

T = TypeVar("T")

_MESSAGE = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_TYPE_NAMES = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "array": "a list",
    "object": "a table",
}
_PLURALS = {
    "int": "integers",
    "float": "numbers",
    "str": "strings",
    "bool": "booleans",
    "object": "tables",
    "array": "lists",
}


class TomlTable(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One table of a strict TOML file: an unknown key is an error naming it."""


def decode_toml(
    text: str, kind: type[T], source: Path, error: type[UserError], *, colon: bool
) -> T:
    """Parse ``text`` as TOML and hold it to ``kind``; a :class:`UserError` of
    type ``error`` names ``source`` and the problem."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{source}: malformed TOML: {exc}") from None
    return convert_toml(doc, kind, source, error, colon=colon)


def convert_toml(
    doc: dict[str, Any],
    kind: type[T],
    source: Path,
    error: type[UserError],
    *,
    colon: bool,
    where: str | None = None,
) -> T:
    """Hold an already parsed TOML document to ``kind`` (see :func:`decode_toml`);
    ``where``: one table of a file (``config.toml: [mcp.servers.x]``), not the file."""
    try:
        return msgspec.convert(doc, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise error(
            describe_error(
                str(exc), kind, doc, where or f"{source}:", colon=colon, sections=where is None
            )
        ) from None


def describe_error(
    message: str,
    root: type,
    doc: dict[str, Any],
    where: str,
    *,
    colon: bool,
    sections: bool = False,
    labels: Mapping[str, str] | None = None,
) -> str:
    """msgspec's validation ``message`` for ``doc`` held to ``root``, in words;
    ``sections``: ``root``'s fields are a file's tables; ``labels``: a key's name
    as the user wrote it (a command-line flag)."""
    found = _MESSAGE.match(message)
    assert found is not None  # the pattern matches any text
    what = found["what"]
    path = found["path"] or ""
    dict_value = path.endswith("[...]")  # a value of a key-value table
    steps = [s for s in re.split(r"\.|\[\d+\]|\[\.\.\.\]", path.lstrip(".")) if s]
    indexed = bool(re.search(r"\[\d+\]$", path))
    unknown = re.match(r"Object contains unknown field `(.*)`", what)
    if unknown:
        known = ", ".join(sorted(_field_names(_type_at(root, steps))))
        if not steps and sections:
            return f"{where} unknown section [{unknown[1]}] (known: {known})"
        return f"{_table(where, steps)} unknown key {unknown[1]!r} (known: {known})"
    missing = re.match(r"Object missing required field `(.*)`", what)
    if missing:
        return f"{_table(where, steps)} {missing[1]} is required"
    if not steps:
        return f"{where} {what}"
    *table, key = steps
    struct = _type_at(root, table)
    field = _field_type(struct, key)
    if (
        what.startswith("Expected `object`")
        and len(steps) == 1
        and field is not None
        and _struct_of(field) is not None
    ):
        return f"{where} {key} must be a table"
    must = _must(field) or _literal(struct, key)
    value = _value_at(doc, steps)
    got = f", got {value!r}" if isinstance(value, str | int | float) else ""
    if dict_value and isinstance(value, dict):
        got = _bad_entry(struct, key, value)
    typed = re.match(r"Expected `([^`]*)`, got `([^`]*)`", what)
    head = f"{_table(where, table)} {(labels or {}).get(key, key)}"
    if colon:
        expected = must or (_expected(typed[1], indexed) if typed else what)
        return f"{head}: must be {expected}{got}"
    # A wrong type is said as one, unless a description says more (a range, or
    # the values of a key-value table).
    wrong_type = typed is not None and typed[2] not in typed[1].split(" | ")
    if typed and (not must or (wrong_type and not dict_value)):
        return f"{head}: expected {_expected(typed[1], indexed)}, got {typed[2]}"
    return f"{head} must be {must or what}{got}"


def _table(where: str, steps: list[str]) -> str:
    return f"{where} [{'.'.join(steps)}]" if steps else where


def _expected(names: str, indexed: bool) -> str:
    kinds = [n for n in names.split(" | ") if n != "null"]
    if indexed:
        return "a list of " + " or ".join(_PLURALS.get(k, k) for k in kinds)
    return " or ".join(_TYPE_NAMES.get(k, k) for k in kinds)


def _must(field: mi.Type | None) -> str | None:
    """What a value of ``field`` must be: its description, or its literal values."""
    for t in _members(field):
        if (
            isinstance(t, mi.Metadata)
            and t.extra_json_schema
            and "description" in t.extra_json_schema
        ):
            return str(t.extra_json_schema["description"])
    return None


def _literal(struct: mi.StructType | None, key: str) -> str | None:
    """``'a' or 'b'``, ``one of a, b, c``: the literal values of a field, in the
    order they are declared (msgspec's own description sorts them)."""
    if struct is None:
        return None
    hints = typing.get_type_hints(struct.cls, include_extras=True)
    names = {f.encode_name: f.name for f in struct.fields}
    values = _literal_values(hints.get(names.get(key, key)))
    if not values:
        return None
    if len(values) == 2:
        return f"{values[0]!r} or {values[1]!r}"
    return "one of " + ", ".join(str(v) for v in values)


def _literal_values(hint: Any) -> list[Any]:
    if typing.get_origin(hint) is typing.Literal:
        return list(typing.get_args(hint))
    return [v for arg in typing.get_args(hint) for v in _literal_values(arg)]


def _members(field: mi.Type | None) -> list[mi.Type]:
    if field is None:
        return []
    return list(field.types) if isinstance(field, mi.UnionType) else [field]


def _struct_of(field: mi.Type | None) -> mi.StructType | None:
    for t in _members(field):
        inner = t.type if isinstance(t, mi.Metadata) else t
        if isinstance(inner, mi.StructType):
            return inner
        if isinstance(inner, mi.DictType):
            return _struct_of(inner.value_type)
    return None


def _type_at(root: type, steps: list[str]) -> mi.StructType | None:
    """The struct the table at ``steps`` is held to (dict tables: their values')."""
    info = mi.type_info(root)
    current: mi.Type | None = info
    for step in steps:
        struct = current if isinstance(current, mi.StructType) else _struct_of(current)
        if struct is None:
            return None
        nxt = _field_type(struct, step)
        if nxt is None and _is_dict(current):
            continue  # the step is a key of a dict of tables ([mcp.servers.NAME])
        current = nxt
    return current if isinstance(current, mi.StructType) else _struct_of(current)


def _is_dict(t: mi.Type | None) -> bool:
    return any(
        isinstance(m.type if isinstance(m, mi.Metadata) else m, mi.DictType) for m in _members(t)
    )


def _field_type(struct: mi.StructType | None, key: str) -> mi.Type | None:
    if struct is None:
        return None
    for f in struct.fields:
        if f.encode_name == key:
            return f.type
    return None


def _field_names(struct: mi.StructType | None) -> list[str]:
    return [f.encode_name for f in struct.fields] if struct is not None else []


def _bad_entry(struct: mi.StructType | None, key: str, table: dict[str, Any]) -> str:
    """``, got NAME = value``: the first entry of a key-value table its type refuses
    (msgspec's path names no key there, ``$.env[...]``)."""
    if struct is None:
        return ""
    names = {f.encode_name: f.name for f in struct.fields}
    hint = typing.get_type_hints(struct.cls, include_extras=True).get(names.get(key, key))
    while typing.get_origin(hint) is typing.Annotated or _is_optional(hint):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is not dict:
        return ""
    value_type = typing.get_args(hint)[1]
    for name, value in table.items():
        try:
            msgspec.convert(value, value_type, strict=True)
        except msgspec.ValidationError:
            shown = str(value).lower() if isinstance(value, bool) else repr(value)
            return f", got {name} = {shown}"
    return ""


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(
        None
    ) in typing.get_args(hint)


def _value_at(doc: Any, steps: list[str]) -> Any:
    for step in steps:
        if not isinstance(doc, dict) or step not in doc:
            return None
        doc = doc[step]
    return doc
