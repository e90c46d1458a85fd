"""Build the degeneration detector's evaluation corpus (deterministic, seeded).

Normal samples come from files already on the machine: the Python standard
library's sources (cut into answer-sized chunks of 200-4000 characters at line
boundaries), its docstrings (as prose), answer-shaped mixes of both (prose,
then a fenced code block, then more prose) and tool-output-like text built from
those files (Markdown tables, directory trees, hex dumps, base64, test logs,
file listings), which repeat structure legitimately. ``test_code`` chunks come from the
standard library's own tests, which hold deliberately odd data, and are kept
as their own kind so their rate can be read apart.

Degenerate samples are a normal prefix (0-3000 characters, sometimes none)
followed by a degenerate tail: looping subwords, character runs, phrase and
sentence loops, symbol soup, mixed-script identifiers, multilingual token
salad, control-character garbage, and word salad (real words in meaningless
order: ``bench/corpora/detector_salad.py``); some recover with a little normal text after.

Usage::

    python -m bench.corpora.detector_corpus [OUT_DIR] [--seed 7] [--normal 2000] [--degenerate 1100]

writes ``OUT_DIR/manifest.jsonl`` (one line per sample: file, label, kind,
detail) and the samples under ``OUT_DIR/normal/`` and ``OUT_DIR/degenerate/``.
Without OUT_DIR a temporary directory is used and printed.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import random
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.corpora.detector_salad import SALAD_KINDS

MIN_CHARS, MAX_CHARS = 200, 4000


@dataclass(frozen=True)
class Sample:
    """One corpus text with its label."""

    name: str
    label: str  # "normal" or "degenerate"
    kind: str
    text: str
    detail: str = ""


# ---------------------------------------------------------------- sources


def docstrings(source: str, min_chars: int = 80) -> list[str]:
    """The module, class and function docstrings of Python ``source`` that are at
    least ``min_chars`` long (prose, not one-liners); none if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc and len(doc) >= min_chars:
                found.append(doc)
    return found


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def source_files(root: Path, *, tests: bool) -> list[Path]:
    """Standard-library ``.py`` files, sorted; only test files when ``tests``.

    Installed packages (``site-packages``) are not the standard library.
    """
    out: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs if d not in ("site-packages", "dist-packages", "__pycache__")
        )
        parts = set(Path(folder).relative_to(root).parts)
        if bool(parts & {"test", "tests", "idle_test"}) == tests:
            out.extend(Path(folder) / f for f in files if f.endswith(".py"))
    return sorted(out)


