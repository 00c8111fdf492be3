"""DeepSpeed: the repo's ZeRO configs run real optimizer steps (CPU accelerator, gloo, one process).

One rank needs no shared-memory communication op, so tests/ds_step.py does not JIT-compile DeepSpeed's
(about a minute on 2 cores in each new environment). The Lightning strategy path itself needs CUDA:
`gpu` test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FAST_TRAIN, REPO_ROOT, conf_node, requires_data, run_entry

ZERO_STRATEGIES = ("deepspeed_zero2", "deepspeed_zero3", "deepspeed_zero3_offload")


@pytest.fixture(scope="module")
def zero_steps(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Each ZeRO config's report from tests/ds_step.py: one process runs them all (DeepSpeed's
    imports and its process group paid once), each engine on a fresh model."""
    out = tmp_path_factory.mktemp("deepspeed") / "ds.json"
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "MASTER_PORT": "29541", "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "tests/ds_step.py", str(out), *ZERO_STRATEGIES],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


@requires_data
def test_zero2_config_runs_optimizer_steps_on_cpu(zero_steps: dict) -> None:
    report = zero_steps["deepspeed_zero2"]
    assert report["stage"] == 2
    assert report["changed"] == report["trainable"] > 0
    assert report["losses"][-1] < report["losses"][0]


@requires_data
@pytest.mark.parametrize("strategy", ["deepspeed_zero3", "deepspeed_zero3_offload"])
def test_zero3_configs_run_optimizer_steps_on_cpu(strategy: str, zero_steps: dict) -> None:
    report = zero_steps[strategy]
    assert report["stage"] == 3
    assert report["changed"] == report["trainable"] > 0


@requires_data
def test_the_gpu_recipe_stops_without_cuda_and_says_how_to_run_on_cpu(tmp_path: Path) -> None:
    """+exp=train/esc_role sets cpu_fallback: false: no CUDA is one line naming what needs the GPU."""
    args = [a for a in FAST_TRAIN if not a.startswith("cpu_fallback=")]
    result = run_entry(
        "train.py",
        ["+exp=train/esc_role", *args, "trainer.max_steps=1", f"hydra.run.dir={tmp_path / 'run' / 'job'}"],
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr[-3000:]
    assert "config `cpu_fallback`" in lines[0] and "DeepSpeedStrategy" in lines[0]
    assert "trainer.precision bf16-mixed" in lines[0] and "model=tiny cpu_fallback=true" in lines[0]
    assert not (tmp_path / "run").exists()  # issue 37: the refused start left an empty run folder


def test_a_lock_left_by_an_interrupted_build_is_removed_and_a_live_one_kept(tmp_path: Path) -> None:
    """Issue 37: a first `make test` stopped while DeepSpeed JIT-compiled its CPU op left
    torch_extensions/py311_cpu/deepspeed_shm_comm/lock; every later ZeRO test then waited 900 s."""
    from esc.train.extensions import clear_stale_build_locks

    def lock(name: str, age_s: float) -> Path:
        path = tmp_path / "py311_cpu" / name / "lock"
        path.parent.mkdir(parents=True)
        path.touch()
        os.utime(path, (path.stat().st_atime - age_s, path.stat().st_mtime - age_s))
        return path

    stale, fresh, busy = lock("stale_op", 600), lock("fresh_op", 5), lock("busy_op", 600)
    compiler = subprocess.Popen(["sleep", "30"], cwd=busy.parent)  # a build still working in its folder
    try:
        assert clear_stale_build_locks(tmp_path) == [stale]
    finally:
        compiler.kill()
        compiler.wait()
    assert not stale.exists() and fresh.exists() and busy.exists()


ZERO3_CONFIG = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1}


@pytest.fixture
def zero3_loading(monkeypatch: pytest.MonkeyPatch):
    """`from_pretrained` spied on: it records its kwargs and whether transformers saw ZeRO-3 then,
    and returns the tiny model loaded beforehand (a real ZeRO-3 load needs GPUs). Afterwards the
    process is left without ZeRO-3, as before."""
    import gc

    from transformers import AutoModelForCausalLM
    from transformers.integrations import is_deepspeed_zero3_enabled

    import esc.models.loading as loading
    from esc.models.loading import ModelSettings, resolve_model_path
    from tests.helpers import compose

    model_cfg = compose(["model=tiny"]).model
    tiny = AutoModelForCausalLM.from_pretrained(resolve_model_path(ModelSettings.of(model_cfg)))
    calls: list[dict] = []
    suspended: list[str] = []

    def spy(path, **kwargs):
        calls.append({**kwargs, "zero3": is_deepspeed_zero3_enabled(), "suspended": list(suspended)})
        return tiny

    import deepspeed.runtime.zero.partition_parameters as zero_init

    monkeypatch.setattr(zero_init, "shutdown_init_context", lambda: suspended.append("zero.Init off"))
    monkeypatch.setattr(zero_init, "restore_init_context", lambda: suspended.append("zero.Init on"))
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    monkeypatch.setattr(loading, "_HF_DEEPSPEED_CONFIG", None)
    yield model_cfg, calls, suspended
    monkeypatch.undo()
    gc.collect()
    assert not is_deepspeed_zero3_enabled()


