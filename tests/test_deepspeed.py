"""DeepSpeed: the repo's ZeRO configs run real optimizer steps (CPU accelerator, gloo, one process).

The first run JIT-compiles DeepSpeed's CPU communication op (about a minute on 2 cores); later runs
reuse it from ~/.cache/torch_extensions. The Lightning strategy path itself needs CUDA: `gpu` test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FAST_TRAIN, REPO_ROOT, requires_data, run_entry


def run_zero_steps(strategy: str, tmp_path: Path, port: int) -> dict:
    out = tmp_path / "ds.json"
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "MASTER_PORT": str(port), "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "tests/ds_step.py", strategy, str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


@requires_data
def test_zero2_config_runs_optimizer_steps_on_cpu(tmp_path: Path) -> None:
    report = run_zero_steps("deepspeed_zero2", tmp_path, 29541)
    assert report["stage"] == 2
    assert report["changed"] == report["trainable"] > 0
    assert report["losses"][-1] < report["losses"][0]


@requires_data
@pytest.mark.parametrize("strategy", ["deepspeed_zero3", "deepspeed_zero3_offload"])
def test_zero3_configs_run_optimizer_steps_on_cpu(strategy: str, tmp_path: Path) -> None:
    report = run_zero_steps(strategy, tmp_path, 29551 + len(strategy))
    assert report["stage"] == 3
    assert report["changed"] == report["trainable"] > 0


@requires_data
def test_lightning_deepspeed_strategy_refuses_cpu_when_fallback_is_off(tmp_path: Path) -> None:
    result = run_entry(
        "train.py",
        [
            "+exp=esc_role",
            *FAST_TRAIN,
            "cpu_fallback=false",
            "trainer.max_steps=1",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "config `strategy`" in result.stderr
