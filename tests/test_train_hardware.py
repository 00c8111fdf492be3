"""`cpu_fallback`: GPU recipes stop on a machine without CUDA; CPU runs swap GPU-only settings."""

from __future__ import annotations

import pytest
import torch

from esc.errors import ConfigError
from esc.train.run import adapt_to_hardware
from tests.helpers import compose

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens without CUDA")


def test_the_gpu_recipe_refuses_a_cpu_naming_what_needs_the_gpu() -> None:
    cfg = compose(["+exp=train/esc_role"])
    assert cfg.cpu_fallback is False
    with pytest.raises(ConfigError) as err:
        adapt_to_hardware(cfg)
    message = str(err.value)
    assert message.startswith("config `cpu_fallback`") and "\n" not in message
    assert "strategy DeepSpeedStrategy" in message and "trainer.precision bf16-mixed" in message
    assert "`model=tiny cpu_fallback=true`" in message and "+exp=train/esc_role_smollm2" in message


def test_cpu_fallback_swaps_each_gpu_only_setting() -> None:
    cfg = compose(["+exp=train/esc_role", "model=tiny", "cpu_fallback=true", "optimizer=deepspeed_cpu_adam"])
    changes = adapt_to_hardware(cfg)
    assert [c.split(" -> ")[0] for c in changes] == [
        "strategy DeepSpeedStrategy",
        "trainer.precision bf16-mixed",
        "optimizer DeepSpeed",
    ]
    assert cfg.strategy.name == "auto" and cfg.trainer.precision == "32-true"
    assert cfg.module.optimizer._target_ == "torch.optim.AdamW"


@pytest.mark.parametrize(
    ("overrides", "swapped"),
    [
        (["strategy=ddp"], False),  # gloo on CPUs: DDP stays (tests/test_train_ddp.py)
        (["strategy=ddp", "+strategy.process_group_backend=nccl"], True),
        (["strategy=fsdp"], True),
        (["trainer.accelerator=gpu"], True),
        (["+exp=train/esc_role_smollm2"], False),  # the CPU recipe needs nothing swapped
    ],
)
def test_what_counts_as_gpu_only(overrides: list[str], swapped: bool) -> None:
    assert bool(adapt_to_hardware(compose(overrides))) is swapped
    with_fallback_off = compose([*overrides, "cpu_fallback=false"])
    if swapped:
        with pytest.raises(ConfigError, match="config `cpu_fallback`"):
            adapt_to_hardware(with_fallback_off)
    else:
        assert adapt_to_hardware(with_fallback_off) == []
