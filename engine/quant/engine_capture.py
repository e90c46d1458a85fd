"""Calibration inputs captured from a served model: corpus, capture profile and driver.

A round's model is served eager through the supervisor with the plugin feature
``calib_capture`` (``engine.plugin.calib_capture``), a code corpus tokenized by the
model's own tokenizer is sent as prefill-only requests (``max_tokens=1``, prefix caching
off so that every token is computed), and the engine writes the inputs of its MoE blocks
in the converter's calibration format. The driver arms the capture once the engine is
healthy, flushes it after the last prompt, moves the file into place and stops the engine.
"""

from __future__ import annotations

import json
import shutil
import socket
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import Profile
from engine.quant.calib import CalibrationError

# Files of a user's --corpus that count as code (anything else is skipped).
CODE_SUFFIXES = frozenset(
    {
        ".py",
        ".pyi",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cu",
        ".rs",
        ".go",
        ".java",
        ".kt",
        ".js",
        ".jsx",
        ".ts",
        ".tsx",
        ".rb",
        ".php",
        ".swift",
        ".scala",
        ".sh",
        ".lua",
        ".zig",
        ".sql",
        ".toml",
        ".yaml",
        ".yml",
        ".md",
        ".rst",
        ".txt",
    }
)
DEFAULT_CHUNK_TOKENS = 2048
BOOT_TIMEOUT_S = 1800.0
FLUSH_TIMEOUT_S = 900.0
MIN_CHUNK_TOKENS = 32
NEEDS_THE_MACHINE = "the conversion and the capture need the machine to themselves"
"""Why ``--calib-from-engine`` refuses a running engine (engine access's ``never`` rule)."""


class CaptureError(UserError):
    """Capturing from the served model failed; the message names the step."""


class CaptureProgress(Protocol):
    """What the capture reports; the CLI draws it."""

    def engine_phase(self, phase: str) -> None: ...
    def capture_begin(self, prompts: int, tokens: int) -> None: ...
    def prompt_done(self, tokens: int) -> None: ...
    def note(self, message: str) -> None: ...


class SilentCapture:
    def engine_phase(self, phase: str) -> None: ...
    def capture_begin(self, prompts: int, tokens: int) -> None: ...
    def prompt_done(self, tokens: int) -> None: ...
    def note(self, message: str) -> None: ...


# -- corpus ---------------------------------------------------------------------------


