"""Role cards: parsing all 655 released cards, counts, round trips, taxonomy and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from esc.cards import RoleCard, load_cards, load_taxonomy, parse_card_text, save_cards
from esc.cards import taxonomy as taxonomy_module
from esc.cards.stats import card_stats, format_stats
from esc.errors import DataError, UserError
from esc.paths import REPO_ROOT, data_dir

CARD_DIR = data_dir() / "esc_eval"
needs_data = pytest.mark.skipif(
    not (CARD_DIR / "card_high_en.json").exists() or not (CARD_DIR / "card_high_zh.json").exists(),
    reason=f"released role cards not found under {CARD_DIR}; run `make data`",
)


@pytest.fixture(scope="module")
def cards() -> list[RoleCard]:
    return load_cards()


def _raw(lang: str) -> list[dict]:
    return json.loads((CARD_DIR / f"card_high_{lang}.json").read_text(encoding="utf-8"))


def _record(**overrides: object) -> dict:
    record = {
        "base": "Age: 30\nGender: Female\nOccupation: Teacher\nProblem: Argues with her husband about money.",
        "res": "家庭生活",
        "source": "ESconv",
        "base_biaozhu": "",
        "language": "english",
        "id": 32999,
    }
    record.update(overrides)
    return record


def _write(path: Path, records: object) -> Path:
    path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return path


def _assert_one_line(err: UserError, *parts: str) -> None:
    message = str(err)
    assert "\n" not in message
    for part in parts:
        assert part in message, (part, message)


# --- the released files ---------------------------------------------------------------------


@needs_data
def test_all_released_cards_parse(cards: list[RoleCard]) -> None:
    raw = _raw("en") + _raw("zh")
    assert len(raw) == len(cards) == 655
    for record in raw:
        fields = parse_card_text(record["base"], record["language"])
        assert fields["problem"]
    assert {c.quality for c in cards} == {"high"}
    assert {c.category for c in cards} == {None}
    assert len({c.id for c in cards}) == 655


@needs_data
def test_counts_by_language_source_topic(cards: list[RoleCard]) -> None:
    assert Counter(c.language for c in cards) == {"en": 331, "zh": 324}
    by_source = Counter((c.language, c.source) for c in cards)
    assert by_source == {
        ("en", "ESConv"): 158,
        ("en", "MHP"): 73,
        ("en", "ExTES"): 70,
        ("en", "Psych8K"): 25,
        ("en", "EPITOME"): 5,
        ("zh", "PsyQA"): 252,
        ("zh", "Smile"): 72,
    }
    by_topic = Counter((c.language, c.topic) for c in cards)
    assert [by_topic["en", t] for t in ("family_life", "work_study", "social_other")] == [172, 87, 72]
    assert [by_topic["zh", t] for t in ("family_life", "work_study", "social_other")] == [215, 72, 37]


@needs_data
def test_language_source_limit_filters() -> None:
    assert len(load_cards(language="english")) == 331
    assert len(load_cards(language="zh")) == 324
    assert {c.source for c in load_cards(sources=["smile", "Psych"])} == {"Smile", "Psych8K"}
    assert len(load_cards(language="en", sources=["ESConv"], limit=10)) == 10
    with pytest.raises(UserError, match="unknown language"):
        load_cards(language="fr")
    with pytest.raises(UserError, match="unknown source"):
        load_cards(sources=["Reddit"])


@needs_data
def test_to_text_matches_source_and_round_trips(cards: list[RoleCard]) -> None:
    raw = {r["id"]: r["base"] for r in _raw("en") + _raw("zh")}
    for card in cards:
        text = card.to_text()
        # The source text, minus the blank lines that 5 English cards put between fields.
        assert text == "\n".join(line for line in raw[card.id].split("\n") if line.strip())
        fields = parse_card_text(text, card.language)
        assert fields == {k: getattr(card, k) for k in ("age", "gender", "occupation", "problem")}


@needs_data
def test_save_load_round_trip(cards: list[RoleCard], tmp_path: Path) -> None:
    path = save_cards(cards, tmp_path / "out" / "cards.json")
    assert load_cards([path]) == cards
    assert RoleCard.from_dict(cards[0].to_dict()) == cards[0]
    assert load_cards([path], language="zh", limit=3) == [c for c in cards if c.language == "zh"][:3]


@needs_data
def test_stats_dict_and_table(cards: list[RoleCard]) -> None:
    stats = card_stats(cards)
    assert stats["total"] == 655
    assert stats["by_language"] == {"en": 331, "zh": 324}
    assert stats["by_topic"]["zh"] == {"family_life": 215, "work_study": 72, "social_other": 37}
    table = format_stats(stats)
    assert "331" in table and "324" in table and "Psych8K" in table


# --- parsing variants -----------------------------------------------------------------------


def test_parse_variants() -> None:
    expected = {"age": "26", "gender": "male", "occupation": "not mentioned", "problem": "Chest pain."}
    assert parse_card_text(
        "Age: 26\n\nGender: male\n\nOccupation: not mentioned\n\nProblem: Chest pain.", "en"
    ) == (expected)
    assert parse_card_text(
        " Age:26\r\n Gender : male\nOccupation：not mentioned\nProblems: Chest pain.", "en"
    ) == (expected)
    one_line = (
        "Age: Teenager      Gender: Not Mentioned      Occupation: college student\nProblems: Fired by boss."
    )
    assert parse_card_text(one_line, "english") == {
        "age": "Teenager",
        "gender": "Not Mentioned",
        "occupation": "college student",
        "problem": "Fired by boss.",
    }
    zh = parse_card_text("年龄:青年\n性别： 女\n职业：学生\n问题：和父母的问题：沟通困难", "chinese")
    assert zh == {"age": "青年", "gender": "女", "occupation": "学生", "problem": "和父母的问题：沟通困难"}
    # Labels inside the problem text are not fields.
    tricky = parse_card_text(
        "Age: 40\nGender: F\nOccupation: nurse\nProblem: At my age: tired. Gender: n/a", "en"
    )
    assert tricky["problem"] == "At my age: tired. Gender: n/a"
    assert parse_card_text("Age: 1\nGender: M\nOccupation: x\nProblem: a\nb", "en")["problem"] == "a\nb"


def test_parse_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="Problem"):
        parse_card_text("Age: 30\nGender: male\nOccupation: none", "en")
    with pytest.raises(ValueError, match="职业"):
        parse_card_text("年龄：30\n性别：男\n问题：失眠", "zh")
    with pytest.raises(ValueError, match="empty"):
        parse_card_text("Age: 30\nGender: male\nOccupation: none\nProblem:   ", "en")
    with pytest.raises(ValueError, match="unknown language"):
        parse_card_text("Age: 30", "fr")


def test_role_card_validation() -> None:
    good = dict(id=1, language="en", age="30", gender="F", occupation="x", problem="p", source="ESConv")
    card = RoleCard(**good, topic="work_study", category="salary_bonus", quality="middle")
    assert card.to_text() == "Age: 30\nGender: F\nOccupation: x\nProblem: p"
    assert RoleCard.from_dict(card.to_dict()) == card
    zh = RoleCard(**{**good, "language": "zh"}, topic="family_life")
    assert zh.to_text() == "年龄：30\n性别：F\n职业：x\n问题：p"
    bad = [
        ({**good, "language": "fr"}, "family_life", None, "language"),
        ({**good, "problem": ""}, "family_life", None, "problem"),
        ({**good, "source": "Reddit"}, "family_life", None, "source"),
        (good, "love", None, "topic"),
        (good, "family_life", "nope", "category"),
        (good, "family_life", "salary_bonus", "belongs to topic"),
    ]
    for fields, topic, category, match in bad:
        with pytest.raises(ValueError, match=match):
            RoleCard(**fields, topic=topic, category=category)
    with pytest.raises(ValueError, match="missing field"):
        RoleCard.from_dict({"id": 1})


# --- taxonomy -------------------------------------------------------------------------------


def test_taxonomy_structure() -> None:
    tax = load_taxonomy()
    assert tax is load_taxonomy()
    assert tax.tier1_keys() == ("family_life", "work_study", "social_other")
    assert len(tax.tier2_keys()) == 9
    leaves = list(tax.leaves())
    # The documented leaf count (module docstring, load_taxonomy docstring, LEAF_COUNT).
    assert len(leaves) == len(tax.tier3_keys()) == taxonomy_module.LEAF_COUNT == 35
    assert "35 tier-3" in (taxonomy_module.__doc__ or "") and "35 tier-3" in (load_taxonomy.__doc__ or "")
    keys = [*tax.tier1_keys(), *tax.tier2_keys(), *tax.tier3_keys()]
    assert len(keys) == len(set(keys))
    for leaf in leaves:
        assert tax.tier1_of(leaf.key) in tax.tier1_keys()
        assert tax.tier1_of(tax.tier2_of(leaf.key)) == tax.tier1_of(leaf.key)
    # Table 9 counts: 655 high (the released cards) + 2146 middle = the paper's 2801 cards.
    assert sum(leaf.high or 0 for leaf in leaves) == 655
    assert sum(leaf.middle or 0 for leaf in leaves) == 2146
    assert tax.tier2_of("mental_health") == "mental_physical_health"


def test_topic_from_label() -> None:
    tax = load_taxonomy()
    assert tax.topic_from_label("家庭生活") == "family_life"
    assert tax.topic_from_label("工作学习") == "work_study"
    assert tax.topic_from_label("社会与其他") == "social_other"
    assert tax.topic_from_label("work_study") == "work_study"
    assert tax.topic_from_label("  social interaction and OTHERS ") == "social_other"
    assert tax.topic_from_label("work, study, career issues") == "work_study"
    with pytest.raises(ValueError, match="unknown topic label"):
        tax.topic_from_label("婚姻")
    with pytest.raises(ValueError):
        tax.tier1_of("nope")


# --- bad input: one line naming the file and the record -----------------------------------------


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken_cards.json"
    path.write_text('[\n  {"id": 1,\n  oops\n]', encoding="utf-8")
    with pytest.raises(UserError) as info:
        load_cards([path])
    assert isinstance(info.value, DataError)
    _assert_one_line(info.value, "broken_cards.json", "line 3")


def test_missing_problem_names_file_and_record(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "cards_a.json", [_record(), _record(id=32777, base="Age: 30\nGender: male\nOccupation: x")]
    )
    with pytest.raises(UserError) as info:
        load_cards([path])
    _assert_one_line(info.value, "cards_a.json", "record 1", "32777", "Problem")


def test_unknown_language_names_file_and_record(tmp_path: Path) -> None:
    path = _write(tmp_path / "cards_b.json", [_record(id=32888, language="french")])
    with pytest.raises(UserError) as info:
        load_cards([path])
    _assert_one_line(info.value, "cards_b.json", "record 0", "32888", "french")


def test_other_bad_records(tmp_path: Path) -> None:
    cases = {
        "topic.json": ([_record(res="爱情")], "爱情"),
        "source.json": ([_record(source="Reddit")], "Reddit"),
        "keys.json": ([_record(), {"id": 5, "text": "x"}], "unrecognised record"),
        "notdict.json": ([_record(), "hello"], "record 1"),
        "dup.json": ([_record(), _record()], "duplicate card id"),
        "object.json": ({"cards": []}, "expected a JSON list"),
    }
    for name, (records, part) in cases.items():
        with pytest.raises(UserError) as info:
            load_cards([_write(tmp_path / name, records)])
        _assert_one_line(info.value, name, part)


def test_missing_file_says_make_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserError) as info:
        load_cards([tmp_path / "no_such_cards.json"])  # a path given by the user
    _assert_one_line(info.value, "no_such_cards.json", "check the path")
    monkeypatch.setenv("ESC_DATA_DIR", str(tmp_path))
    with pytest.raises(UserError) as info:
        load_cards(language="en")  # the released cards, not fetched yet
    _assert_one_line(info.value, "card_high_en.json", "make data")


def test_loads_small_released_format_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "mine.json",
        [
            _record(),
            _record(
                id=10001,
                language="chinese",
                source="PsyQA",
                res="工作学习",
                base="年龄：20\n性别：女\n职业：学生\n问题：考试焦虑",
            ),
        ],
    )
    cards = load_cards([path])
    assert [(c.id, c.language, c.source, c.topic, c.quality) for c in cards] == [
        (32999, "en", "ESConv", "family_life", None),
        (10001, "zh", "PsyQA", "work_study", None),
    ]


# --- command line ---------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "esc", "cards", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=120,
    )


@needs_data
def test_cli_stats_and_show() -> None:
    result = _cli("stats")
    assert result.returncode == 0, result.stderr
    assert "331" in result.stdout and "324" in result.stdout and "655" in result.stdout
    as_json = json.loads(_cli("stats", "--language", "zh", "--json").stdout)
    assert as_json["by_language"] == {"zh": 324}
    shown = _cli("show", "10000")
    assert shown.returncode == 0 and shown.stdout.startswith("年龄：")


def test_cli_bad_path_exits_2_with_one_line(tmp_path: Path) -> None:
    result = _cli("stats", "--cards", str(tmp_path / "missing.json"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "missing.json" in result.stderr
