"""``[cpu.without_bf16]``: a profile's dtype and memory need on a CPU without bf16
arithmetic, where the machine has the memory for it; ``[cpu.with_vnni]``: its model
on a CPU with int8 dot products."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.errors import ProfileError
from engine.paths import Paths
from engine.profiles import (
    CPU_BF16_ENV,
    CPU_VNNI_ENV,
    _schema,
    cpu_computes_bf16,
    cpu_has_vnni,
    load_profile,
    parse_profile,
    render,
)

X86_FLAGS = "flags\t\t: fpu vme sse sse2 avx avx2 fma avx512f avx512_vnni"
PROFILE = """[profile]
name = "p"
[model]
path = "/m"
[server]
dtype = "bfloat16"
[memory]
need_gib = 8
[cpu.without_bf16]
dtype = "float32"
need_gib = 14
min_ram_gib = 22
"""


BF16 = (cpu_computes_bf16, CPU_BF16_ENV)
VNNI = (cpu_has_vnni, CPU_VNNI_ENV)


@pytest.mark.parametrize(
    ("probe", "cpuinfo", "expected"),
    [
        (BF16, f"processor\t: 0\n{X86_FLAGS}\n", False),  # AVX-512 without BF16 (a CI's kind)
        (BF16, f"processor\t: 0\n{X86_FLAGS} avx512_bf16\n", True),
        (BF16, f"{X86_FLAGS} amx_tile amx_bf16\n", True),
        (BF16, "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n", True),  # Arm (GB10's)
        (BF16, "processor\t: 0\nFeatures\t: fp asimd\n", False),
        (BF16, "model name\t: something without flags\n", True),  # unreadable: as written
        (VNNI, f"processor\t: 0\n{X86_FLAGS}\n", True),
        (VNNI, "flags\t\t: fpu sse2 avx avx2 fma avx_vnni\n", True),  # Alder Lake's VEX VNNI
        (VNNI, "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw\n", False),  # Skylake-X
        (VNNI, "flags\t\t: fpu sse2 avx avx2 fma\n", False),  # the AVX2 development box
        (VNNI, "processor\t: 0\nFeatures\t: fp asimd asimddp i8mm\n", False),  # Arm: unmeasured
        (VNNI, "model name\t: something without flags\n", False),  # unreadable: as written
    ],
    ids=lambda v: v[1] if isinstance(v, tuple) else None,
)
def test_cpu_features_are_read_from_cpuinfo(
    probe: tuple[Callable[[Path], bool], str],
    cpuinfo: str,
    expected: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bf16 arithmetic ([cpu.without_bf16]) and int8 dot products ([cpu.with_vnni]); a
    file that cannot be read leaves the profile as written either way."""
    has, env = probe
    monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr("platform.system", lambda: "Linux")
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    assert has(tmp_path / "cpuinfo") is expected
    assert has(tmp_path / "missing") is (probe is BF16)
    monkeypatch.setenv(env, "1" if not expected else "0")
    assert has(tmp_path / "cpuinfo") is not expected


def test_without_bf16_and_with_the_memory_the_profile_adapts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_schema, "ram_gib", lambda: 23.4)
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    adapted = parse_profile(PROFILE, Path("p.toml"))
    assert (adapted.dtype, adapted.memory_need_gib, adapted.cpu_without_bf16) == (
        "float32",
        14,
        True,
    )
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    kept = parse_profile(PROFILE, Path("p.toml"))
    assert (kept.dtype, kept.memory_need_gib, kept.cpu_without_bf16) == ("bfloat16", 8, False)
    # A 16 GB laptop without bf16 keeps bf16: float32 would not fit beside its desktop.
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    monkeypatch.setattr(_schema, "ram_gib", lambda: 15.5)
    small = parse_profile(PROFILE, Path("p.toml"))
    assert (small.dtype, small.memory_need_gib, small.cpu_without_bf16) == ("bfloat16", 8, False)


def test_an_unknown_key_in_the_table_is_named() -> None:
    with pytest.raises(ProfileError, match=r"p.toml: .*without_bf16.*threads"):
        parse_profile(PROFILE + "threads = 2\n", Path("p.toml"))


