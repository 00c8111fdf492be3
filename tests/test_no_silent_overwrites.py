"""Runs that cannot lie, round 2 (issue 36): imports never replace an existing file unless told and
never write over their own input; a JSON input that names a key twice is refused."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from esc.cli import main as esc_main
from esc.config_schema import validate
from esc.evaluate.run import evaluate
from tests.helpers import evaluate_config, requires_data
from tests.scripted_backend import ScriptedBackend  # noqa: F401 (registers kind: scripted)
from tests.test_scoring_official import CARDS, our_records


def refused(capsys: pytest.CaptureFixture, args: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        esc_main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error:")
    return err


def test_scores_import_refuses_an_existing_out_unless_forced(tmp_path: Path, capsys, monkeypatch) -> None:
    """Defect 6: `esc scores import ... --out EXISTING.jsonl` replaced 14 judgments with 7, exit 0."""
    from esc.official_formats.scores import write_official_scores

    monkeypatch.setattr("esc.official_formats.scores._released_card_ids", lambda language: CARDS)
    official = tmp_path / "llama3_en.json"
    write_official_scores(our_records(), official, CARDS)
    out = tmp_path / "scores.jsonl"
    out.write_text("kept\n")
    err = refused(capsys, ["scores", "import", str(official), "--out", str(out)])
    assert f"{out}: --out exists" in err and out.read_text() == "kept\n"
    err = refused(capsys, ["scores", "import", str(official), "--out", str(official), "--force"])
    assert "is one of this command's inputs" in err and json.loads(official.read_text())
    assert esc_main(["scores", "import", str(official), "--out", str(out), "--force"]) == 0
    assert len(out.read_text().splitlines()) == 14


def test_an_official_score_file_naming_a_card_twice_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    """Defect 11: `{"0": {...1s}, "0": {...4s}}` imported the last silently."""
    monkeypatch.setattr("esc.official_formats.scores._released_card_ids", lambda language: CARDS)
    path = tmp_path / "llama3_en.json"
    path.write_text('{"0": {"fluency": 1}, "0": {"fluency": 4}}', encoding="utf-8")
    err = refused(capsys, ["scores", "import", str(path), "--out", str(tmp_path / "x.jsonl")])
    assert f"{path}: the key '0' appears twice" in err and not (tmp_path / "x.jsonl").exists()


@requires_data
def test_annotate_import_never_replaces_labels_or_its_own_task_file(tmp_path: Path, capsys) -> None:
    """Defects 7 and 8: an import over an existing labels file replaced alice and bob's labels with
    carol's; an import into TASKS/tasks.jsonl wrote over its own task file."""
    run = tmp_path / "run"
    cfg = evaluate_config(run, "cards.languages=[en]", "cards.limit=2",
                          roleplayer_backend={"kind": "scripted", "label": "seeker"},
                          target_backend={"kind": "scripted", "label": "helper"})  # fmt: skip
    evaluate(cfg, validate(cfg, "evaluate"))
    tasks = tmp_path / "tasks"
    assert esc_main(["annotate", "export", "dialogue", "--dialogues", str(run), "--out", str(tasks)]) == 0
    rows = list(csv.DictReader((tasks / "tasks.csv").open(encoding="utf-8")))
    for row in rows:
        row.update({"annotator": "carol", "fluency": "3"})
    filled = tmp_path / "carol.csv"
    with filled.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"alice and bob": "kept"}\n')
    err = refused(capsys, ["annotate", "import", str(tasks), str(filled), "--out", str(labels)])
    assert f"{labels}: --out exists" in err and labels.read_text() == '{"alice and bob": "kept"}\n'
    task_file = (tasks / "tasks.jsonl").read_bytes()
    err = refused(capsys, ["annotate", "import", str(tasks), str(filled), "--out", str(tasks / "tasks.jsonl"),
                           "--force"])  # fmt: skip
    assert "is one of this command's inputs" in err and (tasks / "tasks.jsonl").read_bytes() == task_file
    assert (
        esc_main(["annotate", "import", str(tasks), str(filled), "--out", str(tmp_path / "new.jsonl")]) == 0
    )


@pytest.mark.parametrize(
    ("entry", "args", "key"),
    [
        ("evaluate.py", ["roleplayer=tiny", "target=tiny", "target.name=../../escaped"], "target.name"),
        ("evaluate.py", ["roleplayer=tiny", "target=tiny", "roleplayer.name=a/b"], "roleplayer.name"),
        ("rank.py", ["judge=tiny", "judge.name=../up", "dialogues={tmp}"], "judge.name"),
    ],
)
def test_a_name_that_would_leave_the_run_folder_is_refused(
    entry: str, args: list[str], key: str, tmp_path
) -> None:
    """Defect 9: `target.name=../../escaped` wrote the dialogue file outside the run folder, exit 0."""
    from tests.helpers import run_entry

    run = tmp_path / "deep" / "run"
    result = run_entry(entry, [a.format(tmp=tmp_path) for a in args] + [f"hydra.run.dir={run}"])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and f"config `{key}`" in errors[0], result.stderr[
        -2000:
    ]
    assert not list(tmp_path.rglob("*.jsonl"))  # nothing written, inside or outside the folder
