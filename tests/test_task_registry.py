"""A task is one folder (issue 51): a toy task written into a temporary package, with no edit in
`esc/` and one YAML section, runs through rank.py and shows everywhere a built-in task shows.

The folder `toytasks/asks/` holds everything the task is: its settings model, its question, its
records, how a record reads in the run log, and its report (an `Estimate` per target, resampled by
role card). The test checks what a contributor would look for: its judgments in the run log and on
each dialogue's page, its figures in md, csv and json and on the target's page, and its settings
refused before any work, one `error:` line each.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from esc.config_schema import validate
from esc.dialogues.record import Dialogue, Turn
from esc.errors import ConfigError, exit_on_user_error
from esc.paths import REPO_ROOT
from esc.reports.estimate import format_estimate
from esc.reports.runlog import read_run_log
from esc.tasks.task import modes, unregister
from tests.helpers import compose

TASK = '''
"""Does the helper ask the seeker a question anywhere in the conversation? (yes/no, per dialogue)"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from pydantic import Field

from esc.config_rules import Settings, Section
from esc.dialogues.store import read_dialogues
from esc.lifecycle import JobResult
from esc.reports.bootstrap import estimate, unit_intervals
from esc.reports.estimate import format_estimate
from esc.reports.metric import metric
from esc.reports.result import Cell, Report, Table, Text, write_result
from esc.scoring.judge import ScoreItem
from esc.scoring.judging import Batch
from esc.scoring.store import ScoreRecord, ScoreStore
from esc.tasks.run_log import logged
from esc.tasks.task import Mode, Outcome, Plan, register

QUESTION = "Does the helper ask the seeker a question in this conversation? Answer yes or no."
ANSWERS = ("yes", "no")
SHARE = metric("toy_asks.share", "share of dialogues where the helper asks", True, "role card", "%")


class AsksSettings(Settings):
    """`toy_asks`: its section of the config."""

    min_words: int = Field(ge=1)  # replies shorter than this are left out of the conversation shown
    bootstrap: int = Field(ge=0)  # resamples (by role card) for the 95% intervals


class AsksRecord(ScoreRecord):
    def check(self) -> None:
        if self.dimension != "asks":
            raise ValueError(f"unknown question {self.dimension!r}")

    def valid_scores(self) -> tuple[int, ...]:
        return (0, 1)


@register
class AsksAQuestion(Mode):
    name = "toy_asks"
    reads_dialogues = True
    own_questions = True
    reports = ("toy_asks",)
    stores = (("toy_asks/*.jsonl", AsksRecord),)
    config = (Section("toy_asks", AsksSettings),)

    def judgment(self, record):
        answer = None if record.score is None else ANSWERS[record.score]
        return logged(self.name, record, (record.dialogue_id,), answer)

    def plan(self, ctx):
        section = ctx.section("toy_asks")
        files = ctx.dialogue_files(distinct_names=True)
        items = []
        for path in files:
            for d in read_dialogues(path):
                shown = "\\n".join(
                    f"{t.speaker}: {t.text}" for t in d.turns if len(t.text.split()) >= section.min_words
                )
                items.append(ScoreItem(f"{path.stem}/{d.card_id}", "asks", d.language, (),
                                       (("user", f"{QUESTION}\\n\\n{shown}"),), ANSWERS,
                                       question=("toy_asks", 1)))
        store = ScoreStore(ctx.out / "toy_asks" / f"{ctx.judge.name}.jsonl", AsksRecord)
        batch = Batch(ctx.judge, items, store, "dialogues", "answer")
        return Plan([batch], {"sources": [str(p) for p in files]})

    def report(self, ctx, plan):
        section = ctx.section("toy_asks")
        by_target = defaultdict(list)
        for record in plan.batches[0].store.records.values():
            if record.status == "valid":
                by_target[record.dialogue_id.split("__")[0]].append((record.card_id, record.score == 0))
        rows = []
        for target, answers in sorted(by_target.items()):
            said = np.array([yes for _, yes in answers], dtype=float)
            [interval] = unit_intervals(len(said), lambda i: said[i].mean(), section.bootstrap, ctx.run.seed)
            figure = estimate(float(said.mean()), interval, len(said), "role card")
            rows.append([target, Cell(format_estimate(figure, 2, 100), figure)])
        table = Table.of(["target", "asks a question (%)"], rows, csv="toy_asks.csv", name="asks",
                         metrics={"asks a question (%)": SHARE}, rank_within=())
        write_result(ctx.out, Report("toy_asks", (Text("Share of dialogues where the helper asks."), table)))
        return Outcome(JobResult(str(ctx.out)), {"dialogues": sum(map(len, by_target.values()))})
