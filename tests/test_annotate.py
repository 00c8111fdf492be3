"""The annotation round trip (issue 11): tasks out as JSONL, CSV and a Label Studio project, filled
labels in, agreement against published values, the paper's correction rule, ESC-RANK's format."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import tests.scripted_backend  # noqa: F401  (registers backend kind "scripted")
from esc.annotate.annotator_agreement import agreement, resolve
from esc.annotate.human_scores import read_annotations
from esc.annotate.kinds import task_kind
from esc.annotate.tasks import Label, import_labels, read_tasks, to_esc_rank
from esc.cards import load_cards
from esc.cli import main as esc_main
from esc.config_schema import validate
from esc.dialogues.record import dialogue_lines
from esc.dialogues.store import dialogue_files, read_dialogues
from esc.errors import DataError
from esc.evaluate.run import evaluate
from esc.scoring.rubrics import dimensions
from tests.helpers import evaluate_config, requires_data

pytestmark = requires_data


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An evaluate.py output of 3 English dialogues (scripted, fast)."""
    out = tmp_path_factory.mktemp("run")
    cfg = evaluate_config(
        out, "cards.languages=[en]",
        roleplayer_backend={"kind": "scripted", "label": "seeker"},
        target_backend={"kind": "scripted", "label": "helper"},
    )  # fmt: skip
    evaluate(cfg, validate(cfg, "evaluate"))
    return out


def labels_of(kind: str, table: dict[str, list[int | str]], task_ids: list[str]) -> list[Label]:
    """{annotator: [value per task]} as labels of one field."""
    field = task_kind(kind).fields[0].name
    return [
        Label(task, kind, who, field, str(value))
        for who, values in table.items()
        for task, value in zip(task_ids, values, strict=True)
        if value is not None
    ]


# --- the round trip --------------------------------------------------------------------------------


