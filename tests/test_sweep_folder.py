"""`dialogues=` (and `scores=`) take a Hydra sweep's folder (issue 54, item 5): its numbered runs, in
number order; a folder that holds none of what is asked says what to pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from esc.dialogues.store import dialogue_files
from esc.errors import ConfigError


def test_a_sweep_folder_gives_the_files_of_its_numbered_runs(tmp_path: Path) -> None:
    sweep = tmp_path / "multirun" / "2026-11-28" / "12-00-00"
    made = []
    for i, target in ((0, "llama3"), (1, "qwen"), (10, "yi")):
        folder = sweep / (f"{i}_{target}" if i else str(i)) / "dialogues"  # evaluate.py: <num>_<target>
        folder.mkdir(parents=True)
        made.append(folder / f"{target}__esc_role__en.jsonl")
        made[-1].write_text("{}\n")
        (folder / f"{target}__esc_role__en.failed.jsonl").write_text("{}\n")  # never read
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    (sweep / ".submitit").mkdir()
    assert dialogue_files(sweep) == made  # 0, 1, 10: number order, not name order


def test_a_folder_of_nothing_says_what_to_pass(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    with pytest.raises(ConfigError) as err:
        dialogue_files(tmp_path / "notes")
    assert "dialogues" in str(err.value) and "sweep's folder whose numbered runs hold dialogues/" in str(
        err.value
    )
