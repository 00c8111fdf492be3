"""pytest hooks: `gpu` tests are skipped where no CUDA GPU is visible; under pytest-xdist
(`make test`: two workers, one file at a time) the files that take minutes go first. Fixtures made
once per test run for several files: `esc_role_run`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import FAST_TRAIN, built_once, run_entry

# Files whose tests add up to minutes on 2 cores (the junit times of a full run at 012725a). Run
# first, so the two workers of `make test` end together instead of one finishing test_train.py alone.
SLOW_FILES_FIRST = (
    "test_train.py",
    "test_bad_inputs.py",
    "test_esc_role_data.py",
    "test_ablation.py",
    "test_configs.py",
    "test_train_rng.py",
    "test_esc_role_fidelity.py",
    "test_scoring_agreement.py",
    "test_evaluate.py",
    "test_train_ddp.py",
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