def test_export_fill_in_three_ways_import_and_agreement(run_dir: Path, tmp_path: Path, capsys) -> None:
    tasks_dir = tmp_path / "tasks"
    assert (
        esc_main(["annotate", "export", "dialogue", "--dialogues", str(run_dir), "--out", str(tasks_dir)])
        == 0
    )
    tasks = read_tasks(tasks_dir)
    assert len(tasks) == 3 and all(t.kind == "dialogue" and "AI assistant:" in t.text for t in tasks.values())
    # the Label Studio project: one single-choice block per dimension, 0-4 with Table 16's rules
    config = ET.fromstring((tasks_dir / "labelstudio" / "config.xml").read_text())
    blocks = config.findall("Choices")
    assert [b.get("name") for b in blocks] == [f.name for f in task_kind("dialogue").fields]
    assert [c.get("value") for c in blocks[0].findall("Choice")] == ["0", "1", "2", "3", "4"]
    assert all(c.get("hint") for b in blocks for c in b.findall("Choice"))
    ls_tasks = json.loads((tasks_dir / "labelstudio" / "tasks.json").read_text())
    assert {t["data"]["task_id"] for t in ls_tasks} == set(tasks)
    # annotator a fills the CSV, b writes JSON lines, c labels in Label Studio
    ids = sorted(tasks)
    rows = list(csv.DictReader((tasks_dir / "tasks.csv").open()))
    for row, score in zip(rows, (4, 3, 1), strict=True):
        row.update({"annotator": "a", "fluency": str(score), "empathy": "2"})
    with (tmp_path / "a.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    b = [
        {"task_id": row["task_id"], "annotator": "b", "fluency": int(row["fluency"]), "empathy": 2}
        for row in rows
    ]
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in b))

    def choice(score: int) -> dict:
        return {
            "from_name": "fluency",
            "to_name": "text",
            "type": "choices",
            "value": {"choices": [str(score)]},
        }

    exported = [
        {
            "id": k,
            "data": t["data"],
            "annotations": [{"completed_by": {"email": "c@lab"}, "result": [choice(score)]}],
        }
        for k, (t, score) in enumerate(zip(ls_tasks, (4, 3, 0), strict=True))
    ]
    (tmp_path / "c.json").write_text(json.dumps(exported))
    files = [str(tmp_path / f) for f in ("a.csv", "b.jsonl", "c.json")]
    assert (
        esc_main(["annotate", "import", str(tasks_dir), *files, "--out", str(tmp_path / "labels.jsonl")]) == 0
    )
    assert (
        esc_main(["annotate", "agreement", str(tmp_path / "labels.jsonl"), "--out", str(tmp_path / "agree")])
        == 0
    )
    shown = capsys.readouterr().out
    rows_out = {r["field"]: r for r in json.loads((tmp_path / "agree.json").read_text())}
    fluency = rows_out["fluency"]
    assert fluency["tasks"] == 3 and fluency["annotators"] == 3
    assert fluency["agreement"] == pytest.approx(7 / 9)  # a=b on 3, a=c and b=c on 2 each
    assert rows_out["empathy"]["annotators"] == 2 and rows_out["empathy"]["agreement"] == 1.0
    assert (
        "| fluency | 3 | 3 |" in shown
        and (tmp_path / "agree.md").is_file()
        and (tmp_path / "agree.csv").is_file()
    )
    # ESC-RANK reads them as human annotations
    out = tmp_path / "mine.jsonl"
    assert (
        esc_main(
            [
                "annotate",
                "to-esc-rank",
                str(tmp_path / "labels.jsonl"),
                "--tasks",
                str(tasks_dir),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    annotations = read_annotations(out)
    assert len(annotations) == 3 * 3 + 3 * 2  # fluency by a, b, c; empathy by a, b
    assert {a.dialogue_id for a in annotations} == set(ids)
    # the lines a judge reads when it scores that dialogue: the opener first, then the turns
    (path,) = dialogue_files(str(run_dir))
    judged = {f"dialogue:{d.target}:{d.roleplayer}:{d.language}:{d.card_id}": dialogue_lines(d, path, n)
              for n, d in enumerate(read_dialogues(path), 1)}  # fmt: skip
    assert all(a.lines == judged[a.dialogue_id] for a in annotations)
    assert annotations[0].lines[0][0] == "assistant" and annotations[0].lines[1][0] == "user"


def test_card_and_roleplay_tasks(run_dir: Path, tmp_path: Path) -> None:
    assert (
        esc_main(
            ["annotate", "export", "roleplay", "--dialogues", str(run_dir), "--out", str(tmp_path / "rp")]
        )
        == 0
    )
    rp = read_tasks(tmp_path / "rp")
    cards = {c.id: c.to_text() for c in load_cards(language="en")}
    # the card the role-player played, as its judge reads it (not the role-player's whole prompt)
    assert rp and all(
        t.text.startswith(f"[The role card the seeker plays]\n{cards[t.payload.card_id]}\n\n[Dialogue]\n")
        and t.payload.card == cards[t.payload.card_id]
        for t in rp.values()
    )
    assert [f.values for f in task_kind("roleplay").fields] == [("0", "1", "2")] * 6
    assert esc_main(["annotate", "export", "card", "--language", "zh", "--out", str(tmp_path / "cards")]) == 0
    cards = read_tasks(tmp_path / "cards")
    assert len(cards) == 324 and all(t.text.startswith("年龄：") for t in cards.values())
    grade, category = task_kind("card").fields
    assert grade.values == ("high", "middle", "invalid") and len(category.values) == 35


# --- agreement against published values ----------------------------------------------------------


def test_krippendorffs_alpha_of_his_own_example() -> None:
    """Krippendorff (2011), 'Computing Krippendorff's alpha-reliability', 4 coders x 12 units with
    missing values: ordinal alpha 0.815 (values 1-5 shifted to 0-4, which keeps their order)."""
    data = {
        "A": [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        "C": [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    }
    shifted = {k: [None if v is None else v - 1 for v in vs] for k, vs in data.items()}
    row = agreement(labels_of("dialogue", shifted, [f"u{i:02d}" for i in range(12)]))[0]
    assert row["krippendorff_alpha"] == pytest.approx(0.815, abs=5e-4)


def test_fleiss_kappa_of_fleiss_example() -> None:
    """The worked example of Fleiss' kappa (10 subjects, 14 raters, 5 categories): 0.210."""
    counts = [
        [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
    ]  # fmt: skip
    table: dict[str, list[int]] = {f"r{k}": [] for k in range(14)}
    for subject in counts:
        values = [v for v, n in enumerate(subject) for _ in range(n)]
        for k, value in enumerate(values):
            table[f"r{k}"].append(value)
    row = agreement(labels_of("dialogue", table, [f"s{i}" for i in range(10)]))[0]
    assert row["fleiss_kappa"] == pytest.approx(0.210, abs=5e-4)


def test_cohens_kappa_of_a_two_by_two_table() -> None:
    """20 both high, 5 high/middle, 10 middle/high, 15 both middle: p_o 0.7, p_e 0.5, kappa 0.4."""
    pairs = (
        [("high", "high")] * 20
        + [("high", "middle")] * 5
        + [("middle", "high")] * 10
        + [("middle", "middle")] * 15
    )
    table = {"A": [a for a, _ in pairs], "B": [b for _, b in pairs]}
    row = agreement(labels_of("card", table, [f"c{i}" for i in range(50)]))[0]
    assert row["field"] == "grade" and row["cohen_kappa"] == pytest.approx(0.4) and row["agreement"] == 0.7


def test_the_papers_correction_rules() -> None:
    assert resolve("3", "3", None) == "3"  # two agree
    assert resolve("3", "1", "2") == "2" and resolve("3", "1", None) is None  # the third settles
    card = {"kind": "card", "field": "grade"}
    assert resolve("invalid", "high", "high", **card) == "invalid"  # one invalid: discarded
    assert resolve("high", "middle", "high", **card) == "high"  # the third picks between them
    assert resolve("middle", "high", None, **card) is None
    assert (
        resolve("high", "high", None, **card) == "high"
        and resolve("middle", "middle", None, **card) == "middle"
    )


# --- bad input -----------------------------------------------------------------------------------


def test_unknown_task_out_of_range_and_twice_are_one_line_errors(run_dir: Path, tmp_path: Path) -> None:
    esc_main(["annotate", "export", "dialogue", "--dialogues", str(run_dir), "--out", str(tmp_path / "t")])
    tasks = read_tasks(tmp_path / "t")
    some = sorted(tasks)[0]
    cases = [
        ({"task_id": "dialogue:nope", "annotator": "a", "fluency": 3}, "line 1", "unknown task id"),
        ({"task_id": some, "annotator": "a", "fluency": 7}, "line 1", "fluency: 7 is not one of"),
        ({"task_id": some, "annotator": "a", "coherence": 1}, "line 1", "field 'coherence' is not one of"),
        ({"task_id": some, "fluency": 1}, "line 1", "no annotator"),
    ]
    for record, where, message in cases:
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps(record) + "\n")
        with pytest.raises(DataError, match=rf"bad.jsonl.*{where}.*{message}"):
            import_labels(tasks, [path])
    twice = tmp_path / "twice.jsonl"
    twice.write_text(json.dumps({"task_id": some, "annotator": "a", "fluency": 1}) + "\n")
    with pytest.raises(DataError, match="labelled twice"):
        import_labels(tasks, [twice, twice])


def test_to_esc_rank_takes_only_scores_0_to_4_of_known_tasks(run_dir: Path, tmp_path: Path) -> None:
    """Labels built in code (not read from a checked labels.jsonl) are checked too: a score of 7, a
    field that is no dimension or a task not exported never reach ESC-RANK's training file."""
    esc_main(["annotate", "export", "dialogue", "--dialogues", str(run_dir), "--out", str(tmp_path / "t")])
    tasks = read_tasks(tmp_path / "t")
    some = sorted(tasks)[0]
    assert [a.score for a in to_esc_rank([Label(some, "dialogue", "a", "fluency", "3")], tasks)] == [3]
    for label, message in [
        (Label(some, "dialogue", "a", "fluency", "7"), "integer 0-4"),
        (Label(some, "dialogue", "a", "coherence", "1"), "integer 0-4"),
        (Label("dialogue:nope", "dialogue", "a", "fluency", "1"), "unknown task id"),
    ]:
        with pytest.raises(DataError, match=rf"mine.jsonl \[record label 1 .*{message}"):
            to_esc_rank([label], tasks, "mine.jsonl")


def test_the_dialogue_kind_titles_each_dimension_by_its_paper_name() -> None:
    """Label Studio's headers and the rating pages name a dimension as every report does (Table 2's
    Expression, Humanoid), not by Table 16's printed headings (Diversity, Humaniod)."""
    fields = task_kind("dialogue").fields
    assert [(f.name, f.title) for f in fields] == [(d.key, d.paper_name) for d in dimensions()]


def test_annotation_stats_name_each_dimension_by_its_paper_name() -> None:
    """`esc annotate stats`: one line per dimension, by the name the reports use."""
    from esc.annotate.human_scores import Annotation, stats

    lines = (("user", "hi"), ("assistant", "hello"))
    anns = [
        Annotation("d1", "en", lines, "diversity", 3, "ana"),
        Annotation("d1", "en", lines, "skill", 1, "ana"),
    ]
    text = stats(anns)
    assert "  Expression       1  (0: 0, 1: 0, 2: 0, 3: 1, 4: 0)" in text
    assert "  Skillful         1  (0: 0, 1: 1, 2: 0, 3: 0, 4: 0)" in text
    assert "  Information   none  (no human ratings)" in text
    assert "diversity" not in text and "suggestion" not in text
