"""A setting is one field of AgentKnobs: a profile's [agent], config.toml's [agent]
and a start's options all take it, and it reaches AgentSettings; the field list is
read from the type, so a new knob is checked here without editing this file."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import msgspec
import pytest
from msgspec import inspect as mi

from engine.errors import UserError
from engine.profiles import KNOB_NAMES, AgentKnobs, check_knobs, overlay, parse_profile
from sparkcode.agent import AgentSettings
from sparkcode.agent.core.settings import KNOB_TO_SETTING
from sparkcode.config import Config, parse_config
from sparkcode.start import Connection, SessionOptions, session_settings

ENDPOINT = '[profile]\nname = "x"\nkind = "endpoint"\n[endpoint]\nbase_url = "http://h/v1"\n'
DEFAULTS = AgentSettings()


def field_of(name: str) -> str:
    """The AgentSettings field a knob lands on."""
    return KNOB_TO_SETTING[name][0] if name in KNOB_TO_SETTING else name


def landed(name: str, value: Any) -> Any:
    """The value a knob lands as."""
    return KNOB_TO_SETTING[name][1](value) if name in KNOB_TO_SETTING else value


def candidates(kind: mi.Type) -> list[Any]:
    """Valid values of a knob's type, from its declaration (type and range)."""
    if isinstance(kind, mi.UnionType):
        return [v for t in kind.types if not isinstance(t, mi.NoneType) for v in candidates(t)]
    if isinstance(kind, mi.Metadata):
        return candidates(kind.type)
    if isinstance(kind, mi.BoolType):
        return [True, False]
    if isinstance(kind, mi.LiteralType):
        return list(kind.values)
    if isinstance(kind, mi.IntType | mi.FloatType):
        low = next((b for b in (kind.ge, kind.gt) if b is not None), 0)
        high = next((b for b in (kind.le, kind.lt) if b is not None), low + 10)
        steps = [low + (high - low) * f for f in (0.25, 0.5, 0.75)]
        return [int(v) if isinstance(kind, mi.IntType) else float(v) for v in steps]
    if isinstance(kind, mi.VarTupleType):
        return [("read_file",), ("read_file", "bash")]
    raise AssertionError(f"no sample values for {kind}: extend candidates()")


def two_values(name: str) -> tuple[Any, Any]:
    """Two different valid values, the first unlike AgentSettings' default."""
    info = mi.type_info(AgentKnobs)
    assert isinstance(info, mi.StructType)
    kind = next(f.type for f in info.fields if f.name == name)
    default = getattr(DEFAULTS, field_of(name))
    values = [v for v in candidates(kind) if landed(name, v) != default]
    other = next(v for v in candidates(kind) if v != values[0])
    return values[0], other


def toml(knobs: dict[str, Any]) -> str:
    return "[agent]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in knobs.items())


def conn_for(profile_text: str, tmp_path: Path) -> Connection:
    spec = parse_profile(profile_text, tmp_path / "x.toml")
    return Connection(
        base_url="http://h/v1",
        model="m",
        api_key_env=None,
        max_model_len=None,
        profile="x",
        profile_spec=spec,
    )


def assert_reached(settings: AgentSettings, knobs: dict[str, Any], where: str) -> None:
    for name, value in knobs.items():
        assert getattr(settings, field_of(name)) == landed(name, value), (where, name)


def test_every_knob_has_a_default_in_agent_settings() -> None:
    names = {f.name for f in fields(AgentSettings)}
    missing = [k for k in KNOB_NAMES if field_of(k) not in names]
    assert not missing, f"knobs without a default in AgentSettings: {missing}"


def test_every_knob_is_taken_in_all_three_places_and_reaches_the_agent(tmp_path: Path) -> None:
    knobs = {name: two_values(name)[0] for name in KNOB_NAMES}
    bare = conn_for(ENDPOINT, tmp_path)
    # 1. a profile's [agent]
    conn = conn_for(ENDPOINT + toml(knobs), tmp_path)
    assert conn.profile_spec is not None
    assert msgspec.structs.asdict(conn.profile_spec.agent) == knobs
    assert_reached(session_settings(Config(), conn, SessionOptions()), knobs, "profile")
    # 2. config.toml's [agent]
    config = parse_config(toml(knobs), tmp_path / "config.toml")
    assert_reached(session_settings(config, bare, SessionOptions()), knobs, "config.toml")
    # 3. a start's options
    started = SessionOptions(knobs=AgentKnobs(**knobs))
    assert_reached(session_settings(Config(), bare, started), knobs, "start")


def test_a_later_layer_wins_for_every_knob(tmp_path: Path) -> None:
    first = {name: two_values(name)[0] for name in KNOB_NAMES}
    second = {name: two_values(name)[1] for name in KNOB_NAMES}
    conn = conn_for(ENDPOINT + toml(first), tmp_path)
    config = parse_config(toml(second), tmp_path / "config.toml")
    assert_reached(session_settings(config, conn, SessionOptions()), second, "config over profile")
    started = SessionOptions(knobs=AgentKnobs(**first))
    assert_reached(session_settings(config, conn, started), first, "start over config")
    assert overlay(AgentKnobs(**first), AgentKnobs()) == AgentKnobs(**first)


def test_a_start_is_held_to_the_ranges_the_files_are(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"this start: top_p: must be a number in \(0, 1\]"):
        session_settings(
            Config(), conn_for(ENDPOINT, tmp_path), SessionOptions(knobs=AgentKnobs(top_p=0.0))
        )
    assert check_knobs(AgentKnobs(temperature=2.0), "x").temperature == 2.0
