"""pytest hooks: `gpu` tests are skipped where no CUDA GPU is visible; under pytest-xdist
(`make test`: two workers, one file at a time) the files that take minutes go first. Fixtures made
once per test run for several files: `esc_role_run`, `sigkill_resumed_run`."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.helpers import FAST_TRAIN, built_once, run_entry

# Files whose tests add up to most time on 2 cores (the junit times of a full run at 39387f6, idle:
# test_bad_inputs.py 124 s, test_scoring_agreement.py 72 s, ...). Run first, so the two workers of
# `make test` end together instead of one finishing a long file alone.
SLOW_FILES_FIRST = (
    "test_bad_inputs.py",
    "test_scoring_agreement.py",
    "test_configs.py",
    "test_train.py",
    "test_evaluate.py",
    "test_batch_judging.py",
    "test_quiet_runs.py",
    "test_own_chatbot.py",
    "test_train_ddp.py",
    "test_chat_backends.py",
)


def _order(item: pytest.Item) -> int:
    name = item.path.name
    return SLOW_FILES_FIRST.index(name) if name in SLOW_FILES_FIRST else len(SLOW_FILES_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_order)  # stable: the order within a file, and of the other files, is kept
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def esc_role_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A finished 16-step ESC-Role run on the tiny model (adapter, last.ckpt, metrics.csv, manifest;
    what it printed in `stdout.txt` beside it) and its command line, trained once per test run.
    Read it only: copy the folder to resume or change it."""
    args = ["+exp=train/esc_role", *FAST_TRAIN, "trainer.max_steps=16"]

    def train(folder: Path) -> None:
        result = run_entry("train.py", [*args, f"hydra.run.dir={folder / 'run'}"])
        assert result.returncode == 0, result.stderr[-3000:]
        (folder / "stdout.txt").write_text(result.stdout)

    folder = built_once(tmp_path_factory, "esc_role_run", train)
    return folder / "run", [*args, f"hydra.run.dir={folder / 'run'}"]


@pytest.fixture(scope="session")
def sigkill_resumed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 6-step ESC-Role run on the tiny model, SIGKILLed during step 3 (after the step-2 checkpoint)
    and resumed by the very same command (`run/`; the killed attempt's exit code and last.ckpt step
    in `killed.json`), beside its uninterrupted twin of the same seed (`full/`); each run's training
    batches recorded (`run.jsonl`, `full.jsonl`). Validation after each checkpoint and LoRA dropout
    draw from torch's generator between steps: what the twin's bit-for-bit equality tests."""
    import json

    import torch

    from tests.train_probes import kill_once_at

    common = [
        "+exp=train/esc_role",
        *FAST_TRAIN,
        "callbacks.checkpoint.every_n_train_steps=2",
        "trainer.val_check_interval=2",
        "trainer.max_steps=6",
        "+callbacks.record._target_=tests.train_probes.BatchRecorder",
    ]

    def train(folder: Path) -> None:
        full = run_entry(
            "train.py",
            [*common, f"+callbacks.record.path={folder / 'full.jsonl'}", f"hydra.run.dir={folder / 'full'}"],
        )
        assert full.returncode == 0, full.stderr[-3000:]
        out = folder / "run"
        args = [
            *common,
            f"+callbacks.record.path={folder / 'run.jsonl'}",
            *kill_once_at(3, folder / "killed"),
            f"hydra.run.dir={out}",
        ]
        killed = run_entry("train.py", args, process=True)  # it kills itself
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        checkpoint = torch.load(out / "last.ckpt", map_location="cpu", weights_only=False)
        state = {
            "returncode": killed.returncode,
            "global_step": checkpoint["global_step"],
            "status": json.loads((out / "manifest.json").read_text())["status"],
            "metrics": (out / "metrics.csv").read_text(),
        }
        resumed = run_entry("train.py", args)  # the very same command
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        (folder / "killed.json").write_text(json.dumps(state))
        (folder / "resumed_stderr.txt").write_text(resumed.stderr)

    return built_once(tmp_path_factory, "sigkill_resumed_run", train)
