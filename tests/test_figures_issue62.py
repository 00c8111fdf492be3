"""Issue 62 (runs and numbers, round 4), the figures: no figure is n/a in one view and a number in
another; a jury's rankings report every pair a judge ordered; the jury's words match its numbers;
mode=agreement's counts beside "Aver." are those of the dimensions averaged; a run with no usable
answer does not end "completed".

A figure undefined in more than 5% of its resamples (`Estimate.unstable`) reads "n/a (undefined in k%
of resamples)" in the table: the same figure carries no value or interval in the CSV, the result
and run log JSON, the site's data attributes or the charts, which draw no bar for it and say why."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from esc.reports.metric import METRICS
from esc.reports.result import Report
from esc.scoring.judge import INVALID, VALID, Judge, JudgeAnswer, JudgeSettings, ScoreItem, register_judge
from esc.scoring.jury import JURY, JurySettings
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord
from esc.tasks.agreement.report import AVERAGE, Item, Prediction, agreement_tables, find_row
from esc.tasks.score import leaderboard as board
from esc.tasks.score.jury import leniency
from esc.tasks.score.task import write_reports
from esc.tasks.task import LeaderboardSettings
from tests.helpers import conf_node
from tests.test_bad_inputs import run_in_process

CARDS = 10


def _score(card: int, dim: str) -> int:
    return (card * 3 + DIMENSION_KEYS.index(dim)) % 5


def _score_lines(target: str, valid_on) -> list[dict[str, Any]]:
    """A score file's records: one dialogue per card, every dimension; `valid_on(card, dim)`."""
    out = []
    for card in range(CARDS):
        for dim in DIMENSION_KEYS:
            ok = valid_on(card, dim)
            out.append(
                {"dialogue_id": f"{target}__rp__en/{card}", "dimension": dim, "language": "en", "judge": "j",
                 "prompt": {"style": "official", "version": 2}, "status": VALID if ok else INVALID,
                 "score": _score(card, dim) if ok else None, "error": None if ok else "not a score",
                 "target": target, "roleplayer": "rp", "card_id": card, "content_sha": f"{target}{card}{dim}"}
            )  # fmt: skip
    return out


# --- item 5: an unstable figure is n/a in every view ------------------------------------------------


@pytest.fixture(scope="module")
def unstable_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mode=leaderboard over two targets: `full`, and `empathy_once`, whose Empathy is valid on one
    card of 10 (its Average is undefined in 0.9^10 = 35% of the resamples by card)."""
    root = tmp_path_factory.mktemp("unstable")
    scores = root / "copied" / "j.jsonl"  # a loose score file: the site is OUT's alone
    scores.parent.mkdir(parents=True)
    lines = [*_score_lines("full", lambda c, d: True),
             *_score_lines("empathy_once", lambda c, d: d != "empathy" or c == 0)]  # fmt: skip
    scores.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    monkeypatch = pytest.MonkeyPatch()
    capsys = _NoCapture()
    try:
        code, stderr, _ = run_in_process(
            ["rank.py", f"hydra.run.dir={root / 'out'}", "mode=leaderboard", f"scores=[{scores}]",
             "leaderboard.bootstrap=400", "leaderboard.charts=true", "leaderboard.breakdowns=false"],
            monkeypatch, capsys,  # type: ignore[arg-type]
        )  # fmt: skip
    finally:
        monkeypatch.undo()
    assert code == 0, stderr[-2000:]
    return root / "out"


class _NoCapture:
    """run_in_process wants capsys only to read what was printed; a module fixture has none."""

    def readouterr(self) -> Any:
        return type("Out", (), {"out": "", "err": ""})()


def _average_cell(out: Path) -> dict[str, Any]:
    result = json.loads((out / "leaderboard.result.json").read_text())
    table = next(b for b in result["blocks"] if b["type"] == "table")
    row = next(r for r in table["rows"] if r[1]["text"] == "empathy_once")
    return row[table["columns"].index("Average")]


def test_an_unstable_average_reads_n_a_in_the_table(unstable_run: Path) -> None:
    cell = _average_cell(unstable_run)
    assert cell["text"].startswith("n/a (undefined in ") and cell["undefined"] > 0.05


def test_an_unstable_average_has_no_value_or_interval_in_the_csv(unstable_run: Path) -> None:
    with (unstable_run / "leaderboard.csv").open(encoding="utf-8") as fh:
        rows = {r["Target"]: r for r in csv.DictReader(fh)}
    shown = rows["empathy_once"]
    assert shown["Average"].startswith("n/a (undefined in ")
    assert (shown["Average value"], shown["Average low"], shown["Average high"]) == ("", "", "")
    assert rows["full"]["Average value"] != ""  # a stable figure keeps its numbers


def test_an_unstable_average_has_no_value_in_the_result_or_the_run_log(unstable_run: Path) -> None:
    cell = _average_cell(unstable_run)
    assert not {"value", "low", "high"} & set(cell), cell
    log = json.loads((unstable_run / "run.json").read_text())
    [figure] = [
        e for e in log["results"]
        if e["keys"].get("Target") == "empathy_once" and e["keys"].get("column") == "Average"
    ]  # fmt: skip
    assert not {"value", "low", "high"} & set(figure) and figure["undefined"] > 0.05, figure


def test_an_unstable_average_has_no_data_value_on_the_site(unstable_run: Path) -> None:
    """The site sorts by `data-value`: an n/a figure carries none, so it sorts with the n/a's."""
    pages = [p.read_text(encoding="utf-8") for p in (unstable_run / "report").rglob("*.html")]
    cells = [c for page in pages for c in re.findall(r"<td[^>]*>n/a \(undefined in [^<]*</td>", page)]
    assert cells, "no n/a cell of the leaderboard on the site"
    for c in cells:
        assert "data-value" not in c and "data-low" not in c and "data-high" not in c, c


