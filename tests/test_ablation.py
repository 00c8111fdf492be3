"""The held-out loss of a training run, the ablation grid's table and the Optuna search, on the tiny
model (issue 9): `python train.py -m +exp=train/esc_role_ablation` / `+exp=train/esc_role_lr_optuna`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from esc.errors import ConfigError
from esc.train.ablation import write_table
from esc.train.heldout import heldout_samples
from tests.helpers import requires_data, run_entry

TINY = [
    "model=tiny",
    "trainer.max_steps=2",
    "callbacks.heldout.dialogues=2",
    "data.sources.esconv.max_samples=16",
    "trainer.enable_progress_bar=false",
]


@requires_data
def test_the_grid_trains_each_variant_and_writes_one_table(tmp_path: Path) -> None:
    sweep = tmp_path / "grid"
    run = run_entry(
        "train.py",
        [
            "-m",
            "+exp=train/esc_role_ablation",
            "ablation=paper,no_roleplay",
            *TINY,
            f"hydra.sweep.dir={sweep}",
        ],
    )
    assert run.returncode == 0, run.stderr[-3000:]
    jobs = [json.loads((sweep / str(k) / "heldout.json").read_text()) for k in (0, 1)]
    for job in jobs:
        assert job["source"] == "esconv_valid" and job["dialogues"] == 2 and job["step"] == 2
        assert job["before"] > job["after"] > 0  # two LoRA steps at the tiny model's rate move it
    assert jobs[0]["before"] == pytest.approx(jobs[1]["before"])  # the same base model, scored alike
    assert jobs[0]["train_rows"] > jobs[1]["train_rows"]  # no_roleplay: ESC dialogues only
    table = (sweep / "ablation.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| 0 ") or line.startswith("| 1 ")]
    assert "| paper |" in rows[0] and "| no_roleplay |" in rows[1]
    assert f"{jobs[1]['after']:.4f}" in rows[1]
    assert table in run.stdout  # printed at the end of the sweep
    assert write_table(sweep) == table  # `esc ablation SWEEP_DIR` rebuilds it


@requires_data
def test_optuna_searches_the_lora_rate_on_the_held_out_loss(tmp_path: Path) -> None:
    sweep = tmp_path / "optuna"
    run = run_entry(
        "train.py",
        [
            "-m",
            "+exp=train/esc_role_lr_optuna",
            "hydra.sweeper.n_trials=2",
            *TINY,
            f"hydra.sweep.dir={sweep}",
        ],
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    trials = [json.loads((sweep / str(k) / "heldout.json").read_text())["after"] for k in (0, 1)]
    rates = [yaml.safe_load((sweep / str(k) / ".hydra" / "overrides.yaml").read_text()) for k in (0, 1)]
    assert rates[0] != rates[1]  # two sampled learning rates
    assert result["best_value"] == pytest.approx(min(trials))  # the objective is the held-out loss
    assert 1e-5 <= result["best_params"]["model.lora_lr"] <= 1e-2


@requires_data
def test_a_held_out_dialogue_in_the_training_data_is_refused(tmp_path: Path) -> None:
    run = run_entry(
        "train.py",
        ["+exp=train/esc_role_heldout", *TINY, "data.sources.esconv.splits=[train,valid]",
         "data.sources.esconv.max_samples=null", f"hydra.run.dir={tmp_path}"],
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert (
        run.stderr.strip()
        .splitlines()[-1]
        .startswith("error: config `callbacks.heldout.source`: 2 held-out dialogues are training samples too")
    )


@requires_data
def test_held_out_sets() -> None:
    valid = heldout_samples("esconv_valid", 3)
    assert [s.id for s in valid] == ["esconv/valid/0", "esconv/valid/1", "esconv/valid/2"]
    from esc.config_rules import load_section
    from esc.train.run import HeldOut

    with pytest.raises(ConfigError, match="config `callbacks.heldout.source`: must be 'esconv_valid' or"):
        load_section("callbacks.heldout", HeldOut, {"source": "smile", "dialogues": 3, "batch_size": 1})
