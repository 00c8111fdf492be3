"""GPU paths of the training job (skipped without CUDA): Lightning DeepSpeed, FSDP, bf16, QLoRA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import FAST_TRAIN, requires_data, run_entry

pytestmark = [pytest.mark.gpu, requires_data]

GPU_RUN = [
    *FAST_TRAIN,
    "cpu_fallback=false",
    "trainer.accelerator=gpu",
    "trainer.devices=1",
    "trainer.max_steps=4",
]


@pytest.mark.parametrize("strategy", ["deepspeed_zero2", "deepspeed_zero3", "fsdp", "ddp"])
def test_strategy_trains_in_bf16(strategy: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_entry(
        "train.py",
        [
            "+exp=train/esc_role",
            *GPU_RUN,
            f"strategy={strategy}",
            "trainer.precision=bf16-mixed",
            f"hydra.run.dir={out}",
        ],
        process=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "adapter_model.safetensors").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["global_step"] == 4 and manifest["hardware_fallbacks"] == []


def test_qlora_trains_on_gpu(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_entry(
        "train.py",
        [
            "+exp=train/esc_role",
            *GPU_RUN,
            "strategy=auto",
            "quantization=nf4",
            "trainer.precision=bf16-mixed",
            f"hydra.run.dir={out}",
        ],
        process=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "adapter_model.safetensors").exists()