class Sources:
    """Lazily read standard-library files and their docstrings."""

    def __init__(self, root: Path, rng: random.Random, doc_files: int = 400) -> None:
        self.rng = rng
        self.doc_files = doc_files
        self.files = source_files(root, tests=False)
        self.test_files = source_files(root, tests=True)
        self._texts: dict[Path, str | None] = {}
        self._docstrings: list[str] | None = None

    def text(self, path: Path) -> str | None:
        if path not in self._texts:
            self._texts[path] = _read(path)
        return self._texts[path]

    def chunk(self, length: int, *, tests: bool = False) -> str:
        """A run of whole lines of about ``length`` characters from a random file."""
        pool = self.test_files if tests else self.files
        for _ in range(100):
            text = self.text(self.rng.choice(pool))
            if not text or len(text) < MIN_CHARS:
                continue
            lines = text.splitlines(keepends=True)
            first = self.rng.randrange(len(lines))
            out: list[str] = []
            size = 0
            for line in lines[first:]:
                if size + len(line) > length and size >= MIN_CHARS:
                    break
                out.append(line)
                size += len(line)
            chunk = "".join(out)[:MAX_CHARS]
            if len(chunk) >= min(length, MIN_CHARS) and chunk.strip():
                return chunk
        raise RuntimeError("no usable standard-library source found")

    def docstrings(self) -> list[str]:
        """Docstrings of at least 80 characters from a seeded sample of files."""
        if self._docstrings is None:
            found: list[str] = []
            for path in self.rng.sample(self.files, min(self.doc_files, len(self.files))):
                text = self.text(path)
                if not text:
                    continue
                found.extend(docstrings(text))
            self._docstrings = found
        return self._docstrings

    def prose(self, length: int) -> str:
        """Docstrings joined with blank lines up to about ``length`` characters."""
        docs = self.docstrings()
        out: list[str] = []
        size = 0
        while size < min(length, MIN_CHARS) or (size < length and self.rng.random() < 0.5):
            doc = self.rng.choice(docs)
            out.append(doc)
            size += len(doc) + 2
        return "\n\n".join(out)[:MAX_CHARS]

    def answer(self, length: int) -> str:
        """An answer-shaped text: prose, a fenced code block, maybe more prose."""
        lead = self.prose(self.rng.randint(80, max(120, length // 3)))[: length // 2]
        code = self.chunk(max(MIN_CHARS, length - len(lead)))
        text = f"{lead}\n\n```python\n{code.rstrip()}\n```\n"
        if self.rng.random() < 0.5:
            text += "\n" + self.prose(self.rng.randint(80, 400))[:400]
        return text[:MAX_CHARS]

    def structured(self, length: int) -> str:
        """Tool-output-like text a model echoes: tables, trees, hex dumps, base64, logs.

        All built from standard-library files, so repeated structure (``|---|``
        rows, ``├──`` trees, ``0000`` columns, ``PASSED`` lines) is real data.
        """
        import base64
        import binascii

        rng = self.rng
        form = rng.choice(["table", "tree", "hexdump", "base64", "test_log", "listing"])
        paths = rng.sample(self.files, 40)
        root = paths[0].parents[len(paths[0].parents) - 1]
        rows: list[str] = []
        if form == "table":
            rows += ["| module | lines | bytes |", "|--------|------:|------:|"]
            for path in paths:
                text = self.text(path) or ""
                rows.append(f"| `{path.stem}` | {text.count(chr(10))} | {len(text)} |")
        elif form == "tree":
            rows.append(str(paths[0].parent))
            for i, path in enumerate(sorted(paths)):
                branch = "└── " if i == len(paths) - 1 else "├── "
                rows.append(("│   " if i % 3 else "") + branch + path.name)
        elif form == "hexdump":
            data = (self.text(paths[0]) or "").encode()[: length // 4]
            for off in range(0, len(data), 16):
                chunk = data[off : off + 16]
                hexed = binascii.hexlify(chunk, " ").decode()
                text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
                rows.append(f"{off:08x}: {hexed:<47}  {text}")
        elif form == "base64":
            data = (self.text(paths[0]) or "").encode()[: length // 2]
            encoded = base64.b64encode(data).decode()
            rows.append("payload = (")
            rows += [f'    "{encoded[i : i + 64]}"' for i in range(0, len(encoded), 64)]
            rows.append(")")
        elif form == "test_log":
            import re

            names = re.findall(r"def (test_\w+)", self.text(rng.choice(self.test_files)) or "")
            for name in names or ["test_basic"]:
                status = "PASSED" if rng.random() < 0.9 else "SKIPPED"
                rows.append(f"Lib/test/test_mod.py::Tests::{name} {status}")
        else:
            for path in paths:
                size = len(self.text(path) or "")
                rows.append(
                    f"-rw-r--r--  1 root root {size:>8} Jan  1 00:00 {path.relative_to(root)}"
                )
        text = "\n".join(rows) + "\n"
        return text[: max(length, MIN_CHARS)][:MAX_CHARS]

    def words(self, count: int) -> list[str]:
        """``count`` consecutive words from a docstring."""
        for _ in range(100):
            words = self.rng.choice(self.docstrings()).split()
            if len(words) >= count:
                first = self.rng.randrange(len(words) - count + 1)
                return words[first : first + count]
        return ["the"] * count

    def identifiers(self) -> list[str]:
        """Identifiers from a random source chunk."""
        import re

        return re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", self.chunk(2000))


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _answer_length(rng: random.Random) -> int:
    return _log_uniform(rng, MIN_CHARS, MAX_CHARS)


# ---------------------------------------------------------------- normal


def build_normal(src: Sources, count: int) -> list[Sample]:
    """Normal samples: 40% code, 15% test code, 20% prose, 15% answers, 10% structured."""
    rng = src.rng
    out: list[Sample] = []
    kinds: list[tuple[str, float, Callable[[int], str]]] = [
        ("code", 0.40, src.chunk),
        ("test_code", 0.15, lambda n: src.chunk(n, tests=True)),
        ("prose", 0.20, src.prose),
        ("answer", 0.15, src.answer),
        ("structured", 0.10, src.structured),
    ]
    for kind, share, make in kinds:
        for i in range(round(count * share)):
            text = make(_answer_length(rng))
            out.append(Sample(f"{kind}-{i:04d}", "normal", kind, text))
    return out


# ---------------------------------------------------------------- degenerate

_SYMBOLS = "!@#$%^&*()[]{}<>?/\\|~`+=-_;:'\",.。、・…※★☆■□▲△◆◇○●◎§¶†‡°±×÷≈≠≤≥∞√∑∏∫∂∆∇→←↑↓⇒⇔"
_CYRILLIC = ["ование", "ения", "при", "ость", "ский", "ных", "что", "ить", "ает", "кой", "ств"]
_CJK = [
    "的",
    "是",
    "在",
    "不",
    "了",
    "有",
    "和",
    "人",
    "这",
    "中",
    "大",
    "为",
    "上",
    "个",
    "国",
    "我",
    "以",
    "要",
    "他",
    "时",
    "来",
    "用",
    "们",
    "生",
    "到",
    "作",
    "地",
    "于",
    "出",
    "就",
    "分",
    "对",
    "成",
    "会",
    "可",
    "主",
    "发",
    "年",
    "动",
    "同",
    "工",
    "也",
    "计算",
    "数据",
    "函数",
    "返回",
    "文件",
    "变量",
    "の",
    "です",
    "ます",
    "する",
    "が",
]
_OTHER = [
    "ال",
    "من",
    "في",
    "한국",
    "습니다",
    "에서",
    "के",
    "में",
    "ที่",
    "และ",
    "της",
    "και",
    "את",
    "של",
    "ություն",
]
_ODD = [
    "\ufffd",
    "\u200b",
    "\u200c",
    "\u200d",
    "\ufeff",
    "\x00",
    "\x1b",
    "\x07",
    "\x7f",
    "\ue000",
    "\ue01f",
    "\uf8ff",
    "\u2060",
    "\x1f",
]


def _prefix(src: Sources) -> str:
    rng = src.rng
    roll = rng.random()
    if roll < 0.15:
        return ""
    length = _log_uniform(rng, 100, 3000)
    maker = rng.choice([src.chunk, src.prose, src.answer])
    text = maker(length)[:length]
    cut = text.rfind(rng.choice([" ", "\n"]))
    return text[: cut + 1] if cut > 0 else text


def _suffix(src: Sources) -> str:
    if src.rng.random() < 0.8:
        return ""
    return "\n" + src.prose(src.rng.randint(80, 500))[:500]


def _subword_loop(src: Sources) -> tuple[str, str]:
    rng = src.rng
    ident = rng.choice(src.identifiers() or ["value"])
    pieces = [p for p in ident.replace("_", " _").split() if len(p) >= 2] or [ident]
    piece = rng.choice(pieces)[:12]
    if len(piece) > 3 and rng.random() < 0.5:
        start = rng.randrange(len(piece) - 2)
        piece = piece[start : start + rng.randint(2, len(piece) - start)]
    sep = rng.choice(["", "", " ", " ", "_", ", ", "\n", "."])
    reps = _log_uniform(rng, 8, 300)
    return (piece + sep) * reps, f"{piece + sep!r} x{reps}"


def _char_run(src: Sources) -> tuple[str, str]:
    rng = src.rng
    char = rng.choice(list("aeoxzAE019!?)]}>*-=._ \n") + ["的", "ー", "😀", "\t", "ー", "ш"])
    length = _log_uniform(rng, 32, 3000)
    return char * length, f"{char!r} x{length}"


def _phrase_loop(src: Sources) -> tuple[str, str]:
    rng = src.rng
    phrase = " ".join(src.words(rng.randint(2, 8)))
    sep = rng.choice([" ", " ", ". ", "\n", ", "])
    reps = _log_uniform(rng, 12, 200)
    return (phrase + sep) * reps, f"{phrase!r} x{reps}"


def _sentence_loop(src: Sources) -> tuple[str, str]:
    rng = src.rng
    if rng.random() < 0.5:
        unit = " ".join(src.words(rng.randint(9, 40))) + rng.choice([" ", "\n", "\n\n"])
    else:
        lines = [ln for ln in src.chunk(600).splitlines(keepends=True) if ln.strip()]
        first = rng.randrange(len(lines))
        unit = "".join(lines[first : first + rng.randint(1, 4)])
        if not unit.endswith("\n"):
            unit += "\n"
    reps = _log_uniform(rng, 5, 60)
    while len(unit) * reps < 480:  # a loop worth flagging runs for a while
        reps += 1
    return unit * reps, f"{len(unit)}-char unit x{reps}"


def _symbol_soup(src: Sources) -> tuple[str, str]:
    rng = src.rng
    length = _log_uniform(rng, 40, 2000)
    out: list[str] = []
    for _ in range(length):
        roll = rng.random()
        out.append(" " if roll < 0.08 else "\n" if roll < 0.1 else rng.choice(_SYMBOLS))
    return "".join(out), f"{length} symbols"


def _mixed_script(src: Sources) -> tuple[str, str]:
    import re

    rng = src.rng
    code = src.chunk(_log_uniform(rng, 400, 3000))
    alphabet = rng.choice([_CYRILLIC, _CJK, _OTHER + _CYRILLIC])
    share = rng.uniform(0.1, 0.4)
    changed = 0

    def corrupt(m: re.Match[str]) -> str:
        nonlocal changed
        word = m.group()
        if len(word) < 4 or rng.random() > share:
            return word
        changed += 1
        cut = rng.randrange(1, len(word) - 1)
        end = min(len(word), cut + rng.randint(0, 3))
        return word[:cut] + rng.choice(alphabet) + word[end:]

    text = re.sub(r"[A-Za-z_][A-Za-z0-9_]+", corrupt, code)
    if not changed:  # a sample must hold at least one garbled identifier
        share = 1.0
        text = re.sub(r"[A-Za-z_][A-Za-z0-9_]{3,}", corrupt, text, count=1)
    fence = rng.random() < 0.5
    if fence:
        text = f"```python\n{text}\n```\n"
    return text, f"{changed} identifiers corrupted" + (" (fenced)" if fence else "")


def _token_salad(src: Sources) -> tuple[str, str]:
    rng = src.rng
    latin = [p for ident in src.identifiers() for p in ident.split("_") if p] or ["value"]
    length = _log_uniform(rng, 100, 3000)
    out: list[str] = []
    size = 0
    while size < length:
        roll = rng.random()
        if roll < 0.4:
            piece = rng.choice(latin)
            if len(piece) > 3 and rng.random() < 0.5:
                piece = piece[rng.randrange(len(piece) - 2) :]
        elif roll < 0.7:
            piece = rng.choice(_CJK)
        elif roll < 0.8:
            piece = rng.choice(_CYRILLIC)
        elif roll < 0.9:
            piece = rng.choice(_OTHER)
        else:
            piece = rng.choice(_SYMBOLS) + rng.choice(["", "", str(rng.randint(0, 99))])
        piece = rng.choice(["", "", " ", " ", " ", "\n"]) + piece
        out.append(piece)
        size += len(piece)
    return "".join(out), f"{len(out)} tokens"


def _odd_garbage(src: Sources) -> tuple[str, str]:
    rng = src.rng
    length = _log_uniform(rng, 16, 600)
    pool = _ODD + list("abcdefxyz0123 .,")
    out = [rng.choice(_ODD) if rng.random() < 0.5 else rng.choice(pool) for _ in range(length)]
    return "".join(out), f"{length} chars with control/format/replacement characters"


DEGENERATE_KINDS: dict[str, Callable[[Sources], tuple[str, str]]] = {
    "subword_loop": _subword_loop,
    "char_run": _char_run,
    "phrase_loop": _phrase_loop,
    "sentence_loop": _sentence_loop,
    "symbol_soup": _symbol_soup,
    "mixed_script": _mixed_script,
    "token_salad": _token_salad,
    "odd_garbage": _odd_garbage,
    **SALAD_KINDS,
}


def build_degenerate(src: Sources, count: int) -> list[Sample]:
    """Degenerate samples, evenly spread over :data:`DEGENERATE_KINDS`."""
    out: list[Sample] = []
    kinds = list(DEGENERATE_KINDS.items())
    for i in range(count):
        kind, make = kinds[i % len(kinds)]
        prefix = _prefix(src) if kind != "mixed_script" else ""
        tail, detail = make(src)
        text = prefix + tail + _suffix(src)
        out.append(
            Sample(
                f"{kind}-{i:04d}", "degenerate", kind, text, f"prefix {len(prefix)} chars; {detail}"
            )
        )
    return out


def build(
    seed: int, normal: int, degenerate: int, root: Path | None = None, doc_files: int = 400
) -> list[Sample]:
    """The whole corpus, in a fixed order for a given seed.

    ``doc_files`` is how many source files are parsed for docstrings (fewer
    makes a quick sample for the unit tests).
    """
    src = Sources(root or stdlib_dir(), random.Random(seed), doc_files)
    return build_normal(src, normal) + build_degenerate(src, degenerate)


def write(samples: list[Sample], out_dir: Path) -> Path:
    """Write the samples and ``manifest.jsonl``; return the manifest path."""
    manifest = out_dir / "manifest.jsonl"
    out_dir.mkdir(parents=True, exist_ok=True)
    with manifest.open("w", encoding="utf-8") as fh:
        for s in samples:
            rel = Path(s.label) / f"{s.name}.txt"
            (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (out_dir / rel).write_text(s.text, encoding="utf-8", newline="")
            fh.write(
                json.dumps({"file": str(rel), "label": s.label, "kind": s.kind, "detail": s.detail})
                + "\n"
            )
    return manifest


def load(out_dir: Path) -> list[Sample]:
    """Read a corpus written by :func:`write`."""
    samples: list[Sample] = []
    with (out_dir / "manifest.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            with (out_dir / row["file"]).open(encoding="utf-8", newline="") as sample:
                text = sample.read()
            samples.append(
                Sample(Path(row["file"]).stem, row["label"], row["kind"], text, row["detail"])
            )
    return samples


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out_dir", nargs="?", type=Path, help="output directory (default: temp)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--normal", type=int, default=2000)
    parser.add_argument("--degenerate", type=int, default=1100)
    args = parser.parse_args(argv)
    out_dir: Path = args.out_dir or Path(tempfile.mkdtemp(prefix="detector-corpus-"))
    samples = build(args.seed, args.normal, args.degenerate)
    write(samples, out_dir)
    chars = sum(len(s.text) for s in samples)
    print(f"wrote {len(samples)} samples ({chars} chars) to {out_dir}")


if __name__ == "__main__":
    main()