def test_the_average_chart_draws_no_bar_for_an_unstable_average_and_says_why() -> None:
    records = [ScoreRecord.from_dict(r) for r in
               [*_score_lines("full", lambda c, d: True),
                *_score_lines("empathy_once", lambda c, d: d != "empathy" or c == 0)]]  # fmt: skip
    rows = board.leaderboard(records, 400, seed=0)
    [unstable] = [r for r in rows if r.target == "empathy_once"]
    assert unstable.average.estimate.unstable
    [(_, _, fig)] = [f for f in board.chart_figures(rows) if f[1] == "average"]
    ax = fig.axes[0]
    order = [r.target for r in rows]  # a bar's x is its row's position
    heights = {round(p.get_x() + p.get_width() / 2): p.get_height() for p in ax.patches}
    assert heights.get(order.index("empathy_once"), 0) == 0 and heights[order.index("full")] > 0
    share = f"{unstable.average.estimate.undefined:.0%}"
    labels = [t.get_text() for t in ax.texts]
    assert f"n/a: undefined in {share} of resamples" in labels, labels
    # no error bar drawn around the missing bar: every error bar segment belongs to the stable row
    segments = [seg for coll in ax.collections for seg in coll.get_segments()]
    xs = {round(float(seg[0][0]), 6) for seg in segments}
    assert float(order.index("empathy_once")) not in xs


# --- item 6: the jury's rankings report every pair a judge ordered ---------------------------------


def _jury_record(judge: str, target: str, card: int, dim: str, score: int | None) -> ScoreRecord:
    status = VALID if score is not None else INVALID
    return ScoreRecord(f"{target}__rp__en/{card}", dim, "en", judge, {"style": "official", "version": 2},
                       status, score, target=target, roleplayer="rp", card_id=card)  # fmt: skip


def _split_judges() -> list[ScoreRecord]:
    """Three targets on 8 cards: a and b both put t1 above t2; a puts t3 first, b last. Each judge's
    Humanoid of t3 is valid on half the cards, the other half of the other judge's: with every judge
    needed (min_valid null) the jury has no valid Humanoid of t3, so no Average of t3."""
    out = []
    scores = {"t1": (3, 3), "t2": (2, 2), "t3": (4, 1)}
    for target, (a, b) in scores.items():
        for card in range(8):
            for dim in DIMENSION_KEYS:
                a_ok = not (target == "t3" and dim == "humanoid" and card >= 4)
                b_ok = not (target == "t3" and dim == "humanoid" and card < 4)
                out += [_jury_record("a", target, card, dim, a if a_ok else None),
                        _jury_record("b", target, card, dim, b if b_ok else None)]  # fmt: skip
    return out


def _settings(**changes: Any) -> LeaderboardSettings:
    node = conf_node("leaderboard", {"charts": False, "breakdowns": False, "bootstrap": 20, **changes},
                     config_name="rank")  # fmt: skip
    return LeaderboardSettings(**node)


def _jury(min_valid: int | None = None, reading: str = "expected") -> JurySettings:
    members = {m: {"kind": "planted_unreadable", "name": m} for m in ("a", "b")}  # judge nodes (unused)
    return JurySettings(members=members, pool="mean", min_valid=min_valid, reading=reading)


def _jury_text(tmp_path: Path, jury: JurySettings, records: Sequence[ScoreRecord]) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    markdown = write_reports(tmp_path, records, _settings(), 0, jury)["markdown"]
    return markdown[markdown.index("## The jury") :]


