"""4-bit QLoRA: trains on CPU with bitsandbytes >= 0.45, and fails clearly where it cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esc.errors import ConfigError
from esc.models.loading import QuantizationSettings, bnb_config
from tests.helpers import FAST_TRAIN, conf_node, requires_data, run_entry


@requires_data
def test_qlora_trains_the_tiny_model_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_entry(
        "train.py",
        [
            "+exp=train/esc_role",
            *FAST_TRAIN,
            "quantization=nf4",
            "trainer.num_sanity_val_steps=2",
            "trainer.max_steps=3",
            f"hydra.run.dir={out}",
        ],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipping sanity validation" in result.stdout + result.stderr
    assert json.loads((out / "adapter_config.json").read_text())["peft_type"] == "LORA"
    assert json.loads((out / "manifest.json").read_text())["global_step"] == 3


def test_qlora_without_bitsandbytes_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    with pytest.raises(ConfigError, match="`quantization`.*quantization=none"):
        bnb_config(QuantizationSettings.of(conf_node("quantization", overrides=["quantization=nf4"])))


def test_qlora_on_an_unsupported_device_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import bitsandbytes.functional as bnbf

    def unsupported(*args, **kwargs):
        raise RuntimeError("no 4-bit kernel for this device\nsecond line")

    monkeypatch.setattr(bnbf, "quantize_4bit", unsupported)
    with pytest.raises(ConfigError) as err:
        bnb_config(QuantizationSettings.of(conf_node("quantization", overrides=["quantization=nf4"])))
    assert "no 4-bit kernel" in str(err.value) and "\n" not in str(err.value)


def test_no_quantization_gives_no_config() -> None:
    assert (
        bnb_config(QuantizationSettings.of(conf_node("quantization", overrides=["quantization=none"])))
        is None
    )
    assert bnb_config(None) is None
