"""Resume pieces on their own: the resumable data order, metrics.csv continued, unusable checkpoints.

The whole job killed with SIGKILL and rerun is in tests/test_train.py.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from esc.config_rules import load_section
from esc.errors import ConfigError, UserError
from esc.train.datamodule import ResumableDataLoader, ResumableSampler
from esc.train.loggers import AppendingExperimentWriter
from esc.train.run import TrainTop, _resume_checkpoint, checkpoint_step


def loader(size: int = 20, batch_size: int = 3, num_replicas: int = 1, rank: int = 0, seed: int = 7):
    data = list(range(size))
    sampler = ResumableSampler(data, num_replicas=num_replicas, rank=rank, seed=seed)
    return ResumableDataLoader(data, batch_size=batch_size, sampler=sampler, collate_fn=list)


def epoch(dl: ResumableDataLoader, epoch_number: int = 0) -> list[list[int]]:
    dl.sampler.set_epoch(epoch_number)
    return list(dl)


def test_a_resumed_loader_continues_the_epoch_where_the_checkpoint_was() -> None:
    whole = epoch(loader())
    first = loader()
    first.sampler.set_epoch(0)
    batches = iter(first)
    seen = [next(batches), next(batches)]
    state = first.state_dict()
    assert state["batches"] == 2 and state["epoch"] == 0

    again = loader()
    again.load_state_dict(state)
    rest = epoch(again)
    assert seen + rest == whole  # every batch once, in the uninterrupted order
    assert again.state_dict()["batches"] == len(whole)
    assert epoch(again, 1) != whole and sorted(sum(epoch(again, 1), [])) == list(range(20))  # next epoch: all


def test_a_checkpoint_at_an_epoch_end_skips_nothing_of_the_next() -> None:
    first = loader()
    assert len(epoch(first)) == 7  # 20 items in batches of 3
    again = loader()
    again.load_state_dict(first.state_dict())  # "epoch 0 done"
    assert sum(epoch(again, 1), []) == sum(epoch(loader(), 1), [])


def test_a_state_from_another_epoch_does_not_skip() -> None:
    first = loader()
    first.sampler.set_epoch(3)
    next(iter(first))
    again = loader()
    again.load_state_dict(first.state_dict())
    assert len(epoch(again, 4)) == len(epoch(loader(), 4))  # Lightning moved on: a whole epoch


def test_resuming_mid_epoch_with_other_data_is_a_one_line_error() -> None:
    first = loader()
    first.sampler.set_epoch(0)
    next(iter(first))
    state = first.state_dict()
    with pytest.raises(UserError, match=r"batch_size 3 -> 4.*resume=never") as err:
        loader(batch_size=4).load_state_dict(state)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="dataset_size 20 -> 21"):
        loader(size=21).load_state_dict(state)


def test_ranks_get_disjoint_shares_of_one_shuffle() -> None:
    shares = [sum(epoch(loader(num_replicas=2, rank=r)), []) for r in (0, 1)]
    assert not set(shares[0]) & set(shares[1]) and sorted(shares[0] + shares[1]) == list(range(20))


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_metrics_are_continued_and_rows_after_the_checkpoint_replaced(tmp_path: Path) -> None:
    old = [{"epoch": "0", "step": str(s), "train/loss": str(9 - s), "val/loss": ""} for s in range(4)]
    old.append({"epoch": "0", "step": "3", "train/loss": "", "val/loss": "7.5"})
    write_csv(tmp_path / "metrics.csv", old)
    before = (tmp_path / "metrics.csv").read_bytes()

    writer = AppendingExperimentWriter(str(tmp_path), start_step=2)  # resumed from a step-2 checkpoint
    writer.save()  # nothing logged yet (e.g. the resume failed): nothing changes
    assert (tmp_path / "metrics.csv").read_bytes() == before
    for step in (2, 3):
        writer.log_metrics({"epoch": 0, "train/loss": 1.0 + step}, step)
        writer.save()
    rows = read_csv(tmp_path / "metrics.csv")
    assert [(r["step"], r["train/loss"]) for r in rows] == [
        ("0", "9"),
        ("1", "8"),
        ("2", "3.0"),
        ("3", "4.0"),
    ]
    assert list(rows[0]) == ["epoch", "step", "train/loss", "val/loss"]  # the old columns stay


def test_a_fresh_run_starts_metrics_over(tmp_path: Path) -> None:
    write_csv(tmp_path / "metrics.csv", [{"step": "0", "train/loss": "9"}, {"step": "1", "train/loss": "8"}])
    writer = AppendingExperimentWriter(str(tmp_path), start_step=0)
    writer.log_metrics({"train/loss": 5.0}, 0)
    writer.save()
    assert [(r["step"], r["train/loss"]) for r in read_csv(tmp_path / "metrics.csv")] == [("0", "5.0")]


def test_unreadable_checkpoints_are_one_line_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.ckpt"
    torch.save({"global_step": 6, "state_dict": {}}, good)
    assert checkpoint_step(good) == 6
    cut = tmp_path / "last.ckpt"
    cut.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])  # a kill while writing
    with pytest.raises(UserError, match=r"cannot read checkpoint .*last\.ckpt.*resume=never") as err:
        checkpoint_step(cut)
    assert "\n" not in str(err.value)
    assert cut.stat().st_size == len(good.read_bytes()) // 2  # left as it was
    (tmp_path / "ds").mkdir()
    with pytest.raises(UserError, match="without DeepSpeed model states"):
        checkpoint_step(tmp_path / "ds")
    (tmp_path / "ds" / "checkpoint").mkdir()
    torch.save({"global_step": 4}, tmp_path / "ds" / "checkpoint" / "mp_rank_00_model_states.pt")
    assert checkpoint_step(tmp_path / "ds") == 4


def test_an_explicit_resume_path_must_exist(tmp_path: Path) -> None:
    """Refused by the settings (`TrainTop.resume`) before any work."""
    top = {"seed": 0, "cpu_fallback": False, "job": {"_target_": "esc.train.run.train"}}
    with pytest.raises(ConfigError, match=r"config `resume`: .*nope\.ckpt: no such path"):
        load_section("", TrainTop, {**top, "resume": str(tmp_path / "nope.ckpt")})
    assert _resume_checkpoint(str(tmp_path), tmp_path) == str(tmp_path)