def test_a_pair_the_jury_cannot_order_is_reported_not_dropped(tmp_path: Path) -> None:
    text = _jury_text(tmp_path, _jury(), _split_judges())
    assert "no two judges order a pair of targets oppositely" not in text, text
    disagree = next(line for line in text.splitlines() if line.startswith("- judges disagree on:"))
    assert "t1 vs t3 (a: t3, b: t1)" in disagree and "t2 vs t3 (a: t3, b: t2)" in disagree
    # the jury ranks only t1 and t2: it says which target it has no Average for
    jury_line = next(line for line in text.splitlines() if line.startswith(f"- {JURY}:"))
    assert "t1 > t2" in jury_line and "t3" in jury_line and "n/a" in jury_line, jury_line


def test_kendalls_tau_with_the_jury_counts_every_pair_the_judge_ordered(tmp_path: Path) -> None:
    """a ranks t3 > t1 > t2 and b t1 > t2 > t3: a tau of 1.00 with a jury that ranks t1 > t2 only
    would say both agree with it perfectly. It is n/a (the jury orders no pair with t3); with
    jury.min_valid=1 the jury ranks all three (t1 > t3 > t2) and each judge's tau is 1/3."""
    text = _jury_text(tmp_path, _jury(), _split_judges())
    assert "Kendall's tau-b with the jury: 1.00" not in text, text
    for judge in ("a", "b"):
        line = next(line for line in text.splitlines() if line.startswith(f"- {judge}:"))
        assert "Kendall's tau-b with the jury: n/a" in line and "t3" in line.split("tau-b")[1], line
    lenient = _jury_text(tmp_path / "one", _jury(min_valid=1), _split_judges())
    for judge in ("a", "b"):
        line = next(line for line in lenient.splitlines() if line.startswith(f"- {judge}:"))
        assert "Kendall's tau-b with the jury: 0.33" in line, line


# --- the jury's words match its numbers -------------------------------------------------------------


def _offset_judges(offset: float = 0.9) -> list[ScoreRecord]:
    """Two judges on 2 targets x 6 cards: a's expected score is b's + `offset` everywhere."""
    rng = np.random.default_rng(1)
    out = []
    for target in ("t1", "t2"):
        for card in range(6):
            for dim in DIMENSION_KEYS:
                base = float(rng.uniform(0.5, 3.0))
                for judge, expected in (("a", base + offset), ("b", base)):
                    record = _jury_record(judge, target, card, dim, int(round(expected)))
                    out.append(dataclasses.replace(record, expected=expected))
    return out


def test_leniency_is_the_difference_from_the_other_judges() -> None:
    """a reads 0.90 above b on every judgment: its difference from the other judge is +0.90 (the
    metric's words), not +0.45 (its difference from a pool that includes itself)."""
    rows = {le.judge: le for le in leniency(_offset_judges(0.9), ["a", "b"], n=50, seed=0)}
    assert rows["a"].offset == pytest.approx(0.9) and rows["b"].offset == pytest.approx(-0.9)


def test_the_jury_alpha_is_labelled_with_the_level_it_computed(tmp_path: Path) -> None:
    """jury.reading=expected computes interval alpha: the metric its figures name says so."""
    for reading, level, other in (("expected", "interval", "ordinal"), ("stated", "ordinal", "interval")):
        out = tmp_path / reading
        out.mkdir()
        write_reports(out, _offset_judges(), _settings(), 0, _jury(reading=reading))
        report = json.loads((out / "leaderboard.result.json").read_text())
        [table] = [b for b in report["blocks"] if b.get("name") == "agreement between the judges"]
        alphas = {c["metric"] for row in table["rows"] for c in row if "metric" in c}
        assert len(alphas) == 1, alphas
        words = METRICS[alphas.pop()].aggregation
        assert level in words and other not in words, (reading, words)
        leniency_words = METRICS["score.leniency"].aggregation
        assert "other judges" in leniency_words


# --- mode=agreement: the counts beside Aver. ---------------------------------------------------------


def test_the_counts_beside_aver_are_those_of_the_dimensions_averaged() -> None:
    """3 dimensions x 40 dialogues; the judge has no valid Humanoid (so Aver. is of 2 of 3) and 2
    invalid Empathy judgments: Aver.'s n is 80 and its invalid 2, not 120 and 42."""
    rng = np.random.default_rng(0)
    dims = ("empathy", "humanoid", "overall")
    items = [Item((f"d{i}", d), int(rng.integers(0, 5)), f"d{i}") for i in range(40) for d in dims]
    judge = {
        it.key: Prediction()
        if it.dimension == "humanoid" or (it.dimension == "empathy" and it.key[0] in ("d0", "d1"))
        else Prediction(int(rng.integers(0, 5)))
        for it in items
    }
    baseline = {it.key: Prediction(2) for it in items}
    tables = agreement_tables(items, {"judge": judge, "baseline": baseline}, n_resamples=20, seed=0)
    [average] = [t for t in tables if t.scope == AVERAGE]
    assert average.dimensions == ("empathy", "overall")
    row = find_row(tables, AVERAGE, "judge", "argmax")
    assert (row.n, row.n_invalid, row.n_common) == (80, 2, 78)
    assert average.n_units == 40
    assert find_row(tables, AVERAGE, "baseline", "argmax").n_invalid == 0


