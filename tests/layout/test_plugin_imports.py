"""At serve time the vLLM plugin needs only ``engine/codecs/`` and its own modules.

The plugin runs in every vLLM process; the offline quantizer ``engine/quant/``
(GPTQ, the converter, the calibration pipeline) is not part of serving. Read from
the source, every import of a plugin module (also inside functions, so a lazy
import cannot hide an edge) and of what it reaches inside ``engine/`` must stay in
``engine.codecs``, ``engine.plugin`` or the leaf ``engine.errors``. A child process
then imports every plugin module and runs the calibration capture's lazy imports,
and ``engine.quant`` must not be in ``sys.modules``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVE_TIME = ("engine.codecs", "engine.plugin", "engine.errors")
"""What the plugin may reach inside ``engine``."""


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, full module name) of every import in ``path``, relative ones resolved;
    for ``from X import y`` both ``X`` and ``X.y`` (``y`` may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = _module_name(path, root).split(".")
    here = name if path.name == "__init__.py" else name[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _source(module: str, root: Path) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def reached_outside(start: str, root: Path = ROOT) -> list[str]:
    """``file:line imports module`` for each edge from what ``start`` reaches inside
    ``engine`` to an ``engine`` module outside :data:`SERVE_TIME`."""
    seen: set[str] = set()
    todo = sorted((root / start.replace(".", "/")).rglob("*.py"))
    out: list[str] = []
    while todo:
        path = todo.pop()
        if str(path) in seen:
            continue
        seen.add(str(path))
        for line, module in imported_modules(path, root):
            if module.split(".")[0] != "engine":
                continue
            if (
                not module.startswith(tuple(f"{s}." for s in SERVE_TIME) + SERVE_TIME)
                and module != "engine"
            ):
                out.append(f"{path.relative_to(root)}:{line} imports {module}")
            elif (source := _source(module, root)) is not None:
                todo.append(source)
    return sorted(set(out))


def test_the_plugin_reaches_only_codecs_and_its_own_modules() -> None:
    assert reached_outside("engine.plugin") == []


def test_the_checker_follows_lazy_and_indirect_imports(tmp_path: Path) -> None:
    for folder in ("engine/plugin", "engine/codecs", "engine/quant"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "engine" / "__init__.py").write_text("")
    (tmp_path / "engine/plugin/feature.py").write_text(
        "from ..codecs import shared\ndef f():\n    from engine.quant.calib import save\n"
    )
    (tmp_path / "engine/codecs/shared.py").write_text("import engine.quant.gptq\n")
    assert reached_outside("engine.plugin", tmp_path) == [
        "engine/codecs/shared.py:1 imports engine.quant.gptq",
        "engine/plugin/feature.py:3 imports engine.quant.calib",
        "engine/plugin/feature.py:3 imports engine.quant.calib.save",
    ]


CHILD = """
import importlib, json, pkgutil, sys, tempfile
from pathlib import Path
import engine.plugin as plugin
for info in pkgutil.iter_modules(plugin.__path__):
    importlib.import_module(f"engine.plugin.{info.name}")
from engine.plugin.calib_capture import EngineCapture
import torch
with tempfile.TemporaryDirectory() as tmp:
    capture = EngineCapture(Path(tmp), 4, moe_only=True)   # its lazy imports
    capture.capture.captured = {1: [torch.zeros(2, 8)]}
    capture.finish()                                        # and the saving one
    saved = (Path(tmp) / "calib.safetensors").is_file()
print(json.dumps({"saved": saved,
                  "quant": sorted(m for m in sys.modules if m.startswith("engine.quant"))}))
"""


@pytest.mark.slow
def test_serving_imports_no_offline_quantizer_module() -> None:
    """Importing every plugin module (vLLM included: about 10 s of CPU) loads no
    ``engine.quant`` module."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"saved": True, "quant": []}
