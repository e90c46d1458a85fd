"""``sparkcode detect [FILE]``: run the degeneration detector on any text.

Exit status 0: not degenerate; 1: degenerate; 2: the input could not be read.
Reads standard input when FILE is missing or ``-``, so other tools' output can
be piped through it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from engine.errors import UserError
from sparkcode.detect import DegenerationDetector, Verdict

_CHUNK = 64 * 1024


def register(app: typer.Typer) -> None:
    """Add ``sparkcode detect`` to the root app."""
    app.command("detect")(detect_cmd)


def detect_cmd(
    file: Annotated[
        str | None,
        typer.Argument(
            help="Text file to check; standard input when omitted or '-'.", show_default=False
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
) -> None:
    """Check a text for degenerate model output (loops, runs, garbage).

    Exit status 1 when degenerate, 0 when not, 2 when the input cannot be read.
    """
    name = "<stdin>" if file in (None, "-") else str(file)
    if file in (None, "-"):
        verdict, replaced, line_col = _scan(sys.stdin.buffer, name)
    else:
        path = Path(str(file))
        try:
            with path.open("rb") as fh:
                verdict, replaced, line_col = _scan(fh, name)
        except FileNotFoundError:
            raise UserError(f"cannot read {name}: no such file", exit_code=2) from None
        except IsADirectoryError:
            raise UserError(f"cannot read {name}: it is a directory", exit_code=2) from None
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise UserError(f"cannot read {name}: {reason.lower()}", exit_code=2) from None
    if as_json:
        payload = verdict.to_json()
        payload.update(
            input=name,
            decoded_with_replacement=replaced > 0,
            replaced_bytes=replaced,
            line=line_col[0] if line_col else None,
            column=line_col[1] if line_col else None,
        )
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        if replaced:
            typer.echo(
                f"note: {name} is not valid UTF-8; {replaced} undecodable byte(s) were "
                "replaced with U+FFFD",
                err=True,
            )
        typer.echo(_describe(verdict, line_col))
    if verdict.degenerate:
        raise typer.Exit(1)


def _scan(stream: BinaryIO, name: str) -> tuple[Verdict, int, tuple[int, int] | None]:
    """Run the detector over the whole stream.

    Returns the verdict, the number of undecodable bytes (replaced with U+FFFD)
    and the 1-based (line, column) where the evidence starts.
    """
    try:
        data = stream.read()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UserError(f"cannot read {name}: {reason.lower()}", exit_code=2) from None
    try:
        text = data.decode("utf-8")
        replaced = 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        replaced = len(data) - len(data.decode("utf-8", errors="ignore").encode("utf-8"))
    detector = DegenerationDetector()
    for i in range(0, len(text), _CHUNK):
        if detector.feed(text[i : i + _CHUNK]) is not None:
            break
    verdict = detector.finish()
    line_col = None
    if verdict.start is not None:
        head = text[: verdict.start]
        line_col = (head.count("\n") + 1, verdict.start - head.rfind("\n"))
    return verdict, replaced, line_col


def _describe(verdict: Verdict, line_col: tuple[int, int] | None) -> str:
    if line_col is None:
        return verdict.describe()
    return verdict.describe(f" (from line {line_col[0]}, column {line_col[1]})")
