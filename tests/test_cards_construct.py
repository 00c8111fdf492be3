"""Role-card construction (issue 11): source adapters on the real files, strict parsing of the LLM
steps' replies in both languages, the whole pipeline with a scripted extractor (kept / dropped /
unparseable counts, near-duplicates, human dialogues, resume), and bad input."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from esc.cards import load_cards
from esc.cards.construct import steps
from esc.cards.construct.run import build_cards
from esc.cards.construct.sources import ADAPTERS, UserFile, read_source
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, register_backend
from esc.chat.settings import BackendSettings
from esc.config_rules import load_section
from esc.config_schema import validate
from esc.errors import ConfigError, DataError
from esc.paths import data_dir
from tests.helpers import compose, requires_data

pytestmark = requires_data


@register_backend("card_writer")
class CardWriter(ChatBackend):
    """Answers each step's prompt as a careful LLM would, from what the prompt shows; a post that
    says "gibberish" gets an unreadable card, one that says "sad" is only an emotion."""

    runs_in_process = True  # a fake model: nothing is billed

    calls = 0

    class Settings(BackendSettings):
        """No settings: it answers from the prompt."""

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        pass

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        CardWriter.calls += len(batch)
        return [Reply(self._answer(messages[-1]["content"]), "stop", 10, 10) for messages in batch]

    def _answer(self, prompt: str) -> str:
        if "role card identity judgment" in prompt:
            return (
                "The character card is not detailed enough. Discard"
                if "only sad" in prompt
                else "family issues"
            )
        if "Which of these categories" in prompt:
            return "3"
        if "Grade how detailed" in prompt:
            return "invalid" if "vague" in prompt else "high"
        text = prompt.split("post: ")[-1] if "post: " in prompt else prompt.split("seeker: ", 1)[-1]
        if "gibberish" in text:
            return "I cannot help with that."
        problem = " ".join(re.sub(r"[^\w\s]", " ", text).split()[:12])
        return f"Age: young   Gender: not mentioned. Occupation: student\nProblem: {problem}."

    def identity(self) -> dict[str, Any]:
        return {"kind": "card_writer"}


def test_every_adapter_reads_its_real_file() -> None:
    expected = {
        "esconv": (1300, "md", "en"),
        "esconv_failed": (196, "md", "en"),
        "smile": (1972, "md", "zh"),
        "psyqa": (100, "qa", "zh"),
        "epitome": (2979, "qa", "en"),
        "chatcounselor": (229, "qa", "en"),
    }
    for name, (count, kind, language) in expected.items():
        records = read_source(name, data_dir())
        assert len(records) == count, name
        assert {r.kind for r in records} == {kind} and {r.language for r in records} == {language}
        assert len({r.record_id for r in records}) == count  # stable, unique ids
        assert records == read_source(name, data_dir())
    esconv = read_source("esconv", data_dir(), limit=1)[0]
    assert esconv.record_id == "esconv/train/0" and esconv.text and esconv.dialogue[0][0] == "seeker"
    assert set(ADAPTERS) >= set(expected) | {"jsonl_qa", "jsonl_dialogues"}


def test_your_own_files_and_their_errors(tmp_path: Path) -> None:
    qa = tmp_path / "mhp.jsonl"
    qa.write_text(json.dumps({"id": 7, "text": "My boss yells at me every day."}) + "\n")

    def node(path: Path, source: str) -> UserFile:
        value = {"enabled": True, "path": str(path), "source": source, "language": "en"}
        return load_section("cards.sources.jsonl_qa", UserFile, value)

    (record,) = read_source("jsonl_qa", data_dir(), node(qa, "MHP"))
    assert (record.record_id, record.source, record.kind) == ("mhp/7", "MHP", "qa")
    md = tmp_path / "extes.jsonl"
    turns = [{"speaker": "user", "text": "I lost my job"}, {"speaker": "bot", "text": "I'm sorry"}]
    md.write_text(json.dumps({"id": "a", "dialogue": turns}) + "\n")
    (dialogue,) = read_source("jsonl_dialogues", data_dir(), node(md, "ExTES"))
    assert dialogue.dialogue == (("seeker", "I lost my job"), ("supporter", "I'm sorry"))
    qa.write_text(qa.read_text() + json.dumps({"id": 8, "text": ""}) + "\n")
    with pytest.raises(DataError, match=r"mhp.jsonl.*line 2.*empty `text`"):
        read_source("jsonl_qa", data_dir(), node(qa, "MHP"))
    with pytest.raises(ConfigError, match="config `cards.sources.jsonl_qa.source`: unknown source 'Reddit'"):
        node(qa, "Reddit")
    with pytest.raises(ConfigError, match="config `cards.sources.jsonl_qa.path`: name your JSON-lines file"):
        node("", "MHP")


FIG6 = "Age: young Gender: not mentioned. Occupation: student\nProblem: Difficulty adjusting to school."
FIG9 = (
    "Age: Teenager      Gender: Not Mentioned      Occupation: second year college student\nProblems: Fired."
)
MARKDOWN = (
    "**Age:** 34\n\n**Gender:** Female\n\n**Occupation:** nurse\n\n**Problem:** Burnout after night shifts."
)
ZH = "年龄：青年\n性别：女性\n职业：研究员\n问题：是否应该放弃稳定的工作去驻外。"
ZH_BLANK_LINES = "年龄：未提及\n\n性别：未提及\n\n职业：学生\n\n问题：高考压力大"


@pytest.mark.parametrize(
    ("reply", "language", "fields"),
    [
        (
            FIG6,
            "en",
            ("young", "not mentioned", "student", "Difficulty adjusting to school"),
        ),  # Figure 6's output
        (FIG9, "en", ("teenage", "not mentioned", "second year college student", "Fired")),  # Figure 9's
        (MARKDOWN, "en", ("34", "female", "nurse", "Burnout after night shifts")),
        (ZH, "zh", ("青年", "女", "研究员", "是否应该放弃稳定的工作去驻外")),
        (ZH_BLANK_LINES, "zh", ("未提及", "未提及", "学生", "高考压力大")),
    ],
)
def test_card_replies_that_parse(reply: str, language: str, fields: tuple[str, ...]) -> None:
    assert tuple(steps.parse_card(reply, language).values()) == fields


@pytest.mark.parametrize(
    ("reply", "language", "why"),
    [
        ("Gender: male\nAge: 30\nOccupation: x\nProblem: y", "en", "in order"),
        ("Age: ancient\nGender: male\nOccupation: x\nProblem: y", "en", "age 'ancient'"),
        ("Age: young\nGender: robot\nOccupation: x\nProblem: y", "en", "gender 'robot'"),
        ("Age: young\nGender: male\nOccupation: x\nProblem:", "en", "problem is empty"),
        ("I'm sorry, I can't help with that.", "en", "found none"),
        ("年龄：青年\n性别：不详\n职业：学生\n问题：失眠", "zh", "gender '不详'"),
    ],
)
def test_card_replies_that_do_not(reply: str, language: str, why: str) -> None:
    with pytest.raises(steps.Unparseable, match=re.escape(why)):
        steps.parse_card(reply, language)


def test_filter_category_and_grade_replies() -> None:
    assert steps.parse_filter("work, study, career issues") == "work_study"
    assert steps.parse_filter("家庭问题") == "family_life"
    assert steps.parse_filter("The character card is not detailed enough. Discard") == steps.DISCARD
    for bad in ("family issues or social issues", "yes"):
        with pytest.raises(steps.Unparseable):
            steps.parse_filter(bad)
    assert steps.parse_category("2.", "work_study") == steps.categories_under("work_study")[1]
    with pytest.raises(steps.Unparseable, match="1-10"):
        steps.parse_category("11", "work_study")
    assert steps.parse_grade("**Middle**") == "middle"
    with pytest.raises(steps.Unparseable):
        steps.parse_grade("high or middle")


def test_the_pipeline_from_records_to_cards(tmp_path: Path) -> None:
    posts = tmp_path / "posts.jsonl"
    rows = [
        {"id": 1, "text": "My husband and I fight about money every night since he lost his job."},
        {
            "id": 2,
            "text": "My husband and I fight about money every night since he lost his job!",
        },  # near-duplicate
        {"id": 3, "text": "gibberish"},
        {"id": 4, "text": "I am only sad"},
        {"id": 5, "text": "Something vague happened at home and I feel down about my family."},
    ]
    posts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = ["+exp=cards/en", "cards.limit=3", "progress=false", "cache.enabled=false",
                 "cards.sources.jsonl_qa.enabled=true", f"cards.sources.jsonl_qa.path={posts}",
                 "cards.sources.epitome.enabled=false", "cards.sources.chatcounselor.enabled=false",
                 "cards.sources.esconv_failed.enabled=false"]  # fmt: skip
    cfg = compose(overrides, output_dir=tmp_path / "out", config_name="cards")
    cfg.extractor = {"kind": "card_writer", "name": "writer"}
    CardWriter.calls = 0
    result = build_cards(cfg, validate(cfg, "cards"))
    report = result.report["by_source"]
    assert report["MHP"] == {"records": 3, "kept": 1, "dropped: near-duplicate": 1, "unparseable: extract": 1}
    assert report["ESConv"]["records"] == 3 and report["ESConv"]["kept"] == 3
    cards = load_cards([tmp_path / "out" / "cards.json"])  # the released format, read back
    assert len(cards) == 4 and all(c.quality == "high" and c.category for c in cards)
    assert {c.source for c in cards} == {"ESConv", "MHP"} and all(c.topic == "family_life" for c in cards)
    raw = json.loads((tmp_path / "out" / "cards.json").read_text())
    assert {r["source_record"] for r in raw} >= {"mhp/1", "esconv/train/0"}
    human = [json.loads(line) for line in (tmp_path / "out" / "human_dialogues.jsonl").open()]
    assert len(human) == 3 and {h["card_id"] for h in human} <= {r["id"] for r in raw}  # the ESConv dialogues
    assert human[0]["dialogue"][0]["role"] == "user"
    unreadable = [json.loads(line) for line in (tmp_path / "out" / "unparseable.jsonl").open()]
    assert [u["record_id"] for u in unreadable] == ["mhp/3"] and "found none" in unreadable[0]["reason"]
    assert "| MHP | 3 | 1 |" in result.markdown
    first = CardWriter.calls
    again = build_cards(cfg, validate(cfg, "cards"))  # a rerun asks nothing it has an answer for
    assert CardWriter.calls == first and again.report == result.report
    # the rest of the posts: "only sad" is dropped by the filter, "vague" graded invalid
    cfg.cards.limit = 5
    report = build_cards(cfg, validate(cfg, "cards")).report["by_source"]["MHP"]
    assert report["dropped: filter (only emotions)"] == 1 and report["dropped: grade invalid"] == 1


def test_the_build_command_writes_a_card_file_and_a_report(tmp_path: Path) -> None:
    from tests.helpers import run_entry

    run = run_entry("build_cards.py", ["+exp=cards/en", "model=tiny", "cards.limit=2",
                           "cards.sources.epitome.enabled=false", "cards.sources.chatcounselor.enabled=false",
                           "progress=false", f"hydra.run.dir={tmp_path}"])  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads((tmp_path / "cards.json").read_text()) == []  # the random model writes no readable card
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["total"] == {"records": 4, "unparseable: extract": 4}
    extract = report["usage"]["extract"]  # token counts are read back from the step file
    assert extract["requests"] == 4  # fresh or replayed by the request cache, the tokens are counted
    assert extract["prompt_tokens"] + extract["cached_prompt_tokens"] > 0
    assert extract["completion_tokens"] + extract["cached_completion_tokens"] > 0
    assert "| total | 4 | 0 | 4 |" in run.stdout
