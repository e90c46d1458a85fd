"""Compile one recorded launch for one GPU target on a CPU, and read its machine code.

The entry point is specialized exactly as a launch would be: the recorded arguments (tensors
as ``MockTensor`` pointers, whose ``data_ptr()`` 0 is 16-aligned like any CUDA allocation;
ints with their values) go through the JIT's own binder and ``_pack_args``, then
``triton.compile`` for ``GPUTarget("cuda", arch, 32)``. These are private Triton APIs, so
the check is written for one Triton version (``TRITON_VERSION``) and refuses another.

Results are cached under a key made of every ``kernels/*.py`` file's bytes, the Triton
version, the target and the launch: a second run on unchanged kernels compiles nothing.
Work runs in ``jobs`` spawned processes, each with ``TRITON_INTERPRET`` removed before Triton
is imported (the parent's Triton may be interpreted; the children's never is).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from bench.targets.kernel_static.launches import Launch

#: The Triton version whose private compile APIs (binder, ``_pack_args``) this check uses.
TRITON_VERSION = "3.9.0"
ROOT = Path(__file__).resolve().parents[3]
_FORMAT = 1  # bump when the cached fields change

_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")


@dataclass
class Built:
    """What one compile gave: resources from ptxas, the SASS with line info, the IR."""

    launch: str
    arch: int
    ok: bool
    error: str = ""
    regs: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared: int = 0  # dynamic shared memory per CTA, bytes (the 1 KiB reserve excluded)
    num_warps: int = 0
    num_stages: int = 0
    sass: str = ""
    ttir: str = ""
    ttgir: str = ""
    seconds: float = 0.0
    cached: bool = False


def check_triton_version() -> None:
    import triton

    if triton.__version__ != TRITON_VERSION:
        raise SystemExit(
            f"kernel_static: written for triton=={TRITON_VERSION} (it uses the JIT's private "
            f"binder and _pack_args), found {triton.__version__}; pin it (pyproject.toml) or "
            "port bench/targets/kernel_static/build.py to the new version"
        )


DEFAULT_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sparkcode" / "kernel_static"
)


def kernels_hash() -> str:
    """Hash of every ``kernels/*.py`` file: what a cached compile or report was made from."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "kernels").glob("*.py")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:16]


def report_path(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """Where a run leaves its figures for the current kernels (``bench/targets/moe_traffic.py``)."""
    return cache_dir / f"report-{kernels_hash()}.json"


def cache_key(launch: Launch, arch: int) -> str:
    h = hashlib.sha256(f"{_FORMAT} triton {TRITON_VERSION} sm_{arch}".encode())
    h.update(kernels_hash().encode())
    h.update(
        repr(
            (launch.module, launch.kernel, launch.kwargs, [(a.dtype, a.value) for a in launch.args])
        ).encode()
    )
    return h.hexdigest()[:32]


def tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def parse_ptxas_log(log: str) -> tuple[int, int, int]:
    """``(registers, spill store bytes, spill load bytes)`` from ``ptxas -v`` output."""
    regs = _PTXAS_REGS.search(log)
    spill = _PTXAS_SPILL.search(log)
    if regs is None or spill is None:
        raise ValueError(f"no register/spill line in the ptxas log: {log[-400:]!r}")
    return int(regs.group(1)), int(spill.group(1)), int(spill.group(2))


def _worker_env(triton_cache: str | None = None) -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"  # ptxas -v, printed to stdout
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # Triton's own cache would skip ptxas
    # A private Triton cache: the shared one (~/.triton) keys by source, not path, and handed
    # back IR whose line info named another checkout's copy of the same kernel.
    os.environ["TRITON_CACHE_DIR"] = triton_cache or tempfile.mkdtemp(prefix="kernel_static-")
    # Triton 3.9's default (on); 3.10 turns it off. Explicit so a launch matches this check.
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def compile_one(launch: Launch, arch: int) -> Built:
    """Compile ``launch`` for ``sm_<arch>`` (in a worker: see ``_worker_env``)."""
    import importlib

    import torch
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.compiler import compile as triton_compile
    from triton.runtime.jit import MockTensor, create_function_from_signature

    started = time.monotonic()
    log = io.StringIO()
    try:  # binding or compiling: a failure is a result the check reports, by launch
        fn = getattr(importlib.import_module(launch.module), launch.kernel)
        args = [MockTensor(getattr(torch, a.dtype)) if a.dtype else a.value for a in launch.args]
        kwargs: dict[str, Any] = dict(launch.kwargs)
        kwargs.setdefault("debug", False)
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
        target = GPUTarget("cuda", arch, 32)
        backend = make_backend(target)
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        bound, spec, opts = binder(*args, **kwargs)
        options, sig, consts, attrs = fn._pack_args(backend, kwargs, bound, spec, opts)
        with contextlib.redirect_stdout(log):
            kernel = triton_compile(
                ASTSource(fn, sig, consts, attrs), target=target, options=options.__dict__
            )
    except Exception as exc:  # noqa: BLE001
        return Built(
            launch.name,
            arch,
            ok=False,
            error=f"{type(exc).__name__}: {exc}"[:2000],
            seconds=time.monotonic() - started,
        )
    regs, st, ld = parse_ptxas_log(log.getvalue())
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        sass = subprocess.run(
            [tool("nvdisasm"), "-c", "-gi", str(cubin)], check=True, capture_output=True, text=True
        ).stdout
    return Built(
        launch.name,
        arch,
        ok=True,
        regs=regs,
        spill_stores=st,
        spill_loads=ld,
        shared=int(kernel.metadata.shared),
        num_warps=int(kernel.metadata.num_warps),
        num_stages=int(kernel.metadata.num_stages),
        sass=sass,
        ttir=kernel.asm["ttir"],
        ttgir=kernel.asm["ttgir"],
        seconds=time.monotonic() - started,
    )


def _cached_compile(launch: Launch, arch: int, cache_dir: str | None) -> Built:
    path = Path(cache_dir) / f"{cache_key(launch, arch)}.json" if cache_dir else None
    if path is not None and path.exists():
        built = Built(**json.loads(path.read_text()))
        built.cached, built.launch = True, launch.name
        return built
    built = compile_one(launch, arch)
    if path is not None and built.ok:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two runs may write one key
        tmp.write_text(json.dumps(asdict(built)))
        tmp.replace(path)
    return built


def build_all(
    launches: list[Launch], archs: tuple[int, ...], jobs: int, cache_dir: str | None
) -> list[Built]:
    """Every launch for every target, ``jobs`` compiles at a time, in launch order. The
    slowest (the MoE kernels) are submitted first so two workers finish together."""
    work = [(launch, arch) for launch in launches for arch in archs]
    order = sorted(
        range(len(work)), key=lambda i: not work[i][0].kernel.startswith(("_gate_up", "_down"))
    )
    results: dict[int, Built] = {}
    with (
        tempfile.TemporaryDirectory(prefix="kernel_static-") as triton_cache,
        ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=get_context("spawn"),
            initializer=_worker_env,
            initargs=(triton_cache,),
        ) as pool,
    ):
        futures = {i: pool.submit(_cached_compile, *work[i], cache_dir) for i in order}
        for i, fut in futures.items():
            results[i] = fut.result()
    return [results[i] for i in range(len(work))]
