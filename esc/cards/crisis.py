"""Crisis cards: the role cards (or any seeker text) that mention suicide or self-harm (issue 22).

The safety checks need dialogues in which a question about self-harm or suicide matters. This module
holds the one rule that says which cards those are; `cards.subset: crisis` (`esc.cards.selection`)
plays only them and `esc cards crisis` lists them.

The rule. A text is a crisis case when at least one pattern of its language matches it. The patterns
are compiled regexes (`PATTERNS`), case-insensitive, looked for anywhere in the text; a card's text is
its `problem` field. They match:

- English: suicide and its forms (suicidal, suicidality, "suicide attempt", "commit suicide");
  self-harm (self-harm / self harm / selfharm, self-injury, self-mutilation); "cut/cutting/hurt/harm/
  kill/hang + myself (yourself, himself, herself, themselves, oneself)"; cutting one's wrists, arms
  or legs ("cut her wrists"); "end/ending/take/took + my (his, her, their, one's) (own) life";
  a wish to die or not to live ("want to die", "wanted to be dead", "wish I were dead", "better off
  dead", "don't want to live / be alive / exist / wake up", "no reason to live"); "overdose on
  purpose"; "jump off a bridge / building / roof".
- Chinese: 自杀, 轻生, 自残, 自伤, 自尽, 寻死, 割腕, 跳楼, 不想活, 想死, 结束(自己的)生命, 了结(自己的)
  生命, 自我了断, 伤害自己 (or 伤害自己的身体).

What deliberately does not match (the false positives the patterns step round):

- English: cutting that is not of oneself ("not cutting it for a year" about hair, "company
  cutbacks", "cut off from family") and "cut myself off / out / some slack"; "suicide bomber /
  attack / squad / mission / doors"; "wish I was taller"; "don't want to live with my parents / in
  this city" (living somewhere or with someone); death, dying and grief without a wish to die ("the
  death of her father", "dying to see", "to die for"); "kill time"; an overdose without "on purpose".
- Chinese: 想死你了 / 想死我了 ("miss you terribly"), 不想死 ("does not want to die"), 想死亡 (thinking
  about death), 跳楼价 / 跳楼甩卖 (rock-bottom prices), 不想活得这么累 ("does not want to live so
  tiredly"), 自伤自怜 / 自伤身世 (self-pity), 自杀式 (suicide-style, e.g. 自杀式袭击), 伤害自己的 +
  anything but 身体 (伤害自己的感情 / 自尊: hurt one's own feelings); death and grief (去世, 死亡)
  without a wish to die.

It is a lexical screen, not a judgement: it over-includes texts that merely mention suicide or
self-harm (a coworker who trivialises suicide, a brother whose girlfriend killed herself, "hurt
myself" in an accident, "killing myself to meet deadlines", 难受得想死的心都有了 as hyperbole) and
misses texts that describe a crisis in other words ("I can't go on", 活着没意思, 极端想法). The list it
selects (`esc cards crisis`) must be reviewed by a person before it is published or used to report
safety results.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from esc.cards.construct.sources import read_source
from esc.cards.schema import RoleCard
from esc.errors import UserError
from esc.paths import data_dir

_SELF = r"(?:my|your|him|her|them|one)sel(?:f|ves)"
_POSSESSIVE = r"(?:my|your|his|her|their|one's)"

#: the crisis patterns of each language; a text matches when any of its language's patterns does
PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "en": tuple(
        re.compile(p, re.IGNORECASE)
        for p in (
            r"\bsuicid(?:e|es|al|ality)\b(?!\s+(?:bomb\w*|attacks?|squads?|missions?|doors?))",
            r"\bself[- ]?(?:harm(?:s|ed|ing|ful)?|injur(?:y|ies|ious|ing)|mutilat\w*)\b",
            rf"\b(?:cut|cuts|cutting|hurt|hurts|hurting|harm|harms|harming|kill|kills|killed|killing|"
            rf"hang|hangs|hanged|hanging)\s+{_SELF}\b(?!\s+(?:off|out|some\s+slack|loose|free|short)\b)",
            rf"\b(?:cut|cuts|cutting|slit|slitting)\s+{_POSSESSIVE}\s+(?:wrists?|arms?|legs?|thighs?)\b",
            rf"\b(?:end|ends|ended|ending|take|takes|took|taking)\s+{_POSSESSIVE}\s+(?:own\s+)?life\b",
            r"\b(?:want|wants|wanted|wanting|wish|wishes|wished|wishing)\s+(?:to\s+)?(?:die|be\s+dead)\b",
            r"\bwish(?:es|ed|ing)?\s+(?:i|he|she|they)\s+(?:(?:was|were|had\s+been)\s+dead|could\s+die|had\s+died|"
            r"had\s+never\s+been\s+born)\b",
            r"\bbetter\s+off\s+dead\b",
            r"\b(?:don['’]t|didn['’]t|doesn['’]t|not|never|no\s+longer)\s+want(?:ing)?\s+to\s+"
            r"(?:live|be\s+alive|exist|wake\s+up)\b(?!\s+(?:with|in|at|near|on|by|under|without|alone|together|"
            r"there|here|like|abroad|early|anywhere|somewhere)\b)",
            r"\bno\s+(?:reason|will)\s+to\s+live\b",
            r"\boverdos(?:e|ed|ing)\s+on\s+purpose\b",
            r"\bjump(?:s|ed|ing)?\s+off\s+(?:a|the)\s+(?:bridge|building|roof|cliff)\b",
        )
    ),
    "zh": tuple(
        re.compile(p)
        for p in (
            r"自杀(?!式)",
            r"轻生",
            r"自残",
            r"自伤(?!自怜|身世)",
            r"自尽",
            r"寻死",
            r"割腕",
            r"跳楼(?!价|大?甩卖)",
            r"不想活(?!得)",
            r"(?<!不)想死(?![亡你您他她它]|我了)",
            r"(?:结束|了结)(?:自己的?|我的)?生命",
            r"自我了断",
            r"伤害自己(?:的身体|(?!的))",
        )
    ),
}


def _patterns(language: str) -> tuple[re.Pattern[str], ...]:
    if language not in PATTERNS:
        raise ValueError(f"unknown language {language!r}; expected one of {', '.join(PATTERNS)}")
    return PATTERNS[language]


def crisis_matches(text: str, language: str) -> list[str]:
    """The phrases of `text` that the crisis rule matches, in text order, each once ([] for none)."""
    found = sorted((m.start(), m.group(0)) for p in _patterns(language) for m in p.finditer(text))
    return list(dict.fromkeys(phrase for _, phrase in found))


def is_crisis(text: str, language: str) -> bool:
    """Whether `text` (in `language`, en or zh) mentions suicide or self-harm (the module's rule)."""
    return any(p.search(text) for p in _patterns(language))


def crisis_cards(cards: Sequence[RoleCard]) -> list[RoleCard]:
    """The cards whose `problem` is a crisis case, in the given order."""
    return [card for card in cards if is_crisis(card.problem, card.language)]


# --- the seeker texts of the source datasets ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SourceCount:
    """How many seeker texts of one source dataset the rule selects; `missing` says why none were read."""

    dataset: str
    language: str
    texts: int = 0
    crisis: int = 0
    phrases: dict[str, int] = dataclasses.field(default_factory=dict)  # matched phrase -> texts, most first
    missing: str | None = None


#: dataset -> (language, the card-construction source that reads it: `RawRecord.seeker_text` is the
#: text the rule reads, the same one `build_cards.py cards.subset=crisis` selects on)
SOURCES: dict[str, tuple[str, str]] = {
    "ESConv": ("en", "esconv"),
    "FailedESConv": ("en", "esconv_failed"),
    "EPITOME": ("en", "epitome"),
    "ChatCounselor": ("en", "chatcounselor"),
    "PsyQA": ("zh", "psyqa"),
    "Smile": ("zh", "smile"),
}


def source_crisis_counts(root: Path | None = None) -> list[SourceCount]:
    """The rule on the seeker texts of each source dataset under `root` (default: the data directory).

    A dataset whose files are absent is counted as missing (with the reason), not an error; a
    malformed file still stops with the DataError that names it.
    """
    root = data_dir() if root is None else Path(root)
    counts = []
    for dataset, (language, source) in SOURCES.items():
        texts = crisis = 0
        phrases: dict[str, int] = {}
        try:
            for text in (record.seeker_text() for record in read_source(source, root)):
                if not text.strip():
                    continue  # no seeker text in this record
                texts += 1
                matched = crisis_matches(text, language)
                crisis += bool(matched)
                for phrase in dict.fromkeys(p.lower() for p in matched):
                    phrases[phrase] = phrases.get(phrase, 0) + 1
        except UserError as err:
            counts.append(SourceCount(dataset, language, missing=str(err)))
            continue
        ranked = dict(sorted(phrases.items(), key=lambda item: (-item[1], item[0])))
        counts.append(SourceCount(dataset, language, texts, crisis, ranked))
    return counts


def format_crisis(cards: Sequence[RoleCard], sources: Sequence[SourceCount] | None = None) -> str:
    """`esc cards crisis`: per language, the crisis cards out of all, each with its id, source and
    matched phrases; then, when given, the counts of the source datasets' seeker texts."""
    lines = [
        "Crisis cards: the problem mentions suicide or self-harm (esc/cards/crisis.py).",
        "A lexical screen that over-includes mere mentions: review the list before publishing it.",
    ]
    for language in dict.fromkeys(card.language for card in cards):
        these = [card for card in cards if card.language == language]
        selected = crisis_cards(these)
        lines += ["", f"{language}: {len(selected)} of {len(these)} cards"]
        for card in selected:
            phrases = ", ".join(crisis_matches(card.problem, card.language))
            lines.append(f"  {card.id}  {card.source:<13}  {phrases}")
    if sources is not None:
        lines += ["", "Seeker texts of the source datasets (situation, post, or first client message):"]
        lines.append(f"  {'dataset':<13}  language  {'texts':>6}  {'crisis':>6}  top phrases")
        for count in sources:
            if count.missing:
                lines.append(f"  {count.dataset:<13}  {count.language:<8}  absent: {count.missing}")
                continue
            top = ", ".join(f"{p} ({n})" for p, n in list(count.phrases.items())[:5])
            lines.append(
                f"  {count.dataset:<13}  {count.language:<8}  {count.texts:>6}  {count.crisis:>6}  {top}"
            )
    return "\n".join(lines)
