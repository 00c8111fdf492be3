"""Resume restores the random states: a run killed with SIGKILL and rerun trains bit for bit like an
uninterrupted one, with LoRA dropout on (`esc/train/rng.py`).

The data order and metrics rows of a resumed run are tested in tests/test_train.py, on the same
killed and resumed run (`sigkill_resumed_run`, tests/conftest.py: built once per test run).
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import torch

from esc.train.rng import TrainingRandomness, collect_states, restore_states, states_for_rank
from tests.helpers import requires_data


def draws() -> tuple:
    """One draw from each generator training may use."""
    return random.random(), float(np.random.rand()), torch.rand(4).tolist(), float(np.random.randn())


def test_states_survive_a_checkpoint_file_and_restore_every_generator(tmp_path: Path) -> None:
    np.random.randn()  # NumPy's cached Gaussian is part of its state
    torch.save({"states": collect_states()}, tmp_path / "states.pt")
    expected = draws()
    draws()
    loaded = torch.load(tmp_path / "states.pt", weights_only=True)  # how Lightning loads checkpoints
    restore_states(loaded["states"])
    assert draws() == expected


def train(randomness: TrainingRandomness, steps: int, between: bool) -> list[list[float]]:
    """Each step's draws; with `between`, other code draws from torch's generator between steps."""
    out = []
    for _ in range(steps):
        randomness.step_starts()
        out.append(torch.rand(3).tolist())
        randomness.step_ends()
        if between:
            torch.rand(5)
    return out


def test_the_training_stream_ignores_draws_between_steps_and_resumes_from_a_checkpoint(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    uninterrupted = train(TrainingRandomness(), 4, between=False)

    torch.manual_seed(0)
    first = TrainingRandomness()
    assert train(first, 2, between=True) == uninterrupted[:2]
    torch.save(first.current(), tmp_path / "stream.pt")
    torch.manual_seed(123)  # the rerun: another process, other draws before training goes on
    torch.rand(7)
    resumed = TrainingRandomness()
    resumed.resume(torch.load(tmp_path / "stream.pt", weights_only=True))
    assert train(resumed, 2, between=True) == uninterrupted[2:]


def test_states_of_another_number_of_ranks_are_not_used(caplog) -> None:
    saved = [{"rank": 0}, {"rank": 1}]
    assert states_for_rank(saved, 1, 2) == {"rank": 1}
    assert states_for_rank(saved, 0, 1) is None and "2 processes and this run has 1" in caplog.text
    assert states_for_rank(None, 0, 1) is None and "no random states" in caplog.text


def train_losses(out: Path) -> list[tuple[int, str]]:
    """(step, train/loss as written) of every training row of OUT/metrics.csv, in file order."""
    with (out / "metrics.csv").open() as fh:
        return [(int(r["step"]), r["train/loss"]) for r in csv.DictReader(fh) if r.get("train/loss")]


def adapter_weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "adapter_model.safetensors"))


@requires_data
def test_rerun_after_sigkill_trains_bit_for_bit_like_an_uninterrupted_run(sigkill_resumed_run: Path) -> None:
    """SIGKILL after the step-2 checkpoint, during step 3; the same command again finishes the run.

    Dropout draws from torch's generator, and so do other things between two steps: validation
    right after each checkpoint (`val_check_interval=2`) and the resumed run's data loader, created
    after the checkpoint is loaded. None of them may shift the dropout masks of the steps after it.
    """
    tmp_path = sigkill_resumed_run  # full/: the uninterrupted twin; run/: killed, then resumed
    out = tmp_path / "run"
    manifest = json.loads((tmp_path / "full" / "manifest.json").read_text())
    assert manifest["config"]["peft"]["lora_dropout"] > 0  # what makes this a test of the random state
    assert manifest["config"]["trainer"]["val_check_interval"] == 2
    assert json.loads((tmp_path / "killed.json").read_text())["global_step"] == 2
    assert json.loads((out / "manifest.json").read_text())["resumed_from"] == str(out / "last.ckpt")

    expected = train_losses(tmp_path / "full")
    assert [step for step, _ in expected] == [0, 1, 2, 3, 4, 5]
    assert train_losses(out) == expected  # every step's loss, to the last digit written
    weights, uninterrupted = adapter_weights(out), adapter_weights(tmp_path / "full")
    assert weights.keys() == uninterrupted.keys()
    different = [name for name, w in uninterrupted.items() if not torch.equal(weights[name], w)]
    assert not different, f"{len(different)} of {len(weights)} adapter tensors differ, e.g. {different[0]}"
