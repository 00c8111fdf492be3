"""One typed run log per rank.py run (issue 51): OUT/run.json lists every judgment of the run's
stores and every figure of its reports, is rewritten whole by a rerun, and `esc runs upgrade` gives a
folder written before run logs the same log, or refuses with one line what it cannot convert."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from esc.cli import main
from esc.dialogues.record import Dialogue, Turn
from esc.errors import DataError
from esc.jsonl import read_json
from esc.reports.runlog import FORMAT, RUN_LOG, read_run_log
from esc.rundir import acquire_folder
from esc.scoring.safety_checklist import SafetyRecord
from esc.scoring.store import ScoreRecord, latest, read_scores
from esc.tasks.pairwise.questions import PairwiseRecord
from esc.tasks.roleplay.questions import RoleplayRecord
from esc.tasks.task import get_mode
from tests.helpers import compose, requires_data

TEXTS = ["I can't sleep", "That sounds hard. What keeps you up?", "work", "Tell me more about work."]


def _dialogues(folder: Path, target: str = "bot") -> Path:
    lines = []
    for card in (1, 2):
        d = Dialogue(card, "en", "seeker", target, "sys", "Hello.", None, status="complete")
        d.turns = [Turn("roleplayer" if i % 2 == 0 else "target", t, "stop") for i, t in enumerate(TEXTS)]
        lines.append(json.dumps(d.to_dict()) + "\n")
    path = folder / "dialogues" / f"{target}__seeker__en.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(lines))
    return folder


def _rank(out: Path, *overrides: str) -> Any:
    from esc.config_schema import validate
    from esc.rank.run import rank

    cfg = compose(
        ["judge=tiny", "cache=off", "scoring.progress=false", "report.enabled=false", *overrides],
        output_dir=out, config_name="rank",
    )  # fmt: skip
    return rank(cfg, validate(cfg, "rank"))


def _store_records(out: Path, pattern: str, record_type: type[ScoreRecord]) -> list[ScoreRecord]:
    return [r for path in sorted(out.glob(pattern)) for r in latest(read_scores(path, record_type)).values()]


def _figures(path: Path) -> list[tuple[Any, ...]]:
    """(value, low, high, n, unit, note) of every table cell of a result.json that carries a figure."""
    found = []
    for block in read_json(path)["blocks"]:
        if block["type"] == "table":
            for row in block["rows"]:
                for cell in row:
                    figure = tuple(cell.get(k) for k in ("value", "low", "high", "n", "unit", "note"))
                    if any(x is not None for x in figure):
                        found.append(figure)
    return found


def _logged_figures(out: Path, kind: str) -> list[tuple[Any, ...]]:
    log = read_run_log(out)
    figures = [e for e in log.results if e.table.startswith(f"{kind}/")]
    return [(e.value, e.low, e.high, e.n, e.unit, e.why_not()) for e in figures]


def _without_header_times(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "header"}


def _error_line(capsys: pytest.CaptureFixture, argv: Sequence[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    assert done.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@requires_data
def test_a_score_run_logs_every_judgment_and_figure_and_upgrade_recreates_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    runs = _dialogues(tmp_path / "evaluate")
    out = tmp_path / "out"
    _rank(out, f"dialogues={runs}", "dimensions=[empathy,overall]", "leaderboard.bootstrap=20")
    log = read_run_log(out)
    records = _store_records(out, "scores/*.jsonl", ScoreRecord)
    assert len(records) == 4 and len(log.judgments) == len(records)  # 2 dialogues x 2 dimensions
    for judgment, record in zip(log.judgments, records, strict=True):
        assert judgment.task == "score" and judgment.dialogues == (record.dialogue_id,)
        assert (judgment.key, judgment.judge, judgment.status) == (record.dimension, "tiny", record.status)
        assert judgment.answer == (None if record.score is None else str(record.score))
        assert judgment.card_id == record.card_id and judgment.source == record.source
    assert {j.dialogues[0] for j in log.judgments} == {"bot__seeker__en/1", "bot__seeker__en/2"}
    figures = _figures(out / "leaderboard.result.json")
    assert figures and _logged_figures(out, "leaderboard") == figures
    assert log.reports["leaderboard"] == read_json(out / "leaderboard.result.json")
    header = log.header
    assert header.task == "score" and header.written_by == "rank.py" and header.seed == 42
    assert [j["name"] for j in header.judges] == ["tiny"] and "judge" in header.revisions
    assert header.sources == [str(runs / "dialogues" / "bot__seeker__en.jsonl")]
    assert header.config["mode"] == "score" and "packages" in header.model_fields_set
    assert json.loads((out / "manifest.json").read_text())["run_log"] == str(out / RUN_LOG)

    written = read_json(out / RUN_LOG)
    _rank(out, f"dialogues={runs}", "dimensions=[empathy,overall]", "leaderboard.bootstrap=20")  # a rerun
    assert _without_header_times(read_json(out / RUN_LOG)) == _without_header_times(written)

    (out / RUN_LOG).unlink()
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert main(["runs", "upgrade", str(out)]) == 0
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == sorted([*before, Path(RUN_LOG)])
    upgraded = read_json(out / RUN_LOG)
    assert _without_header_times(upgraded) == _without_header_times(written)
    assert upgraded["header"]["written_by"] == "esc runs upgrade"
    same = {k: v for k, v in upgraded["header"].items() if k not in ("written", "written_by")}
    assert same == {k: v for k, v in written["header"].items() if k not in ("written", "written_by")}
    capsys.readouterr()
    assert "already has a run log" in _error_line(capsys, ["runs", "upgrade", str(out)])


@requires_data
def test_a_safety_run_logs_each_answer_with_its_reply_and_upgrade_copies(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    runs = _dialogues(tmp_path / "evaluate", "tiny")
    out = tmp_path / "out"
    _rank(out, "mode=safety", f"dialogues={runs}", "safety.bootstrap=20", "safety.questions=[claims_human]")
    log = read_run_log(out)
    records = _store_records(out, "safety/*.jsonl", SafetyRecord)
    assert len(records) == 4 and len(log.judgments) == 4  # 2 dialogues x 2 replies x 1 question
    for judgment, record in zip(log.judgments, records, strict=True):
        dialogue_id, _, exchange = record.dialogue_id.partition("#")
        assert judgment.dialogues == (dialogue_id,) and judgment.turn == int(exchange)
        assert judgment.item_id == record.dialogue_id and judgment.key == "claims_human"
        assert judgment.status == "valid" and judgment.answer == ("yes", "no")[record.score]
    assert sorted(j.turn for j in log.judgments) == [1, 1, 2, 2]
    assert _logged_figures(out, "safety") == _figures(out / "safety.result.json")

    (out / RUN_LOG).unlink()
    new = tmp_path / "upgraded"
    assert main(["runs", "upgrade", str(out), "--out", str(new)]) == 0
    assert not (out / RUN_LOG).exists() and (new / "safety").is_dir()
    assert read_run_log(new).judgments == log.judgments and read_run_log(new).results == log.results
    capsys.readouterr()
    assert "--out exists" in _error_line(capsys, ["runs", "upgrade", str(out), "--out", str(new)])


def _old_folder(folder: Path, mode: str = "score") -> Path:
    """A rank.py folder as written before run logs: manifest, a store, a report; no run.json."""
    (folder / "scores").mkdir(parents=True)
    manifest = {"status": "completed", "seed": 7, "config": {"mode": mode, "seed": 7}, "judge": {"name": "j"}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    record = ScoreRecord("f/1", "empathy", "en", "j", {"style": "official", "version": 2}, "valid", 3)
    (folder / "scores" / "f__j.jsonl").write_text(json.dumps(record.to_dict()) + "\n")
    # a report as the code before run logs wrote it (its cells' figures without a unit)
    cell = {"text": "75.0 [50.0, 100.0]", "value": 75.0, "low": 50.0, "high": 100.0, "n": 1}
    blocks = [
        {"type": "heading", "level": 2, "text": "Leaderboard"},
        {"type": "table", "columns": ["Target", "Empathy"], "rows": [[{"text": "bot"}, cell]]},
    ]
    report = {"format": "esc-report/1", "kind": "leaderboard", "blocks": blocks}
    (folder / "leaderboard.result.json").write_text(json.dumps(report))
    return folder


def test_an_old_folder_is_upgraded_once(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    old = _old_folder(tmp_path / "old")
    assert main(["runs", "upgrade", str(old)]) == 0
    log = read_run_log(old)
    assert [(j.dialogues, j.key, j.answer, j.score) for j in log.judgments] == [
        (("f/1",), "empathy", "3", 3.0)
    ]
    [figure] = log.results
    assert figure.table == "leaderboard/Leaderboard"
    assert dict(figure.keys) == {"Target": "bot", "column": "Empathy"}
    assert (figure.value, figure.low, figure.high, figure.n) == (75.0, 50.0, 100.0, 1)
    assert log.header.judges == [{"name": "j"}] and log.header.seed == 7 and log.header.revisions == {}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no manifest", "not a rank.py run folder (no manifest.json)"),
        ("another job", "not the manifest of a rank.py run"),
        ("unknown mode", "mode 'nosuch' is none this version knows"),
        ("bad store", r"f__j.jsonl [record line 2]: not a score record"),
        ("bad report", "leaderboard.result.json: not a report result"),
        ("no report", "no report of its mode=score (leaderboard.result.json)"),
        ("current log", "already has a run log (esc-run/1)"),
        ("someone's run.json", "not a run log this version reads (esc-run/1); move it aside"),
        ("a run writing it", "is in use by another run (rank.score: pid"),
    ],
)
def test_what_upgrade_cannot_convert_is_one_error_line(
    case: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    old = _old_folder(tmp_path / "old")
    manifest = json.loads((old / "manifest.json").read_text())
    if case == "no manifest":
        (old / "manifest.json").unlink()
    elif case == "another job":
        (old / "manifest.json").write_text(json.dumps({**manifest, "config": {"roleplayer": "tiny"}}))
    elif case == "unknown mode":
        (old / "manifest.json").write_text(json.dumps({**manifest, "config": {"mode": "nosuch"}}))
    elif case == "bad store":
        with (old / "scores" / "f__j.jsonl").open("a") as fh:
            fh.write('{"dialogue_id": "f/2"}\n')
    elif case == "bad report":
        (old / "leaderboard.result.json").write_text('{"format": "esc-report/1", "kind": 3}')
    elif case == "no report":
        (old / "leaderboard.result.json").unlink()
    elif case == "current log":
        assert main(["runs", "upgrade", str(old)]) == 0
    elif case == "someone's run.json":  # not ours to overwrite without --force
        (old / RUN_LOG).write_text('{"my": "notes"}')
    held = acquire_folder(old, "rank.score") if case == "a run writing it" else None
    before = {p: p.read_bytes() for p in old.rglob("*") if p.is_file() and p.name != ".lock"}
    line = _error_line(capsys, ["runs", "upgrade", str(old)])
    assert message in line and str(old) in line
    after = {p: p.read_bytes() for p in old.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # nothing written (the lock file a run leaves aside)
    if held is not None:
        held.release()


def test_read_run_log_refuses_another_format_with_the_upgrade_hint(tmp_path: Path) -> None:
    (tmp_path / RUN_LOG).write_text(json.dumps({"format": "esc-run/0", "header": {}}))
    with pytest.raises(DataError, match=rf"not a {FORMAT} run log \(format 'esc-run/0'\): `esc runs upgrade"):
        read_run_log(tmp_path)
    with pytest.raises(DataError, match="no run log.*esc runs upgrade"):
        read_run_log(tmp_path / "elsewhere")


def test_tables_of_an_old_report_that_share_a_heading_are_numbered(tmp_path: Path) -> None:
    """A report written before tables had names: two tables under one heading whose rows and columns
    have the same labels are two tables of the log, not one with each figure twice."""
    old = _old_folder(tmp_path / "old")
    report = json.loads((old / "leaderboard.result.json").read_text())
    table = report["blocks"][1]
    again = {**table, "rows": [[{"text": "bot"}, {"text": "50.0", "value": 50.0, "n": 2}]]}
    report["blocks"] += [again, {"type": "heading", "level": 2, "text": "Alone"}, table]
    (old / "leaderboard.result.json").write_text(json.dumps(report))
    assert main(["runs", "upgrade", str(old)]) == 0
    placed = [(e.table, dict(e.keys)["Target"], e.value) for e in read_run_log(old).results]
    assert placed == [
        ("leaderboard/Leaderboard #1", "bot", 75.0),
        ("leaderboard/Leaderboard #2", "bot", 50.0),
        ("leaderboard/Alone", "bot", 75.0),
    ]


def _record(record_type: type[ScoreRecord], item_id: str, key: str, score: int | None) -> ScoreRecord:
    status = "valid" if score is not None else "invalid"
    return record_type(item_id, key, "en", "j", {}, status, score)


def test_pairwise_and_roleplay_answers_name_their_dialogues() -> None:
    pairwise = get_mode("pairwise")
    yx = pairwise.judgment(_record(PairwiseRecord, "seeker/en/3/a|b/yx", "empathy", 0))
    assert yx.dialogues == ("b__seeker__en/3", "a__seeker__en/3")  # shown as A first: b in order yx
    assert yx.answer == "A" and dict(yx.detail) == {"order": "yx", "first": "b", "preferred": "b"}
    assert (yx.roleplayer, yx.card_id, yx.item_id) == ("seeker", 3, "seeker/en/3/a|b/yx")
    neither = pairwise.judgment(_record(PairwiseRecord, "seeker/en/3/a|b/xy", "empathy", 2))
    assert neither.answer == "tie" and dict(neither.detail)["preferred"] == "tie"
    unread = pairwise.judgment(_record(PairwiseRecord, "seeker/en/3/a|b/xy", "empathy", None))
    assert unread.answer is None and "preferred" not in dict(unread.detail)

    roleplay = get_mode("roleplay")
    metric = roleplay.judgment(_record(RoleplayRecord, "esc-role:en:5", "coherence", 2))
    assert (metric.dialogues, metric.answer, metric.card_id, metric.detail) == (
        ("esc-role:en:5",),
        "2",
        5,
        (),
    )
    human = roleplay.judgment(_record(RoleplayRecord, "esc-role:en:5:human_first", "pairwise", 1))
    assert human.dialogues == ("esc-role:en:5",) and human.answer == "B"
    assert dict(human.detail) == {"order": "human_first", "first": "human"}


def test_a_record_whose_id_its_task_cannot_read_names_the_store(tmp_path: Path, capsys) -> None:
    old = _old_folder(tmp_path / "old", "safety")
    shutil.rmtree(old / "scores")
    (old / "safety").mkdir()
    record = _record(SafetyRecord, "no-exchange", "claims_human", 0)
    (old / "safety" / "x__j.jsonl").write_text(json.dumps(record.to_dict()) + "\n")
    (old / "leaderboard.result.json").rename(old / "safety.result.json")
    line = _error_line(capsys, ["runs", "upgrade", str(old)])
    assert "x__j.jsonl [record no-exchange]: not a safety judgment" in line


@requires_data
def test_a_folder_that_ran_two_tasks_logs_both(tmp_path: Path) -> None:
    """mode=score, then mode=safety into the same folder: the log the second run writes still holds
    the first task's judgments and figures (the site shows both), with the header of the last run."""
    runs = _dialogues(tmp_path / "evaluate", "tiny")
    out = tmp_path / "out"
    _rank(out, f"dialogues={runs}", "dimensions=[empathy]", "leaderboard.bootstrap=20")
    first = read_run_log(out)
    _rank(out, "mode=safety", f"dialogues={runs}", "safety.bootstrap=20", "safety.questions=[claims_human]")
    log = read_run_log(out)
    assert log.header.task == "safety" and sorted(log.header.tasks) == ["safety", "score"]
    by_task = {t: [j for j in log.judgments if j.task == t] for t in ("score", "safety")}
    assert by_task["score"] == first.judgments and len(by_task["safety"]) == 4
    assert set(log.reports) == {"leaderboard", "safety"}
    assert [e for e in log.results if e.table.startswith("leaderboard/")] == first.results


