"""A rank.py mode is one registered task (issue 38).

A toy mode, written and registered here with no edit anywhere in `esc/` (its YAML section comes as
an override, as a section of conf/rank.yaml would), runs through rank.py's whole lifecycle: its
config section checked before any work, `dialogues=` mandatory because it reads them, judging
appended as it goes and resumed on a rerun, its report in the manifest and on the report site.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from esc.config_rules import Section, Settings, load_section
from esc.config_schema import validate
from esc.dialogues.record import Dialogue, Turn
from esc.dialogues.store import read_dialogues
from esc.errors import ConfigError
from esc.lifecycle import JobResult
from esc.reports.result import Report, Table, write_result
from esc.scoring.judge import ScoreItem
from esc.scoring.judging import Batch
from esc.scoring.store import ScoreRecord, ScoreStore
from esc.tasks.task import Context, Mode, Outcome, Plan, RunSettings, get_mode, modes, register, unregister
from tests.helpers import compose, run_job

QUESTION = "Does this reply ask the seeker a question? Answer yes or no."


@dataclasses.dataclass
class AsksResult(JobResult):
    valid: int = 0
    answers: int = 0

    def summary(self) -> str:
        return f"{self.valid} of {self.answers} answers readable"


class AsksRecord(ScoreRecord):
    """A yes (0) / no (1) answer about one reply."""

    def check(self) -> None:
        if self.dimension != "asks":
            raise ValueError(f"unknown question {self.dimension!r}")

    def valid_scores(self) -> tuple[int, ...]:
        return (0, 1)


class AsksSettings(Settings):
    """`toy_asks`: its config section, typed (the value comes from the YAML section)."""

    min_words: int = Field(ge=1)  # replies shorter than this are not asked about


class AsksAQuestion(Mode):
    """Does each reply of at least `min_words` words ask the seeker a question? (yes/no)"""

    name = "toy_asks"
    reads_dialogues = True
    own_questions = True
    reports = ("toy_asks",)
    config = (Section("toy_asks", AsksSettings),)

    def settings(self, cfg: Any) -> dict[str, Any]:
        return {"toy_asks": {"question": QUESTION}}

    def plan(self, ctx: Context) -> Plan:
        min_words = ctx.section("toy_asks").min_words  # an int, checked before any work
        files = ctx.dialogue_files(distinct_names=True)
        items = [
            ScoreItem(
                f"{path.stem}/{d.card_id}#{i}",
                "asks",
                d.language,
                (),
                (("user", f"{QUESTION}\n\n{t.text}"),),
                ("yes", "no"),
                question=("toy_asks", 1),
            )  # fmt: skip
            for path in files
            for d in read_dialogues(path)
            for i, t in enumerate(d.turns)
            if t.speaker == "target" and len(t.text.split()) >= min_words
        ]
        store = ScoreStore(ctx.out / "toy_asks" / f"{ctx.judge.name}.jsonl", AsksRecord)
        return Plan(
            [Batch(ctx.judge, items, store, "replies", "answer")], {"sources": [str(p) for p in files]}
        )

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        records = plan.batches[0].store.records
        valid = sum(r.status == "valid" for r in records.values())
        table = Table.of(["valid", "answers"], [[valid, len(records)]])
        write_result(ctx.out, Report("toy_asks", (table,)))  # toy_asks.md, and the page of the site
        return Outcome(AsksResult(str(ctx.out), valid, len(records)), {"answers": len(records)})


@pytest.fixture()
def toy_mode():
    register(AsksAQuestion)
    yield
    unregister("toy_asks")


def _dialogues(folder: Path) -> Path:
    texts = [
        "I can't sleep",
        "That sounds hard. What keeps you up?",
        "work",
        "Okay.",
        "yes",
        "Tell me more.",
    ]
    lines = []
    for card in (1, 2):
        d = Dialogue(card, "en", "seeker", "bot", "sys", "Hello.", None, status="complete")
        d.turns = [Turn("roleplayer" if i % 2 == 0 else "target", t, "stop") for i, t in enumerate(texts)]
        lines.append(json.dumps(d.to_dict()) + "\n")
    path = folder / "dialogues" / "bot__seeker__en.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(lines))
    return folder


def _cfg(out: Path, *overrides: str):
    return compose(
        ["mode=toy_asks", "judge=tiny", "cache=off", "scoring.progress=false", *overrides],
        output_dir=out, config_name="rank",
    )  # fmt: skip


def test_a_registered_mode_runs_through_rank_py_and_resumes(toy_mode, tmp_path: Path) -> None:
    from esc.rank.run import rank

    runs = _dialogues(tmp_path / "evaluate")
    cfg = _cfg(tmp_path / "out", f"dialogues={runs}", "+toy_asks.min_words=2")
    validate(cfg, "rank")
    result = rank(cfg, validate(cfg, "rank"))
    out = tmp_path / "out"
    store = out / "toy_asks" / "tiny.jsonl"
    assert isinstance(result, AsksResult) and result.answers == 4  # 2 cards x 2 replies of >= 2 words
    assert len(store.read_text().splitlines()) == 4
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["reports"] == ["toy_asks"]
    assert manifest["answers"] == 4 and manifest["counts"] == {"skipped": 0, **_statuses(store)}
    settings = json.loads((out / "settings.json").read_text())["rank.toy_asks"]
    assert settings["toy_asks"] == {"question": QUESTION} and settings["judge"]["name"] == "tiny"
    pages = sorted(p.name for p in (out / "report" / "runs").glob("*.html"))
    assert any(name.endswith("-toy_asks.html") for name in pages)  # its report is a page of the site

    again = run_job("rank", _cfg(out, f"dialogues={runs}", "+toy_asks.min_words=2"))
    assert again.answers == 4 and len(store.read_text().splitlines()) == 4  # nothing judged twice
    assert json.loads((out / "manifest.json").read_text())["counts"] == {"skipped": 4}


def _statuses(store: Path) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in store.read_text().splitlines():
        status = json.loads(line)["status"]
        found[status] = found.get(status, 0) + 1
    return found


def test_its_config_section_and_needs_are_checked_before_any_work(toy_mode, tmp_path: Path) -> None:
    runs = _dialogues(tmp_path / "evaluate")
    with pytest.raises(ConfigError, match=r"toy_asks\.min_words`: must be greater than or equal to 1, got 0"):
        validate(_cfg(tmp_path / "out", f"dialogues={runs}", "+toy_asks.min_words=0"), "rank")
    with pytest.raises(ConfigError, match=r"toy_asks\.min_word\b.*unknown key"):
        validate(_cfg(tmp_path / "out", f"dialogues={runs}", "+toy_asks.min_word=2"), "rank")
    with pytest.raises(ConfigError, match="dialogues.*mandatory"):  # it reads dialogues
        validate(_cfg(tmp_path / "out"), "rank")
    with pytest.raises(ConfigError, match=r"toy_asks\.min_words`: must be a valid integer, got \"abc\""):
        validate(_cfg(tmp_path / "out", f"dialogues={runs}", "+toy_asks.min_words=abc"), "rank")
    assert not (tmp_path / "out").exists()


def test_the_mode_list_is_the_registry(toy_mode) -> None:
    assert {"score", "leaderboard", "agreement", "correlation", "roleplay", "trajectory", "safety",
            "pairwise", "toy_asks"} <= set(modes())  # fmt: skip
    run = {"seed": 0, "scores": None, "dimensions": "all", "max_cost": None}  # `mode`: its settings' check
    with pytest.raises(ConfigError, match=r'config `mode`: must be one of .*toy_asks.*got "toy_ask"'):
        load_section("", RunSettings, {**run, "mode": "toy_ask"})
    assert get_mode("toy_asks").name == "toy_asks"
    with pytest.raises(ValueError, match="registered twice"):

        @register
        class Another(AsksAQuestion):
            """Another class of the same name."""


def test_a_mode_that_asks_its_own_questions_refuses_score_adapters(toy_mode, tmp_path: Path) -> None:
    """ESC-RANK's per-dimension adapters score 0-4 on a dimension; they cannot answer a mode's own
    questions: refused for any mode that says so, as for mode=safety."""
    from esc.rank.run import rank

    cfg = _cfg(tmp_path / "out", f"dialogues={_dialogues(tmp_path / 'evaluate')}", "+toy_asks.min_words=2",
               "judge.adapters.layout=single", f"judge.adapters.root={tmp_path}")  # fmt: skip
    with pytest.raises(ConfigError, match="mode=toy_asks's questions"):
        rank(cfg, validate(cfg, "rank"))
