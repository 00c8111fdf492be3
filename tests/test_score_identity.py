"""A judgment is tied to the dialogue it judged: a rerun re-judges a dialogue whose text changed,
and two runs whose dialogue files share a name are never silently merged (issue "Runs that cannot
lie", case 2). Offline, CPU, the tiny judge."""

from __future__ import annotations

import json
from pathlib import Path

from esc.dialogues.record import Dialogue, Turn
from esc.scoring.store import read_scores
from tests.helpers import run_entry

NAME = "tiny__tiny__en.jsonl"


def write_run(folder: Path, texts: list[str]) -> Path:
    """An evaluate.py-like folder with one dialogue file of `len(texts)` cards."""
    (folder / "dialogues").mkdir(parents=True)
    lines = []
    for card, text in enumerate(texts, 1):
        turns = [Turn("roleplayer", text, "stop"), Turn("target", f"I hear you: {text}", "stop")]
        lines.append(
            json.dumps(
                Dialogue(card, "en", "tiny", "tiny", "sys", "Hello.", None, turns, "complete").to_dict()
            )
        )
    path = folder / "dialogues" / NAME
    path.write_text("\n".join(lines) + "\n")
    return path


def rank(dialogues: str, out: Path) -> object:
    args = ["judge=tiny", f"dialogues={dialogues}", "dimensions=[empathy,overall]", "scoring.progress=false",
            "leaderboard.charts=false", "leaderboard.bootstrap=20", f"hydra.run.dir={out}"]  # fmt: skip
    return run_entry("rank.py", args)


def test_a_rerun_judges_again_a_dialogue_whose_text_changed(tmp_path: Path) -> None:
    a = write_run(tmp_path / "A", ["I lost my job.", "My dog died."])
    b = write_run(tmp_path / "B", ["I failed my exam.", "My dog died."])  # same name and card ids
    out = tmp_path / "R"
    first = rank(str(a), out)
    assert first.returncode == 0, first.stderr[-2000:]
    second = rank(str(b), out)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "(2 already done)" in second.stdout  # card 2 is the same dialogue: not judged twice
    log = (out / "rank.log").read_text()
    assert "2 judgments were made on other dialogue text: judged again" in log  # card 1, 2 dimensions
    records = list(read_scores(out / "scores" / "tiny__tiny__en__tiny.jsonl"))
    assert len(records) == 6
    card1 = [r for r in records if r.dialogue_id.endswith("/1")]
    assert len({r.content_sha for r in card1}) == 2 and {r.source for r in card1} == {str(a), str(b)}


def test_two_runs_with_the_same_file_names_are_refused_not_merged(tmp_path: Path) -> None:
    a = write_run(tmp_path / "A", ["I lost my job.", "My dog died."])
    write_run(tmp_path / "B", ["I failed my exam.", "My cat is ill."])
    both = rank(f"[{tmp_path / 'A'},{tmp_path / 'B'}]", tmp_path / "R")
    assert both.returncode == 2 and "Traceback" not in both.stderr
    [error] = [line for line in both.stderr.splitlines() if line.startswith("error:")]
    assert str(a) in error and "same name" in error
    assert not (tmp_path / "R" / "scores").exists()  # refused before any judging
    # scored apart, then reported together: the same dialogue ids hold different dialogues
    assert rank(str(tmp_path / "A"), tmp_path / "RA").returncode == 0
    assert rank(str(tmp_path / "B"), tmp_path / "RB").returncode == 0
    report = ["mode=leaderboard", "leaderboard.charts=false"]
    board = run_entry("rank.py", [*report, f"scores=[{tmp_path / 'RA'},{tmp_path / 'RB'}]",
                                  f"hydra.run.dir={tmp_path / 'board'}"])  # fmt: skip
    assert board.returncode == 2
    [error] = [line for line in board.stderr.splitlines() if line.startswith("error:")]
    assert "different dialogues" in error and "RA" in error and "RB" in error
    # the same run's scores twice (a copy) are one run: reported, counted once
    again = run_entry("rank.py", [*report, f"scores=[{tmp_path / 'RA'},{tmp_path / 'RA'}]",
                                  f"hydra.run.dir={tmp_path / 'board2'}"])  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    row = [
        line
        for line in (tmp_path / "board2" / "leaderboard.md").read_text().splitlines()
        if line.startswith("| en | tiny |")  # Table 2's row (the breakdowns' rows start otherwise)
    ]
    assert len(row) == 1 and row[0].split("|")[-4].strip() == "2"  # n: 2 dialogues, not 4