def test_the_shipped_cpu_coder_serves_float32_without_bf16(
    paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_schema, "ram_gib", lambda: 23.4)
    for bf16, dtype in (("1", "bfloat16"), ("0", "float32")):
        monkeypatch.setenv(CPU_BF16_ENV, bf16)
        argv = render(load_profile("cpu-coder", paths), paths, python="/py").argv
        assert argv[argv.index("--dtype") + 1] == dtype
        small = render(load_profile("cpu-coder-small", paths), paths, python="/py").argv
        assert small[small.index("--dtype") + 1] == dtype


def test_the_small_coder_keeps_bf16_on_a_small_machine(
    paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 0.5B's float32 engine held 6.9 GiB: under 12 GiB of memory it stays bf16,
    and the 1.5B (float32 from 22 GiB) does too."""
    monkeypatch.setattr(_schema, "ram_gib", lambda: 8.0)
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    for name in ("cpu-coder-small", "cpu-coder"):
        profile = load_profile(name, paths)
        argv = render(profile, paths, python="/py").argv
        assert argv[argv.index("--dtype") + 1] == "bfloat16"
        assert not profile.cpu_without_bf16


BUILTIN = PROFILE.replace('path = "/m"', 'builtin = "qwen2.5-coder-1.5b-instruct"')
WITH_VNNI = """
[cpu.with_vnni]
builtin = "qwen2.5-coder-1.5b-instruct-w8a8"
"""


def test_with_vnni_the_profile_serves_the_int8_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_schema, "ram_gib", lambda: 23.4)
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    monkeypatch.setenv(CPU_VNNI_ENV, "1")
    int8 = parse_profile(BUILTIN + WITH_VNNI, Path("p.toml"))
    assert (int8.model_builtin, int8.dtype, int8.memory_need_gib, int8.cpu_with_vnni) == (
        "qwen2.5-coder-1.5b-instruct-w8a8",
        "bfloat16",
        8,
        "qwen2.5-coder-1.5b-instruct",
    )
    # Without bf16 too: float32 activations beside the int8 weights, and the table's
    # own memory need where it gives one.
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    both = parse_profile(BUILTIN + WITH_VNNI + "need_gib = 9\n", Path("p.toml"))
    assert (both.model_builtin, both.dtype, both.memory_need_gib) == (
        "qwen2.5-coder-1.5b-instruct-w8a8",
        "float32",
        9,
    )
    assert both.cpu_with_vnni and both.cpu_without_bf16
    monkeypatch.setenv(CPU_VNNI_ENV, "0")
    kept = parse_profile(BUILTIN + WITH_VNNI, Path("p.toml"))
    assert (kept.model_builtin, kept.cpu_with_vnni) == ("qwen2.5-coder-1.5b-instruct", None)


def test_a_wrong_with_vnni_table_is_refused_on_every_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    for vnni in ("0", "1"):
        monkeypatch.setenv(CPU_VNNI_ENV, vnni)
        with pytest.raises(
            ProfileError,
            match=r"p.toml: \[cpu.with_vnni\] builtin 'nope' is "
            r"unknown \(known: smollm2",
        ):
            parse_profile(
                BUILTIN + WITH_VNNI.replace("qwen2.5-coder-1.5b-instruct-w8a8", "nope"),
                Path("p.toml"),
            )
        with pytest.raises(
            ProfileError,
            match=r"p.toml: \[cpu.with_vnni\] builtin replaces "
            r"\[model\] builtin; a profile with \[model\] path has none",
        ):
            parse_profile(PROFILE + WITH_VNNI, Path("p.toml"))
        with pytest.raises(ProfileError, match=r"p.toml: .*with_vnni.*dtype"):
            parse_profile(BUILTIN + WITH_VNNI + 'dtype = "int8"\n', Path("p.toml"))


def test_the_shipped_cpu_coder_serves_its_int8_copy_with_vnni(
    paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    for vnni, builtin in (
        ("1", "qwen2.5-coder-1.5b-instruct-w8a8"),
        ("0", "qwen2.5-coder-1.5b-instruct"),
    ):
        monkeypatch.setenv(CPU_VNNI_ENV, vnni)
        argv = render(load_profile("cpu-coder", paths), paths, python="/py").argv
        assert argv[argv.index("--model") + 1] == str(paths.models_dir / builtin)
        assert argv[argv.index("--served-model-name") + 1] == "qwen2.5-coder-1.5b-instruct"
        # The 0.5B has no copy: its W8A8 was never measured.
        small = load_profile("cpu-coder-small", paths)
        assert (small.model_builtin, small.cpu_with_vnni) == ("qwen2.5-coder-0.5b-instruct", None)
