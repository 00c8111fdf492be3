"""The GPU check's own machinery, on a CPU: the step-throughput callback, the peak-memory wrapper,
what travels to the device machine, and gpu_check.sh's step selection and time budget."""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from esc.train.throughput import StepThroughput, batch_tokens
from tests.helpers import REPO_ROOT


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Rows(torch.utils.data.Dataset):
    """Batches of 2 rows, 6 positions each, 5 of them real (the last is padding)."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.full((6,), float(i)), "attention_mask": torch.tensor([1, 1, 1, 1, 1, 0])}


class Slow(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(6, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(0.02)
        return self.layer(batch["input_ids"]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_step_throughput_logs_each_steps_time_and_real_tokens(tmp_path: Path) -> None:
    logger = pl.loggers.CSVLogger(tmp_path, name="", version="")
    trainer = pl.Trainer(
        max_steps=5, logger=logger, callbacks=[StepThroughput()], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
    )  # fmt: skip
    trainer.fit(Slow(), DataLoader(Rows(), batch_size=2))
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    seconds = [float(r["train/step_seconds"]) for r in rows if r.get("train/step_seconds")]
    rates = [float(r["train/tokens_per_s"]) for r in rows if r.get("train/tokens_per_s")]
    assert len(seconds) == len(rates) == 5
    assert all(s >= 0.02 for s in seconds)  # the step's own sleep at least
    assert all(abs(rate * s - 10) < 1e-6 * rate for rate, s in zip(rates, seconds, strict=True))  # 2 rows x 5

    gpu_check = load_benchmark("gpu_check")
    summary = gpu_check.throughput(rows)
    assert summary.startswith("steps 2-5: median") and "tokens/s" in summary


def test_batch_tokens_counts_the_attention_mask_else_every_position() -> None:
    assert (
        batch_tokens({"input_ids": torch.zeros(2, 4), "attention_mask": torch.tensor([[1, 1, 0, 0]] * 2)})
        == 4
    )
    assert batch_tokens({"input_ids": torch.zeros(3, 4)}) == 12


def test_gpu_peak_runs_the_script_and_prints_a_line_whatever_its_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import sys, torch\nprint('args', sys.argv[1:])\nsys.exit(3)\n")
    imported = tmp_path / "imported.txt"
    result = subprocess.run(
        [sys.executable, "benchmarks/gpu_peak.py", str(script), "a", "b=1"], cwd=REPO_ROOT,
        env={**os.environ, "ESC_IMPORTED_DISTRIBUTIONS": str(imported)}, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "args ['a', 'b=1']" in result.stdout
    expected = "peak GPU memory: no CUDA" if not torch.cuda.is_available() else "peak GPU memory: "
    assert expected in result.stdout.splitlines()[-1]
    assert "torch" in imported.read_text().split()


def test_gpu_carry_check_names_what_neither_the_device_nor_the_carry_has(tmp_path: Path) -> None:
    carry = load_benchmark("gpu_carry")
    imported = tmp_path / "imported.txt"
    imported.write_text("torch\nhydra-core\ngoogleapis-common-protos|protobuf\nsome-package-nobody-has\n")
    result = subprocess.run(
        [sys.executable, "benchmarks/gpu_carry.py", "check", str(imported)], cwd=REPO_ROOT,
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout.strip().endswith("some-package-nobody-has")
    assert "hydra-core" in carry.CARRY and "torch" in carry.DEVICE_HAS  # carried / already there
    imported.write_text("torch\nhydra-core\n")
    ok = subprocess.run([sys.executable, "benchmarks/gpu_carry.py", "check", str(imported)], cwd=REPO_ROOT)
    assert ok.returncode == 0


def run_check(tmp_path: Path, returncode: int = 0, **env: str) -> str:
    result = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--cpu"], cwd=REPO_ROOT, capture_output=True, text=True,
        env={**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, **env}, timeout=300,
    )  # fmt: skip
    assert result.returncode == returncode, result.stderr[-2000:]
    assert result.stdout == (tmp_path / "gpu_check.log").read_text()  # the log holds what was printed
    return result.stdout


def test_gpu_check_runs_only_the_steps_asked_for(tmp_path: Path) -> None:
    out = run_check(tmp_path, GPU_CHECK_STEPS="versions")
    summary = out.split("=== summary")[1].splitlines()[1:]
    steps = [line.split()[0] for line in summary if line.strip() and "step(s)" not in line]
    assert steps == ["versions"]
    assert "versions               exit 0" in out and "GPU: none (CPU rehearsal)" in out
    assert "0 step(s) failed or skipped" in out


def test_gpu_check_skips_what_its_time_budget_cannot_hold(tmp_path: Path) -> None:
    out = run_check(tmp_path, returncode=1, GPU_CHECK_BUDGET="15")  # skipped steps are not a pass
    assert "=== versions: SKIPPED" in out and "=== rank-entry: SKIPPED" in out
    assert "14 step(s) failed or skipped" in out
    assert "train.py" not in out  # nothing started
