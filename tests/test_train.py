"""The ESC-Role training job end to end on the embedded tiny model (CPU, the real CLI)."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FAST_TRAIN, REPO_ROOT, requires_data, run_entry
from tests.train_probes import read_records

pytestmark = requires_data


def train_losses(out: Path) -> list[float]:
    with (out / "metrics.csv").open() as fh:
        return [float(r["train/loss"]) for r in csv.DictReader(fh) if r.get("train/loss")]


def test_tiny_esc_role_run_writes_adapter_manifest_and_metrics(esc_role_run: tuple[Path, list[str]]) -> None:
    out, _ = esc_role_run
    assert f"Adapter saved to {out}" in (out.parent / "stdout.txt").read_text()

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


def test_adapter_loads_on_the_base_model_and_generates(esc_role_run: tuple[Path, list[str]]) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from esc.models.loading import ModelSettings, resolve_model_path
    from tests.helpers import compose

    out, _ = esc_role_run
    base_path = resolve_model_path(ModelSettings.of(compose(["model=tiny"]).model))
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


def test_checkpoint_holds_only_the_adapter(esc_role_run: tuple[Path, list[str]]) -> None:
    import torch

    out, _ = esc_role_run
    state = torch.load(out / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert state and all("lora_" in name for name in state)


def train_steps(out: Path) -> list[int]:
    """The step of every `train/loss` row of OUT/metrics.csv, in file order."""
    with (out / "metrics.csv").open() as fh:
        return [int(r["step"]) for r in csv.DictReader(fh) if r.get("train/loss")]


def test_rerun_after_sigkill_continues_the_data_and_the_metrics(sigkill_resumed_run: Path) -> None:
    """SIGKILL after the step-2 checkpoint, during step 3; the same command again finishes the run.

    Compared with an uninterrupted run of the same seed: the resumed run trains exactly the batches
    the uninterrupted one trained from step 2 on (the data order continues; nothing is trained twice
    in the final model's history, nothing skipped), and metrics.csv has every step once.
    """
    folder = sigkill_resumed_run
    out = folder / "run"
    killed = json.loads((folder / "killed.json").read_text())
    assert killed["returncode"] == -signal.SIGKILL and killed["global_step"] == 2
    assert killed["status"] == "running"
    killed_steps = [
        int(r["step"]) for r in csv.DictReader(killed["metrics"].splitlines()) if r.get("train/loss")
    ]
    assert killed_steps == [0, 1, 2]  # step 2 was trained and logged after the checkpoint

    assert "dataloader is not resumable" not in (folder / "resumed_stderr.txt").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resumed_from"] == str(out / "last.ckpt")
    assert manifest["global_step"] == 6 and manifest["status"] == "completed"
    assert manifest["previous_attempts"][-1]["status"] == "running"  # the killed attempt is on record
    assert train_steps(out) == [0, 1, 2, 3, 4, 5]  # every step once: step 2's first row replaced

    uninterrupted = [(r["step"], r["rows"]) for r in read_records(folder / "full.jsonl")]
    attempts = [(r["step"], r["rows"]) for r in read_records(folder / "run.jsonl")]
    assert [s for s, _ in uninterrupted] == [0, 1, 2, 3, 4, 5]
    assert attempts[:3] == uninterrupted[:3]  # the killed run: steps 0-2 (step 2 lost with it)
    assert attempts[3:] == uninterrupted[2:]  # the resumed run: from the checkpoint's step 2 on
    assert len({row for _, rows in uninterrupted for row in rows}) == 12  # batches differ: a real check


@pytest.fixture
def finished_run(esc_role_run: tuple[Path, list[str]], tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of the finished run (16 steps, its last.ckpt), and the command line that made it."""
    src, args = esc_role_run
    out = tmp_path / "finished"
    shutil.copytree(src, out)
    return out, [*args[:-1], f"hydra.run.dir={out}"]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of a run folder but the records of each attempt: manifest, log, Hydra's .hydra/."""
    skip = {"manifest.json", "train.log"}
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name not in skip and ".hydra" not in p.parts
    }


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def test_a_cut_short_checkpoint_stops_the_rerun_and_changes_nothing(
    finished_run: tuple[Path, list[str]], tmp_path: Path
) -> None:
    src, args = finished_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    ckpt = out / "last.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])  # killed while writing it
    before = snapshot(out)
    result = run_entry("train.py", [*args[:-1], f"hydra.run.dir={out}", "trainer.max_steps=4"])
    assert "cannot read checkpoint" in one_error_line(result)
    assert snapshot(out) == before  # metrics.csv, last.ckpt, adapter: all as they were


def test_resuming_another_adapter_shape_stops_and_changes_nothing(
    finished_run: tuple[Path, list[str]], tmp_path: Path
) -> None:
    src, args = finished_run
    before = snapshot(src)
    out = tmp_path / "run"
    result = run_entry(
        "train.py",
        [
            *args[:-1],
            "peft.r=4",
            f"resume={src / 'last.ckpt'}",
            "trainer.max_steps=4",
            f"hydra.run.dir={out}",
        ],
    )
    line = one_error_line(result)
    assert "another adapter shape" in line and "peft.r" in line, line
    assert snapshot(src) == before
    assert not (out / "metrics.csv").exists() and not (out / "last.ckpt").exists()


def test_a_missing_resume_path_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_entry(
        "train.py",
        ["+exp=train/esc_role", *FAST_TRAIN, f"resume={tmp_path / 'nope.ckpt'}", f"hydra.run.dir={tmp_path}"],
    )
    assert "config `resume`" in one_error_line(result)


def test_local_sweep_runs_each_lora_rank(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_entry(
        "train.py",
        [
            "-m",
            "+exp=train/esc_role",
            *FAST_TRAIN,
            "trainer.max_steps=2",
            "peft.r=4,8",
            f"hydra.sweep.dir={sweep}",
        ],
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
def test_user_errors_are_one_line_with_the_key_to_change(
    override: str, expected: str, tmp_path: Path
) -> None:
    result = run_entry(
        "train.py",
        ["+exp=train/esc_role", *FAST_TRAIN, *override.split(), f"hydra.run.dir={tmp_path}"],
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
    args = [
        "+exp=train/esc_role",
        *FAST_TRAIN,
        "logger=csv_wandb",
        "trainer.max_steps=2",
        f"hydra.run.dir={out}",
    ]
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
