"""The ESC-Role training job end to end on the embedded tiny model (CPU, the real CLI)."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import FAST_TRAIN, REPO_ROOT, requires_data, run_entry

pytestmark = requires_data


def train_losses(out: Path) -> list[float]:
    with (out / "metrics.csv").open() as fh:
        return [float(r["train/loss"]) for r in csv.DictReader(fh) if r.get("train/loss")]


def test_tiny_esc_role_run_writes_adapter_manifest_and_metrics(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_entry(
        "train.py", ["+exp=esc_role", *FAST_TRAIN, "trainer.max_steps=16", f"hydra.run.dir={out}"]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Adapter saved to {out}" in result.stdout

    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["peft_type"] == "LORA" and adapter["r"] == 16
    assert set(adapter["target_modules"]) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    assert (out / "adapter_model.safetensors").stat().st_size > 0
    assert (out / "tokenizer.json").exists() and (out / "last.ckpt").exists()

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["global_step"] == 16
    assert manifest["seed"] == 42 and manifest["git"]["commit"]
    assert {"torch", "transformers", "peft", "pytorch-lightning"} <= set(manifest["packages"])
    assert manifest["config"]["model"]["name"] == "tiny" and manifest["start_time"] and manifest["end_time"]
    assert any("DeepSpeedStrategy -> auto" in change for change in manifest["hardware_fallbacks"])

    losses = train_losses(out)
    assert len(losses) == 16 and losses[-1] < losses[0]


def test_adapter_loads_on_the_base_model_and_generates(tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from esc.models.loading import resolve_model_path
    from tests.helpers import compose

    out = tmp_path / "run"
    result = run_entry(
        "train.py", ["+exp=esc_role", *FAST_TRAIN, "trainer.max_steps=3", "peft.r=4", f"hydra.run.dir={out}"]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    base_path = resolve_model_path(compose(["model=tiny"]).model)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hello"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        generated = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b), "training left the adapter at its zero init"


def test_checkpoint_holds_only_the_adapter(tmp_path: Path) -> None:
    import torch

    out = tmp_path / "run"
    result = run_entry(
        "train.py", ["+exp=esc_role", *FAST_TRAIN, "trainer.max_steps=2", f"hydra.run.dir={out}"]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    state = torch.load(out / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert state and all("lora_" in name for name in state)


def test_rerun_after_kill_resumes_from_last_ckpt(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [
        "+exp=esc_role",
        *FAST_TRAIN,
        "callbacks.checkpoint.every_n_train_steps=3",
        f"hydra.run.dir={out}",
    ]
    proc = subprocess.Popen(
        [sys.executable, "train.py", *args, "trainer.max_steps=100000"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while not (out / "last.ckpt").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        time.sleep(0.5)  # let the checkpoint file be fully renamed into place
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (out / "last.ckpt").exists(), "the run never wrote a checkpoint"
    import torch

    killed_at = torch.load(out / "last.ckpt", map_location="cpu", weights_only=False)["global_step"]
    assert killed_at >= 3
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"

    target = killed_at + 4
    result = run_entry("train.py", [*args, f"trainer.max_steps={target}"])
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resumed_from"] == str(out / "last.ckpt")
    assert manifest["global_step"] == target and manifest["status"] == "completed"
    assert manifest["previous_attempts"][-1]["status"] == "running"  # the killed attempt is on record
    steps = [int(r["step"]) for r in csv.DictReader((out / "metrics.csv").open()) if r.get("train/loss")]
    assert max(steps) == target - 1


def test_local_sweep_runs_each_lora_rank(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_entry(
        "train.py",
        ["-m", "+exp=esc_role", *FAST_TRAIN, "trainer.max_steps=2", "peft.r=4,8", f"hydra.sweep.dir={sweep}"],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = sorted(json.loads(p.read_text())["r"] for p in sweep.glob("*/adapter_config.json"))
    assert ranks == [4, 8]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("data.languages=[fr]", "data.languages"),
        ("data.sources.esconv.enabled=false data.sources.smile.enabled=false", "data.sources"),
        ("model.tiny=null", "model.name_or_path"),
    ],
)
def test_user_errors_are_one_line_with_the_key_to_change(override: str, expected: str) -> None:
    result = run_entry(
        "train.py",
        ["+exp=esc_role", *FAST_TRAIN, *override.split(), "hydra.run.dir=/tmp/unused"],
        timeout=300,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and expected in error_lines[0], result.stderr[-2000:]


def test_wandb_without_credentials_logs_offline(tmp_path: Path) -> None:
    import os

    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), NETRC=str(tmp_path / "no-netrc"), PYTHONUNBUFFERED="1")
    args = ["+exp=esc_role", *FAST_TRAIN, "logger=csv_wandb", "trainer.max_steps=2", f"hydra.run.dir={out}"]
    result = subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert list((out / "wandb").glob("offline-run-*")), "W&B did not write an offline run"
    assert "logging to W&B offline" in result.stdout + result.stderr
