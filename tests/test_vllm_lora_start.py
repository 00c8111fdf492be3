"""A vLLM engine starts with LoRA on exactly when a request will name an adapter (issue 50, item 8).

The engine turns LoRA on only where it sees an adapter (LoRA costs 1.5x decoding on the CPU build),
and an engine started without it refuses every request that names one. The judge's adapters
(`judge.adapters.root`) reach the engine as per-request adapters, so the judge names them to the
backend before it loads. Runs without vLLM: it checks the engine arguments the backend would start
with; `tests/test_vllm.py` (CI's vLLM smoke) runs the real engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from esc.errors import UserError
from esc.scoring.judges import build_judge, judge_settings
from tests.helpers import compose, requires_data

pytestmark = requires_data


def _adapter(folder: Path) -> Path:
    """A PEFT LoRA adapter on the tiny model (zero-initialised B: the files are what matters)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from esc.models.loading import ModelSettings, resolve_model_path

    base = AutoModelForCausalLM.from_pretrained(
        resolve_model_path(ModelSettings.of(compose(["model=tiny"]).model))
    )
    get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj"])).save_pretrained(folder)
    return folder


def _vllm_backend(judge):
    backend = judge.backend
    return getattr(backend, "inner", backend)  # under the request cache


def _check_ready(judge) -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:  # here: the backend's own check refuses (vLLM is not installed), after the adapters
        with pytest.raises(UserError, match="vllm is not installed"):
            judge.check_ready()
    else:
        judge.check_ready()


def test_a_vllm_judge_with_score_adapters_starts_its_engine_with_lora(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ESC_CACHE_DIR", str(tmp_path / "cache"))
    adapters = tmp_path / "adapters"
    for dim in ("empathy", "fluency"):
        _adapter(adapters / dim)
    cfg = compose(
        [
            "judge=tiny_vllm",
            "judge.adapters.layout=per_dimension",
            f"judge.adapters.root={adapters}",
            "+judge.adapters.dimensions=[empathy,fluency]",
        ],
        config_name="rank",
    )
    judge = build_judge(judge_settings(cfg.judge))
    assert _vllm_backend(judge)._llm_args()["enable_lora"] is False  # nothing named yet
    _check_ready(judge)
    assert _vllm_backend(judge)._llm_args()["enable_lora"] is True


def test_a_vllm_judge_without_adapters_keeps_lora_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ESC_CACHE_DIR", str(tmp_path / "cache"))
    judge = build_judge(judge_settings(compose(["judge=tiny_vllm"], config_name="rank").judge))
    _check_ready(judge)
    assert _vllm_backend(judge)._llm_args()["enable_lora"] is False
