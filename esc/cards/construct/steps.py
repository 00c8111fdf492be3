"""The four LLM steps of card construction: each renders a prompt (`prompts.yaml`) and reads the
reply strictly. A reply that does not parse is never guessed at: the caller keeps it, with the
reason, and reports it.

1. **extract** (Figures 6, 7): a record -> a card: ``Age / Gender / Occupation / Problem`` (``年龄 /
   性别 / 职业 / 问题``), in that order, each once; age one of teenage, young, middle-aged, old, not
   mentioned, or a number of years; gender male, female or not mentioned; occupation and problem
   not empty.
2. **filter** (Figure 8): the card's problem type (tier-1 topic) or "discard" (only emotions, no
   event).
3. **classify** (Table 9): one of the tertiary categories under that topic, by its number.
4. **grade** (Table 8): high, middle or invalid.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from pathlib import Path
from typing import Any

import yaml

from esc.cards.construct.sources import SEEKER, RawRecord
from esc.cards.grading import grading
from esc.cards.schema import FIELD_LABELS, FIELDS
from esc.cards.taxonomy import load_taxonomy
from esc.chat.answers import parse_choice

PROMPTS_FILE = Path(__file__).with_name("prompts.yaml")
AGES = {
    "en": {"teenage": "teenage", "teenager": "teenage", "young": "young", "middle-aged": "middle-aged",
           "middle aged": "middle-aged", "old": "old", "elderly": "old", "not mentioned": "not mentioned"},
    "zh": {"少年": "少年", "青少年": "少年", "青年": "青年", "中年": "中年", "老年": "老年",
           "未提及": "未提及"},
}  # fmt: skip
GENDERS = {
    "en": {"male": "male", "female": "female", "not mentioned": "not mentioned"},
    "zh": {"男": "男", "男性": "男", "女": "女", "女性": "女", "未提及": "未提及"},
}
GRADES = ("high", "middle", "invalid")
DISCARD = "discard"


class Unparseable(ValueError):
    """A reply that does not say what the step asked for; the message says why."""


@functools.cache
def prompts() -> dict[str, Any]:
    return yaml.safe_load(PROMPTS_FILE.read_text(encoding="utf-8"))


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": prompts()["system"]}, {"role": "user", "content": text}]


# --- 1. extract ------------------------------------------------------------------------------------


def extract_prompt(record: RawRecord) -> list[dict[str, str]]:
    p = prompts()
    if record.kind == "qa":
        return _chat(p["extract_qa"][record.language].format(text=record.text))
    names = {
        "en": {SEEKER: "seeker", "supporter": "supporter"},
        "zh": {SEEKER: "求助者", "supporter": "支持者"},
    }
    sep = ": " if record.language == "en" else "："
    dialogue = "\n".join(f"{names[record.language][s]}{sep}{t}" for s, t in record.dialogue)
    situation = record.text or ("(none)" if record.language == "en" else "（无）")
    return _chat(p["extract_md"][record.language].format(situation=situation, dialogue=dialogue))


def _label_pattern(language: str) -> re.Pattern[str]:
    labels = FIELD_LABELS[language]
    alternatives = {
        f: re.escape(labels[f]) + ("s?" if f == "problem" and language == "en" else "") for f in FIELDS
    }
    return re.compile(
        r"(?P<label>" + "|".join(f"(?P<{f}>{a})" for f, a in alternatives.items()) + r")\s*[:：]",
        re.IGNORECASE,
    )


def _clean(value: str) -> str:
    value = re.sub(r"[*`]+", "", value).strip()
    return value.strip(" .。;；,，'\"“”").strip()


def parse_card(reply: str, language: str) -> dict[str, str]:
    """The four fields of a reply (see the module docstring); Unparseable with the reason."""
    text = unicodedata.normalize("NFKC", reply or "") if language == "en" else (reply or "")
    found = list(_label_pattern(language).finditer(text))
    order = [next(f for f in FIELDS if m.group(f)) for m in found]
    if order != list(FIELDS):
        raise Unparseable(
            f"expected the fields {'/'.join(FIELD_LABELS[language][f] for f in FIELDS)} once each, in "
            f"order; found {order or 'none'}"
        )
    values = {}
    for k, (field, match) in enumerate(zip(FIELDS, found, strict=True)):
        end = found[k + 1].start() if k + 1 < len(found) else len(text)
        values[field] = (
            " ".join(_clean(text[match.end() : end]).split())
            if field != "problem"
            else _clean(text[match.end() : end])
        )
    age = values["age"].casefold()
    if age in AGES[language]:
        values["age"] = AGES[language][age]
    elif not re.fullmatch(r"\d{1,3}(\s*(岁|years?( old)?))?", age):
        raise Unparseable(
            f"age {values['age']!r} is not one of {sorted(set(AGES[language].values()))} or a number"
        )
    gender = values["gender"].casefold()
    if gender not in GENDERS[language]:
        raise Unparseable(
            f"gender {values['gender']!r} is not one of {sorted(set(GENDERS[language].values()))}"
        )
    values["gender"] = GENDERS[language][gender]
    for field in ("occupation", "problem"):
        if not values[field]:
            raise Unparseable(f"{field} is empty")
    values["problem"] = " ".join(values["problem"].split())
    return values


# --- 2. filter -------------------------------------------------------------------------------------


def filter_prompt(card: str, language: str) -> list[dict[str, str]]:
    return _chat(prompts()["filter"][language].format(card=card))


def _fold(text: str) -> str:
    return " ".join(
        re.sub(r"[^\w\s\u4e00-\u9fff]", " ", unicodedata.normalize("NFKC", text).casefold()).split()
    )


def parse_filter(reply: str) -> str:
    """The tier-1 topic the filter names, or DISCARD; Unparseable when it names neither or both."""
    p, folded = prompts(), _fold(reply or "")
    discard = any(_fold(w) in folded for w in p["filter_discard"])
    topics = [t for t, names in p["filter_answers"].items() if any(_fold(n) in folded for n in names)]
    if discard and not topics:
        return DISCARD
    if len(topics) == 1 and not discard:
        return topics[0]
    raise Unparseable(f"expected one of the three problem types or the discard sentence, got {reply[:80]!r}")


# --- 3. classify -----------------------------------------------------------------------------------


def categories_under(topic: str) -> list[str]:
    taxonomy = load_taxonomy()
    return [k for k in taxonomy.tier3_keys() if taxonomy.tier1_of(k) == topic]


def classify_prompt(card: str, language: str, topic: str) -> list[dict[str, str]]:
    taxonomy = load_taxonomy()
    name = (lambda node: node.zh or node.en) if language == "zh" else (lambda node: node.en)
    listing = "\n".join(
        f"{n}. {name(taxonomy.node(k))}" for n, k in enumerate(categories_under(topic), start=1)
    )
    return _chat(prompts()["classify"][language].format(card=card, categories=listing))


def parse_category(reply: str, topic: str) -> str:
    keys = categories_under(topic)
    first = next((line.strip() for line in (reply or "").splitlines() if line.strip()), "")
    match = re.fullmatch(r"[\s*`(（\[]*(\d{1,2})[\s.)）\]:：*`]*(.*)", unicodedata.normalize("NFKC", first))
    if not match or not 1 <= int(match.group(1)) <= len(keys):
        raise Unparseable(f"expected a category number 1-{len(keys)}, got {first[:60]!r}")
    return keys[int(match.group(1)) - 1]


# --- 4. grade --------------------------------------------------------------------------------------


def grade_prompt(card: str, language: str) -> list[dict[str, str]]:
    rules = {g: " ".join(f"{i + 1}. {r}" for i, r in enumerate(grading()["rules"][g])) for g in GRADES}
    return _chat(prompts()["grade"][language].format(card=card, **rules))


def parse_grade(reply: str) -> str:
    index = parse_choice(reply, GRADES)
    if index is None:
        raise Unparseable(f"expected high, middle or invalid, got {(reply or '')[:60]!r}")
    return GRADES[index]
