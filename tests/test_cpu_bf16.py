"""`cpu_bf16` (issue 25): bfloat16 on a CPU is a measured, logged choice named in the identity."""

from __future__ import annotations

import logging

import pytest
import torch

from esc.chat.backends.hf import HFBackend
from esc.chat.base import GenerationSettings
from esc.errors import ConfigError
from esc.models import cpu_bf16
from tests.helpers import compose
from tests.test_chat_backends import CONVERSATIONS


@pytest.fixture(scope="module")
def tiny_cfg():
    return compose(["model=tiny"]).model


def test_auto_follows_the_measurement(monkeypatch):
    monkeypatch.setattr(cpu_bf16, "measured_speedup", lambda *shape, **kw: 2.1)
    choice = cpu_bf16.decide_bf16("auto")
    assert choice.use and choice.speedup == 2.1 and "2.10x" in choice.reason()
    monkeypatch.setattr(cpu_bf16, "measured_speedup", lambda *shape, **kw: 0.4)  # slower, not emulated
    assert not cpu_bf16.decide_bf16("auto").use
    assert cpu_bf16.decide_bf16("true").use and cpu_bf16.decide_bf16("true").speedup is None
    assert not cpu_bf16.decide_bf16("false").use


@pytest.mark.parametrize(("probe", "full", "sizes"), [(0.007, None, 1), (0.9, 1.8, 2), (1.1, 0.9, 2)])
def test_a_probe_that_shows_emulated_bfloat16_spares_the_full_measurement(monkeypatch, probe, full, sizes):
    """Emulated bfloat16 (~150x slower: AVX2-only CPUs) is settled by the small product; near or
    above 1x, the full product decides."""
    timed = []

    def measured(hidden=1024, intermediate=4096, rows=128, repeats=3):
        timed.append((hidden, intermediate, rows))
        return probe if (hidden, intermediate, rows) == cpu_bf16.PROBE else full

    monkeypatch.setattr(cpu_bf16, "measured_speedup", measured)
    choice = cpu_bf16.decide_bf16("auto")
    assert timed[0] == cpu_bf16.PROBE and len(timed) == sizes
    assert choice.speedup == (probe if full is None else full)
    assert choice.use == (choice.speedup >= cpu_bf16.MIN_SPEEDUP)


def test_the_measurement_is_a_real_ratio():
    speedup = cpu_bf16.measured_speedup(64, 128, rows=16, repeats=2)
    assert 0.01 < speedup < 100


def test_bfloat16_on_the_cpu_is_logged_named_in_the_identity_and_decodes(tiny_cfg, caplog):
    plain = HFBackend.of(model=tiny_cfg, device="cpu")
    half = HFBackend.of(model=tiny_cfg, device="cpu", cpu_bf16=True)  # YAML's `true`
    try:
        with caplog.at_level(logging.WARNING, logger="esc.chat.backends.hf"):
            half.load()
        assert "runs in bfloat16 on the CPU: cpu_bf16=true" in caplog.text
        assert next(half._model.parameters()).dtype == torch.bfloat16
        assert half.identity()["dtype"] == "bfloat16" and half.identity()["cpu_bf16"] == "true"
        assert plain.identity()["dtype"] == "float32" and "cpu_bf16" not in plain.identity()
        replies = half.generate(CONVERSATIONS, GenerationSettings(max_new_tokens=12))
        assert all(r.ok and r.completion_tokens == 12 for r in replies)
    finally:
        plain.close()
        half.close()


def test_a_bad_setting_names_its_key(tiny_cfg):
    with pytest.raises(ConfigError, match=r"target\.backend\.cpu_bf16"):
        HFBackend.of(model=tiny_cfg, device="cpu", cpu_bf16="sometimes", config_key="target.backend")