def lora_module(model_cfg, quantization: dict | None, strategy_config: dict | None):
    from types import SimpleNamespace

    import torch

    from esc.train.module import LoRACausalLM

    module = LoRACausalLM(
        model=model_cfg,
        peft={"r": 4, "lora_alpha": 8, "lora_dropout": 0.0},
        optimizer=lambda params: torch.optim.AdamW(params),
        quantization=quantization,
        gradient_checkpointing=True,
    )
    module._trainer = SimpleNamespace(strategy=SimpleNamespace(config=strategy_config), datamodule=None)
    return module


def test_zero3_builds_the_base_while_transformers_sees_the_deepspeed_config(zero3_loading) -> None:
    """ZeRO-3 without quantization: from_pretrained runs with an HfDeepSpeedConfig alive, which
    makes transformers build the model under zero.Init and fill every partition from the files."""
    from esc.train.strategies import deepspeed_config
    from tests.helpers import compose

    model_cfg, calls, suspended = zero3_loading
    config = deepspeed_config(compose(["strategy=deepspeed_zero3"]).strategy)
    module = lora_module(model_cfg, {"load_in_4bit": False}, config)
    module.configure_model()
    assert len(calls) == 1 and calls[0]["zero3"] is True
    assert "quantization_config" not in calls[0] and suspended == []
    assert module.model is not None


def test_qlora_under_zero3_stores_4bit_weights_in_the_compute_dtype(zero3_loading) -> None:
    import torch

    model_cfg, calls, suspended = zero3_loading
    nf4 = conf_node("quantization", overrides=["quantization=nf4"])  # compute_dtype bfloat16
    module = lora_module(model_cfg, nf4, ZERO3_CONFIG)
    module.configure_model()
    (call,) = calls
    assert call["quantization_config"].bnb_4bit_quant_storage == torch.bfloat16  # shardable by ZeRO-3
    assert call["quantization_config"].bnb_4bit_compute_dtype == torch.bfloat16
    assert call["dtype"] == torch.bfloat16  # one float dtype for every parameter
    assert call["suspended"] == ["zero.Init off"] and suspended == ["zero.Init off", "zero.Init on"]
    # prepare_model_for_kbit_training (fp32 casts) is skipped; checkpointing is still on
    assert module.model.base_model.model.is_gradient_checkpointing


def test_qlora_without_zero3_keeps_the_uint8_storage(zero3_loading) -> None:
    import torch

    from esc.models.loading import QuantizationSettings, bnb_config

    model_cfg, calls, _ = zero3_loading
    nf4 = conf_node("quantization", overrides=["quantization=nf4"])  # quant_storage null
    assert bnb_config(QuantizationSettings.of(nf4)).bnb_4bit_quant_storage == torch.uint8
    float16 = QuantizationSettings.of({**nf4, "quant_storage": "float16"})
    assert bnb_config(float16, zero3=True).bnb_4bit_quant_storage == torch.float16
    lora_module(model_cfg, {"load_in_4bit": False}, {"zero_optimization": {"stage": 2}}).configure_model()
    assert calls[0]["zero3"] is False  # ZeRO-2 does not shard parameters: a plain load


@pytest.mark.gpu
@requires_data
@pytest.mark.parametrize("quantization", ["none", "nf4"])
def test_zero3_trains_on_the_pretrained_weights(quantization: str, tmp_path: Path) -> None:
    """Lightning's DeepSpeed ZeRO-3 on one GPU: the base is loaded from its files (not left at the
    values zero.Init gave it), plain or 4-bit, and an adapter comes out."""
    from esc.models.loading import ModelSettings, resolve_model_path
    from tests.helpers import compose

    weights = Path(resolve_model_path(ModelSettings.of(compose(["model=tiny"]).model))) / "model.safetensors"
    out = tmp_path / "run"
    result = run_entry(
        "train.py",
        [
            "+exp=train/esc_role",
            *FAST_TRAIN,
            "cpu_fallback=false",
            "strategy=deepspeed_zero3",
            f"quantization={quantization}",
            "trainer.accelerator=gpu",
            "trainer.devices=1",
            "trainer.max_steps=2",
            "+callbacks.probe._target_=tests.train_probes.BaseWeightProbe",
            f"+callbacks.probe.path={tmp_path / 'probe.json'}",
            f"+callbacks.probe.weights={weights}",
            f"hydra.run.dir={out}",
        ],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe["max_abs_diff"] < 1e-2, probe  # bf16 rounding of the file's fp32 values at most
    assert (out / "adapter_model.safetensors").exists()


@pytest.mark.parametrize("strategy", ["deepspeed_zero2", "deepspeed_zero3", "deepspeed_zero3_offload"])
def test_the_lightning_strategy_gets_its_deepspeed_config_as_a_dict(
    strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning's DeepSpeedStrategy asserts `isinstance(config, dict)`: built from the Hydra node
    with its `config` left a DictConfig, every DeepSpeed run stopped there (seen on an H100,
    docs/gpu.md). Constructing the strategy needs no GPU once CUDA is said to be there."""
    import torch

    from esc.train.strategies import build_strategy, deepspeed_config
    from tests.helpers import compose

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = compose([f"strategy={strategy}"]).strategy
    built = build_strategy(cfg)
    assert type(built).__name__ == "DeepSpeedStrategy"
    assert type(built.config) is dict
    expected = deepspeed_config(cfg)
    assert built.config["zero_optimization"]["stage"] == expected["zero_optimization"]["stage"]