def stdlib_files() -> list[Path]:
    """The Python standard library's top-level ``*.py`` files, sorted by name."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(root.glob("*.py"))


def user_files(corpus: Path) -> list[Path]:
    """Code files under ``corpus`` (hidden directories skipped), sorted by path."""
    if not corpus.is_dir():
        raise CalibrationError(f"--corpus {corpus} is not a directory")
    found = sorted(
        p
        for p in corpus.rglob("*")
        if p.is_file()
        and p.suffix in CODE_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(corpus).parts)
    )
    if not found:
        raise CalibrationError(
            f"--corpus {corpus} holds no code files ({', '.join(sorted(CODE_SUFFIXES)[:6])}, ...)"
        )
    return found


def corpus_files(corpus: Path | None) -> list[Path]:
    """The user's files first, interleaved with the standard library, so both contribute
    when the token budget is smaller than the corpus."""
    std = stdlib_files()
    if corpus is None:
        return std
    mine = user_files(corpus)
    out: list[Path] = []
    for i in range(max(len(mine), len(std))):
        out.extend(lst[i] for lst in (mine, std) if i < len(lst))
    return out


def _texts(files: list[Path]) -> Iterator[str]:
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # binary or unreadable: not calibration text
        if text.strip():
            yield text


def token_chunks(
    tokenizer: Any, files: list[Path], budget: int, chunk: int = DEFAULT_CHUNK_TOKENS
) -> list[list[int]]:
    """Prompts of at most ``chunk`` tokens, ``budget`` tokens in all, file by file.

    Each prompt starts at a file boundary or continues its file; pieces shorter than
    ``MIN_CHUNK_TOKENS`` are dropped.
    """
    if budget <= 0 or chunk < MIN_CHUNK_TOKENS:
        raise CalibrationError(
            f"--calib-tokens must be positive and the chunk at least "
            f"{MIN_CHUNK_TOKENS} tokens (got {budget}, {chunk})"
        )
    out: list[list[int]] = []
    left = budget
    for text in _texts(files):
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        for start in range(0, len(ids), chunk):
            piece = ids[start : start + min(chunk, left)]
            if len(piece) >= MIN_CHUNK_TOKENS:
                out.append(piece)
                left -= len(piece)
            if left < MIN_CHUNK_TOKENS:
                return out
    return out


def load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:  # transformers raises many types for a missing tokenizer
        raise CalibrationError(f"cannot load the tokenizer of {model_dir}: {exc}") from exc


# -- the capture profile ----------------------------------------------------------------


def _is_w2(model_dir: Path) -> bool:
    from engine.codecs.format import QUANT_METHOD

    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    quant = config.get("quantization_config") or {}
    return isinstance(quant, dict) and quant.get("quant_method") == QUANT_METHOD


def capture_profile(
    base: Profile,
    model_dir: Path,
    capture_dir: Path,
    tokens: int,
    chunk: int,
    *,
    capture_all: bool = False,
) -> Profile:
    """``base`` serving ``model_dir`` eager, without a drafter or prefix caching, with the
    capture feature on (and ``w2_quant`` when the model is a sparkcode checkpoint)."""
    from engine.codecs.format import QUANT_METHOD

    w2 = _is_w2(model_dir)
    features = [f for f in base.plugin_features if f != "calib_capture"]
    if w2 and "w2_quant" not in features:
        features.append("w2_quant")
    features.append("calib_capture")
    env = {
        **base.env,
        "SPARKCODE_CAPTURE_DIR": str(capture_dir),
        "SPARKCODE_CAPTURE_TOKENS": str(tokens),
        "SPARKCODE_CAPTURE_SOURCE": f"{model_dir.name} served by {base.name}",
    }
    if capture_all:
        env["SPARKCODE_CAPTURE_ALL"] = "1"
    return replace(
        base,
        name=f"{base.name}-capture",
        model_path=str(model_dir),
        model_builtin=None,
        quantization=QUANT_METHOD if w2 else None,
        enforce_eager=True,
        enable_prefix_caching=False,
        speculative=None,
        reasoning_parser=None,
        tool_call_parser=None,
        enable_auto_tool_choice=False,
        max_model_len=max(chunk + 16, 256),
        plugin_enabled=True,
        plugin_features=tuple(features),
        env=env,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the driver -------------------------------------------------------------------------


@dataclass
class CaptureResult:
    path: Path
    layers: dict[int, int]  # layer -> captured rows
    prompts: int
    tokens: int
    seconds: float


def capture_from_engine(
    model_dir: Path,
    out: Path,
    prompts: list[list[int]],
    *,
    base: Profile,
    paths: Paths,
    progress: CaptureProgress | None = None,
    capture_all: bool = False,
    boot_timeout: float = BOOT_TIMEOUT_S,
) -> CaptureResult:
    """Serve ``model_dir``, send ``prompts``, write the calibration file ``out``."""
    import httpx

    from engine.plugin import calib_capture as cc
    from engine.profiles import render
    from engine.supervisor import Reuse, Supervisor, running

    report = progress or SilentCapture()
    if not prompts:
        raise CaptureError("the calibration corpus gave no prompts")
    tokens = sum(len(p) for p in prompts)
    chunk = max(len(p) for p in prompts)
    work = out.with_name(f".{out.name}.capture")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    profile = capture_profile(base, model_dir, work, tokens, chunk, capture_all=capture_all)
    spec = render(profile, paths, port=_free_port())
    sup = Supervisor(paths)
    started = time.monotonic()
    # Only an engine started here is stopped afterwards (also when its boot fails).
    with running(
        profile,
        paths,
        reuse=Reuse.NEVER,
        spec=spec,
        timeout=boot_timeout,
        on_phase=report.engine_phase,
        prepare=False,
        why=NEEDS_THE_MACHINE,
    ):
        hooks = _read_json(work / cc.HOOKS_FILE)
        if not hooks or int(hooks.get("hooks", 0)) == 0:
            raise CaptureError(
                f"the engine serving {model_dir} hooked no MoE blocks (modules named "
                "layers.N.mlp with experts); is calib_capture in the plugin log and the model "
                "a mixture of experts?"
                if hooks
                else f"the engine serving {model_dir} did not load the capture hooks: is the "
                "sparkcode plugin installed in its Python (entry point vllm.general_plugins)?"
            )
        (work / cc.ARM_FILE).touch()
        report.capture_begin(len(prompts), tokens)
        with httpx.Client(base_url=spec.base_url, timeout=600.0) as client:
            for ids in prompts:
                _prefill(client, spec.model, ids)
                report.prompt_done(len(ids))
            (work / cc.FLUSH_FILE).touch()
            _prefill(client, spec.model, prompts[0][:1])  # the trigger: not recorded
        result = _wait_result(work / cc.RESULT_FILE, sup)
        if "error" in result:
            raise CaptureError(
                f"the engine could not write the calibration file: {result['error']}"
            )
        (work / cc.CALIB_FILE).replace(out)
    shutil.rmtree(work, ignore_errors=True)
    layers = {int(k): int(v) for k, v in result["layers"].items()}
    short = {k: v for k, v in layers.items() if v < tokens}
    if short:
        report.note(
            f"capture: {len(short)} layer(s) got fewer rows than the {tokens} tokens "
            f"sent (fewest {min(short.values())})"
        )
    return CaptureResult(out, layers, len(prompts), tokens, time.monotonic() - started)


def _prefill(client: Any, model: str | None, ids: list[int]) -> None:
    import httpx

    try:
        r = client.post(
            "/completions",
            json={"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0},
        )
        r.raise_for_status()
    except httpx.HTTPError as exc:
        detail = getattr(getattr(exc, "response", None), "text", "")[:300]
        raise CaptureError(
            f"a calibration prompt of {len(ids)} tokens failed: {exc} {detail}".strip()
        ) from exc


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _wait_result(path: Path, sup: Any) -> dict[str, Any]:
    deadline = time.monotonic() + FLUSH_TIMEOUT_S
    while time.monotonic() < deadline:
        data = _read_json(path)
        if data is not None:
            return data
        if sup.status().state not in ("ready", "unhealthy", "booting"):
            raise CaptureError(
                "the engine stopped before writing the calibration file; "
                "see `sparkcode engine logs`"
            )
        time.sleep(0.2)
    raise CaptureError(
        f"the engine did not write the calibration file within {FLUSH_TIMEOUT_S:.0f} s"
    )


def make_capture(
    base: Profile,
    paths: Paths,
    *,
    corpus: Path | None,
    tokens: int,
    chunk: int = DEFAULT_CHUNK_TOKENS,
    capture_all: bool = False,
) -> Callable[[Path, Path, CaptureProgress], None]:
    """The capture step of ``engine.quant.bootstrap``: tokenize the corpus with the served
    model's tokenizer, serve it with ``base``'s settings, write the calibration file."""
    files = corpus_files(corpus)  # a bad --corpus fails here, before anything runs

    def capture(model_dir: Path, out: Path, progress: CaptureProgress) -> None:
        prompts = token_chunks(load_tokenizer(model_dir), files, tokens, chunk)
        capture_from_engine(
            model_dir,
            out,
            prompts,
            base=base,
            paths=paths,
            progress=progress,
            capture_all=capture_all,
        )

    return capture