'''

SECTION = """\
toy_asks:                  # mode=toy_asks (toytasks/asks/task.py)
  min_words: 2             # replies shorter than this are left out of the conversation shown
  bootstrap: 50            # resamples (by role card) for the 95% intervals
"""


@pytest.fixture()
def toy_task(tmp_path: Path):
    """The task's folder in a package outside `esc/`, imported as a plugin would be."""
    folder = tmp_path / "plugins" / "toytasks" / "asks"
    folder.mkdir(parents=True)
    (folder.parent / "__init__.py").write_text("")
    (folder / "__init__.py").write_text('"""A toy task: does the helper ask a question?"""\n')
    (folder / "task.py").write_text(textwrap.dedent(TASK))
    (folder / "section.yaml").write_text(SECTION)
    sys.path.insert(0, str(tmp_path / "plugins"))
    importlib.import_module("toytasks.asks.task")
    yield folder
    unregister("toy_asks")
    sys.path.remove(str(tmp_path / "plugins"))
    for name in [m for m in sys.modules if m.startswith("toytasks")]:
        del sys.modules[name]


def _dialogues(folder: Path) -> Path:
    texts = {
        "bot": ["I can't sleep", "What keeps you up at night?", "work", "Tell me more about work."],
        "other": ["I can't sleep", "Sleep is important.", "work", "Work can be hard."],
    }
    for target, lines in texts.items():
        rows = []
        for card in (1, 2, 3):
            d = Dialogue(card, "en", "seeker", target, "sys", "Hello.", None, status="complete")
            d.turns = [Turn("roleplayer" if i % 2 == 0 else "target", t, "stop") for i, t in enumerate(lines)]
            rows.append(json.dumps(d.to_dict()) + "\n")
        path = folder / "dialogues" / f"{target}__seeker__en.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(rows))
    return folder


def _overrides(section: Path, **changed: object) -> list[str]:
    """The task's YAML section as command-line additions (what a section of conf/rank.yaml gives)."""
    values = {**yaml.safe_load(section.read_text())["toy_asks"], **changed}
    return [f"+toy_asks.{key}={value}" for key, value in values.items()]


def _cfg(out: Path, *overrides: str):
    return compose(
        ["mode=toy_asks", "judge=tiny", "cache=off", "scoring.progress=false", *overrides],
        output_dir=out, config_name="rank",
    )  # fmt: skip


def test_a_task_folder_outside_esc_runs_and_shows_everywhere(toy_task: Path, tmp_path: Path) -> None:
    from esc.rank.run import rank

    assert "toy_asks" in modes()
    runs = _dialogues(tmp_path / "evaluate")
    out = tmp_path / "out"
    cfg = _cfg(out, f"dialogues={runs}", *_overrides(toy_task / "section.yaml"))
    rank(cfg, validate(cfg, "rank"))

    # its judgments: one per dialogue, in the run log
    log = read_run_log(out)
    mine = [j for j in log.judgments if j.task == "toy_asks"]
    assert len(mine) == 6 and {j.dialogues for j in mine} == {
        (f"{t}__seeker__en/{c}",) for t in ("bot", "other") for c in (1, 2, 3)
    }
    assert all(j.key == "asks" and j.answer in ("yes", "no", None) for j in mine)

    # its figures: one per target, in md, csv, json and the log, each with its unit
    figures = [e for e in log.results if e.table == "toy_asks/asks"]
    assert sorted(dict(e.keys)["target"] for e in figures) == ["bot", "other"]
    assert all(e.unit == "role card" and e.n == 3 and e.metric == "toy_asks.share" for e in figures)
    # what they measure, defined in the log's header (which direction is better, what is resampled)
    assert log.metrics()["toy_asks.share"].higher_is_better is True
    assert log.header.metrics["toy_asks.share"].unit == "role card"
    markdown = (out / "toy_asks.md").read_text()
    csv_text = (out / "toy_asks.csv").read_text()
    result = json.loads((out / "toy_asks.result.json").read_text())
    for e in figures:
        shown = f"{e.value * 100:.2f}"
        assert shown in markdown and shown in csv_text
        assert any(
            c.get("value") == e.value
            for b in result["blocks"]
            if b["type"] == "table"
            for r in b["rows"]
            for c in r
        )

    # the site: every dialogue page shows its judgment; each target page shows its figure as written
    site = out / "report"
    pages = {p.relative_to(site).as_posix(): p.read_text() for p in site.rglob("*.html")}
    dialogue_pages = {n: t for n, t in pages.items() if n.startswith("dialogues/")}
    assert len(dialogue_pages) == 6
    for judgment in mine:
        target, card = judgment.dialogues[0].split("__")[0], judgment.dialogues[0].rsplit("/", 1)[1]
        page = dialogue_pages[f"dialogues/{target}/en-{card}.html"]
        assert 'data-task="toy_asks"' in page and f'<td class="num answer">{judgment.answer}</td>' in page
    for e in figures:
        target = dict(e.keys)["target"]
        assert format_estimate(e, 2, 100) in pages[f"targets/{target}.html"]
    # the report page reads the direction from the metric: an arrow in the header; the best row is
    # marked where the report marked it (`Table.of`'s default: its interval overlaps no other's)
    [report_page] = [t for n, t in pages.items() if n.startswith("runs/") and n.endswith("toy_asks.html")]
    assert "asks a question (%) \u2191</th>" in report_page
    marked = [float(v) for v in re.findall(r'data-value="([^"]+)"[^>]*class="num best"', report_page)]
    top, *rest = sorted(figures, key=lambda e: e.value, reverse=True)
    apart = top.low is not None and all(e.high is not None and top.low > e.high for e in rest)
    assert set(marked) == ({float(f"{top.value:.6g}")} if apart else set())
    assert [
        c.get("best", False)
        for b in result["blocks"]
        if b["type"] == "table"
        for r in b["rows"]
        for c in r
        if "value" in c
    ].count(True) == len(marked)  # the page shows the report's mark

    # nothing of it lives in esc/
    for path in (REPO_ROOT / "esc").rglob("*.py"):
        assert "toy_asks" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        ({"min_words": 0}, "config `toy_asks.min_words`: must be greater than or equal to 1, got 0"),
        ({"min_words": "abc"}, 'config `toy_asks.min_words`: must be a valid integer, got "abc"'),
        ({"min_wrods": 2}, "config `toy_asks.min_wrods`"),
    ],
    ids=["range", "wrong-type", "unknown-key"],
)
def test_its_settings_are_checked_before_any_work(
    toy_task: Path, tmp_path: Path, capsys: pytest.CaptureFixture, changed: dict, expected: str
) -> None:
    runs = _dialogues(tmp_path / "evaluate")
    out = tmp_path / "out"
    cfg = _cfg(out, f"dialogues={runs}", *_overrides(toy_task / "section.yaml", **changed))

    @exit_on_user_error
    def check() -> None:
        validate(cfg, "rank")

    with pytest.raises(SystemExit) as stopped:
        check()
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert expected in err
    assert not out.exists()
    with pytest.raises(ConfigError):
        validate(cfg, "rank")
