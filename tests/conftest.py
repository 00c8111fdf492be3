"""pytest hooks: `gpu` tests are skipped where no CUDA GPU is visible; under pytest-xdist
(`make test`: two workers, one file at a time) the files that take minutes go first."""

from __future__ import annotations

import pytest

# Files whose tests add up to minutes on 2 cores (--durations of a full run). Run first, so the two
# workers of `make test` end together instead of one finishing test_train.py alone.
SLOW_FILES_FIRST = (
    "test_train.py",
    "test_scoring_agreement.py",
    "test_evaluate.py",
    "test_bad_inputs.py",
    "test_ablation.py",
    "test_secrets.py",
    "test_train_rng.py",
    "test_deepspeed.py",
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
