"""The dialogue table on W&B (`wandb.enabled=true`, mode=score): one row per judged dialogue with its
transcript and its seven scores, as the report site shows them."""

from __future__ import annotations

import json
from pathlib import Path

from esc.dialogues.record import Dialogue, Turn
from esc.reports.wandb_report import dialogue_rows
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord
from tests.helpers import requires_data, run_entry


def _files(root: Path) -> Path:
    folder = root / "run" / "dialogues"
    folder.mkdir(parents=True)
    d = Dialogue(7, "en", "rp", "bot", "sys", "Hello.", None, status="complete")
    d.turns = [Turn("roleplayer", "I can't sleep.", "stop"), Turn("target", "That sounds hard.", "stop")]
    path = folder / "bot__rp__en.jsonl"
    path.write_text(json.dumps(d.to_dict()) + "\n")
    return path


def test_dialogue_rows_hold_the_transcript_and_the_scores(tmp_path: Path) -> None:
    path = _files(tmp_path)
    fields = {"target": "bot", "roleplayer": "rp", "card_id": 7, "source": str(path)}
    records = [
        ScoreRecord("bot__rp__en/7", key, "en", "j", {}, "valid", 2, **fields) for key in DIMENSION_KEYS[:-1]
    ]
    records.append(ScoreRecord("bot__rp__en/7", "overall", "en", "j", {}, "invalid", None, **fields))
    columns, rows = dialogue_rows(records)
    assert columns[-1] == "average_100" and columns[7:-1] == list(DIMENSION_KEYS)
    [row] = rows
    assert row[6] == "Supporter: Hello.\nSeeker: I can't sleep.\nSupporter: That sounds hard."
    assert row[7:-1] == [2, 2, 2, 2, 2, 2, None] and row[-1] == 50.0  # the invalid overall is no score


@requires_data
def test_rank_py_logs_the_dialogue_table_offline(tmp_path: Path) -> None:
    _files(tmp_path)
    out = tmp_path / "rank"
    args = ["judge=tiny", f"dialogues={tmp_path / 'run'}", "dimensions=[empathy]", "wandb.enabled=true",
            "leaderboard.bootstrap=20", f"hydra.run.dir={out}"]  # fmt: skip
    result = run_entry("rank.py", args, env={"WANDB_MODE": "offline"})
    assert result.returncode == 0, result.stderr[-3000:]
    [table] = (out / "wandb").glob("offline-run-*/files/media/table/dialogues_*.table.json")
    data = json.loads(table.read_text())
    assert (
        "transcript" in data["columns"]
        and "I can't sleep." in data["data"][0][data["columns"].index("transcript")]
    )
