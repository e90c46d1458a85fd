"""Converting the cpu-demo GGUF: a model that does not match is an error, not random weights."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.errors import EngineStateError
from engine.models import convert_gguf, smollm2_gguf_path
from engine.staging import DiskSpaceError

pytestmark = pytest.mark.slow  # loads the 98 MB GGUF (about 20 s)


def test_a_tensor_the_rebuilt_model_lacks_stops_the_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    real: Any = transformers.AutoModelForCausalLM.from_config

    def with_extra(config: Any, **kw: Any) -> Any:
        model = real(config, **kw)
        model.register_buffer("surprise", torch.zeros(1))  # a tensor the GGUF never had
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", with_extra)
    target = tmp_path / "models" / "smollm2"
    with pytest.raises(EngineStateError, match="do not match") as info:
        convert_gguf(smollm2_gguf_path(), target)
    assert "surprise" in str(info.value)
    assert not target.exists() and not list(target.parent.glob(".smollm2-*"))


def test_a_conversion_the_disk_cannot_hold_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.disk_usage(tmp_path)
    monkeypatch.setattr("engine.staging.shutil.disk_usage", lambda _p: real._replace(free=1 << 20))
    target = tmp_path / "models" / "smollm2"
    # 135M bf16 parameters with the embedding tied to the head: 0.25 GiB plus headroom.
    with pytest.raises(
        DiskSpaceError,
        match=rf"not enough disk space in {target.parent} for the bf16 conversion of "
        rf"{smollm2_gguf_path().name}: it needs about 0\.3 GiB and 0\.0 GiB are free",
    ):
        convert_gguf(smollm2_gguf_path(), target)
    assert not target.exists() and not list(target.parent.glob(".smollm2-*"))
