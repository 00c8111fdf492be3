"""A tiny run of each entry point prints nothing a user cannot act on (issue 37).

Every run printed third-party noise: FutureWarnings of renamed transformers methods, Lightning's pytree
deprecation and eval-mode warning, "Total FLOPs: 0", an advertisement, a "Loading weights" bar redrawn
in place. Each is silenced by name (`esc.quiet`, `esc.models.loading`); this runs train.py,
evaluate.py and rank.py on the tiny model as a user would (output to a pipe) and reads what they print.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import FAST_TRAIN, requires_data, run_entry

NOISE = re.compile(
    r"Warning\b|warnings\.warn|Loading weights|FLOPs|litlogger|deprecated"
    r"|\]\[(?!esc[.\]])[\w.]+\]\[WARNING\]"  # a library's warning through Hydra's log format
    r"|\] \[WARNING\] \["  # DeepSpeed's own format
)


def _noise(result) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if NOISE.search(line)]


@requires_data
def test_tiny_train_evaluate_and_rank_print_no_warning(tmp_path: Path) -> None:
    env = {"OMP_NUM_THREADS": "1"}
    fast = [a for a in FAST_TRAIN if not a.startswith("trainer.enable_progress_bar")]
    train = run_entry(
        "train.py",
        ["+exp=train/esc_role", *fast, "trainer.max_steps=2", f"hydra.run.dir={tmp_path / 'train'}"],
        env=env,
        process=True,  # what a fresh process prints is the subject
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    evaluate = run_entry(
        "evaluate.py",
        ["roleplayer=tiny", "target=tiny", "cards.languages=[en]", "cards.limit=2", "dialogue.turns=1",
         f"hydra.run.dir={tmp_path / 'evaluate'}"],
        env=env,
        process=True,  # what a fresh process prints is the subject
    )  # fmt: skip
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    rank = run_entry(
        "rank.py", ["judge=tiny", f"dialogues={tmp_path / 'evaluate'}", f"hydra.run.dir={tmp_path / 'rank'}"],
        env=env,
        process=True,  # what a fresh process prints is the subject
    )  # fmt: skip
    assert rank.returncode == 0, rank.stderr[-3000:]
    assert {"train": _noise(train), "evaluate": _noise(evaluate), "rank": _noise(rank)} == {
        "train": [], "evaluate": [], "rank": [],
    }  # fmt: skip
    assert "train: step 2/2, loss" in train.stdout + train.stderr  # progress as plain lines in a pipe
