"""Replay recorded sessions: play them back, rerun them, compare, minimize.

- :func:`play_events`: rebuild the agent's events from the recorded bytes
  (``sparkcode replay ID --play``).
- :func:`rerun`: re-send the recorded requests in order to a live engine and
  compare each turn (:mod:`._compare` documents the method).
- :func:`minimize` and :func:`write_bundle`: the shortest reproducing part of a
  session, as a bundle for a bug report.
"""

from __future__ import annotations

from sparkcode.target import Target

from ._bundle import write_bundle
from ._compare import Divergence, TurnComparison, compare_turn, first_divergence
from ._detect import detector_verdict
from ._export import session_transcript
from ._minimize import FlagKind, MinimizeResult, apply_trims, minimize, tool_outputs
from ._play import event_from_record, play_events, recorded_reads
from ._report import details, results_json, table
from ._rerun import RerunResult, SentTurn, model_turns, prepare_body, rerun, seed_note
from ._resume import Rebuilt, ResumeError, rebuild_conversation, user_turns
from ._targets import (
    Launcher,
    endpoint_target,
    managed_target,
    profile_launcher,
    supervised_profile,
)

__all__ = [
    "Rebuilt",
    "ResumeError",
    "rebuild_conversation",
    "user_turns",
    "Divergence",
    "FlagKind",
    "Launcher",
    "MinimizeResult",
    "RerunResult",
    "SentTurn",
    "Target",
    "TurnComparison",
    "apply_trims",
    "compare_turn",
    "details",
    "detector_verdict",
    "endpoint_target",
    "event_from_record",
    "first_divergence",
    "managed_target",
    "minimize",
    "model_turns",
    "play_events",
    "prepare_body",
    "profile_launcher",
    "recorded_reads",
    "rerun",
    "seed_note",
    "session_transcript",
    "results_json",
    "supervised_profile",
    "table",
    "tool_outputs",
    "write_bundle",
]