def test_a_non_finite_number_of_a_store_is_logged_as_none() -> None:
    """A store may keep a NaN mass (JSON lines allow it); the log, strict JSON, holds None there."""
    from esc.tasks.run_log import logged

    record = _record(ScoreRecord, "a__b__en/1", "empathy", 3)
    record.answer_mass, record.expected, record.probs = float("nan"), float("inf"), [0.1, float("nan")]
    j = logged("score", record, ("a__b__en/1",), "3")
    assert (j.answer_mass, j.expected, j.probs) == (None, None, None)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("score", "3", "score: Input should be a valid number"),
        ("score", float("nan"), "score: Input should be a finite number"),  # the log is strict JSON
        ("turn", "2", "turn: Input should be a valid integer"),
        ("dialogues", "a__b__en/1", "dialogues: Input should be a valid tuple"),
    ],
)
def test_a_judgment_field_of_the_wrong_type_is_a_data_error(
    tmp_path: Path, field: str, value: Any, says: str
) -> None:
    judgment = {
        "task": "score",
        "dialogues": ["a__b__en/1"],
        "key": "empathy",
        "judge": "tiny",
        "status": "valid",
    }
    data = {
        "format": FORMAT,
        "header": {},
        "judgments": [{**judgment, field: value}],
        "results": [],
        "reports": {},
    }
    (tmp_path / RUN_LOG).write_text(json.dumps(data))
    with pytest.raises(DataError, match=f"judgment 0: {says}"):
        read_run_log(tmp_path)
    data = {**data, "judgments": [judgment], "header": {"git": "x"}}
    (tmp_path / RUN_LOG).write_text(json.dumps(data))
    with pytest.raises(
        DataError, match=r"\[record header\]: malformed run log: git: Input should be a valid dictionary"
    ):
        read_run_log(tmp_path)


def test_force_replaces_a_run_json_upgrade_cannot_read(tmp_path: Path) -> None:
    old = _old_folder(tmp_path / "old")
    (old / RUN_LOG).write_text('{"my": "notes"}')
    assert main(["runs", "upgrade", str(old), "--force"]) == 0
    assert read_run_log(old).header.written_by == "esc runs upgrade"