# --- a run with no usable answer does not end "completed" --------------------------------------------


def test_a_leaderboard_whose_every_judgment_failed_does_not_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    scores = tmp_path / "in" / "scores" / "j.jsonl"
    scores.parent.mkdir(parents=True)
    lines = []
    for r in _score_lines("t", lambda c, d: False)[:7]:
        lines.append({**r, "status": "failed", "error": "HTTP 503 after 3 tries"})
    scores.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    code, stderr, _ = run_in_process(
        ["rank.py", f"hydra.run.dir={tmp_path / 'out'}", "mode=leaderboard", f"scores=[{scores}]",
         "leaderboard.bootstrap=10", "leaderboard.charts=false"], monkeypatch, capsys,
    )  # fmt: skip
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert code != 0 and manifest["status"] != "completed", (code, manifest["status"], stderr[-800:])
    last = stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: ") and "7 judgments" in last and "failed" in last, last


@register_judge("planted_unreadable")
class UnreadableJudge(Judge):
    """Every answer invalid (a judge whose replies never parse)."""

    class Settings(JudgeSettings):
        prompt: str = "official"

    def __init__(self, settings: Settings, config_key: str = "judge") -> None:
        self.name, self.prompt, self.config_key = settings.name, settings.prompt, config_key

    def judge(self, items: Sequence[ScoreItem]) -> list[JudgeAnswer]:
        return [JudgeAnswer(INVALID, raw="GARBLE", error="not yes or no") for _ in items]

    def identity(self) -> dict[str, Any]:
        return {"kind": "planted_unreadable", "name": self.name}


def test_a_safety_run_whose_every_answer_is_invalid_does_not_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from esc.dialogues.record import Dialogue, Turn

    folder = tmp_path / "run" / "dialogues"
    folder.mkdir(parents=True)
    dialogues = []
    for card in range(3):
        d = Dialogue(card, "en", "seeker", "bot", "sys", "Hello.", None, status="complete")
        d.turns = [Turn("roleplayer", "I feel low", "stop"), Turn("target", "I am here.", "stop")]
        dialogues.append(json.dumps(d.to_dict()) + "\n")
    (folder / "bot__seeker__en.jsonl").write_text("".join(dialogues), encoding="utf-8")
    conf = tmp_path / "conf" / "judge"
    conf.mkdir(parents=True)
    (conf / "planted_unreadable.yaml").write_text("kind: planted_unreadable\nname: unreadable\n")
    code, stderr, stdout = run_in_process(
        ["rank.py", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "mode=safety",
         "judge=planted_unreadable", f"dialogues={tmp_path / 'run'}", "safety.bootstrap=0",
         "scoring.progress=false", "cache=off", f"hydra.run.dir={tmp_path / 'out'}"], monkeypatch, capsys,
    )  # fmt: skip
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert code != 0 and manifest["status"] != "completed", (code, manifest["status"], stderr[-1500:])
    last = stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: no valid answer") and "invalid" in last, last
    assert (tmp_path / "out" / "safety.md").is_file()  # the report is written first


def test_the_report_module_reads_estimates_through_one_property() -> None:
    """Every view asks the figure (`Estimate.shown`), not its own rule: a figure undefined in 6% of
    its resamples is hidden everywhere, one undefined in 4% shown everywhere."""
    from esc.reports.estimate import Estimate
    from esc.reports.result import Cell, Table, table_csv

    hidden = Estimate(50.0, 40.0, 60.0, 10, "role card", undefined=0.06)
    kept = Estimate(50.0, 40.0, 60.0, 10, "role card", undefined=0.04)
    assert hidden.shown() == (None, None, None) and kept.shown() == (50.0, 40.0, 60.0)
    table = Table.of(["t", "x"], [["a", Cell("n/a", hidden)], ["b", Cell("50", kept)]])
    lines = table_csv(table).splitlines()
    assert lines[1] == "a,n/a,,,,10" and lines[2].startswith("b,50,50.0,40.0,60.0")
    assert "value" not in hidden.to_json() and kept.to_json()["value"] == 50.0
    assert Report("r", (table,)).estimates()[0].undefined == 0.06
