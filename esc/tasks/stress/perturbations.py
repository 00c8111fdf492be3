"""The stress test's perturbations: controlled changes to a dialogue whose effect on each dimension is
known, so a judge's scores can be checked for moving the right way (metamorphic testing).

A `Perturbation` is a registered unit: its name, whether it degrades the supporter's replies or should
leave the scores alone (`kind`), what it changes in words, the expected direction per dimension (-1:
should lower it; 0: should not move it), the languages it has texts for, and `apply`, a function of
(dialogue, random generator, texts) that returns the changed dialogue, or None where there is nothing to
change (a dialogue with no empathic sentence has none to strip). It changes only the supporter's (the
target's) replies, never the seeker's turns or the opener (rename alone changes every name wherever it
stands, so the people stay consistent), and is deterministic given the seed (`variant`). The inserted
and looked-for texts are versioned and checksummed in `perturbations.yaml` (the question-file rule,
`esc/prompts/checksums.json`).

A new perturbation is one `@perturbation(...)` function here (or in a module that registers it).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import random
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from esc.dialogues.record import Dialogue, Turn
from esc.prompts.registry import checked_question_texts
from esc.registry import Registry
from esc.scoring.rubrics import TABLE_2_ORDER
from esc.scoring.safety_checklist import question_keys

TEXTS_FILE = Path(__file__).with_name("perturbations.yaml")
DEGRADATION, NEUTRAL = "degradation", "neutral"
# expected directions: should lower the dimension / should not move it / should raise it (a flag)
LOWER, STILL, RAISE = -1, 0, 1

Apply = Callable[[Dialogue, random.Random, Mapping[str, Any]], Dialogue | None]


@dataclasses.dataclass(frozen=True)
class Perturbation:
    name: str
    kind: Literal["degradation", "neutral"]
    changes: str  # what it changes, in words (the report card's perturbation table)
    expected: Mapping[str, int]  # dimension key -> LOWER or STILL; a dimension not named: no expectation
    needs: tuple[str, ...]  # the entries of perturbations.yaml it reads (its languages: those all have)
    apply: Apply
    # safety checklist question -> RAISE or STILL (`stress.checklist`): a degradation expects the
    # questions it `flags` to flag more dialogues; a neutral change expects every question unchanged
    flags: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages every text it needs has (a perturbation without texts: both)."""
        have = [set(texts()[key]) for key in self.needs]
        return tuple(sorted(set.intersection(*have))) if have else ("en", "zh")


# one name, one function: a second function under a taken name is refused
PERTURBATIONS: Registry[Perturbation] = Registry(
    "perturbation", origin=lambda p: f"{p.apply.__module__}.{p.apply.__qualname__}"
)


def perturbation(
    name: str, kind: str, changes: str, lowers: Sequence[str] = (), needs: Sequence[str] = (),
    flags: Sequence[str] = (),
) -> Callable[[Apply], Apply]:  # fmt: skip
    """Register `apply` as the perturbation `name`. A degradation expects the dimensions it `lowers`
    to go down and the checklist questions it `flags` to flag more (and says nothing of the others);
    a neutral change expects every dimension and every question to stay."""
    neutral = kind != DEGRADATION
    expected = {d: STILL for d in TABLE_2_ORDER} if neutral else {d: LOWER for d in lowers}
    flagged = {q: STILL for q in question_keys()} if neutral else {q: RAISE for q in flags}

    def register(apply: Apply) -> Apply:
        made = Perturbation(name, kind, changes, expected, tuple(needs), apply, flagged)  # type: ignore[arg-type]
        PERTURBATIONS.add(name, made)
        return apply

    return register


@functools.cache
def texts() -> dict[str, Any]:
    """perturbations.yaml, its texts checked against their version's checksum."""
    data = yaml.safe_load(TEXTS_FILE.read_text(encoding="utf-8"))
    return {**data, "sha256": checked_question_texts("stress", data, TEXTS_FILE)}


def identity(p: Perturbation, seed: int) -> dict[str, Any]:
    """What a variant records of the perturbation that made it (its `meta.perturbation`)."""
    t = texts()
    return {"name": p.name, "version": t["version"], "texts_sha256": t["sha256"], "seed": seed}


def variant(p: Perturbation, dialogue: Dialogue, dialogue_id: str, seed: int) -> Dialogue | None:
    """`dialogue` changed by `p`, with `meta.derived_from` (the original's id) and `meta.perturbation`;
    None where `p` finds nothing to change. One generator per (seed, perturbation, dialogue), seeded
    by a string (stable across processes and Python's hash seed), so a rerun makes the same variant."""
    rng = random.Random(f"{seed}:{p.name}:{dialogue_id}")
    lang_texts = {key: texts()[key][dialogue.language] for key in p.needs}
    changed = p.apply(copy.deepcopy(dialogue), rng, lang_texts)
    if changed is None or _texts(changed) == _texts(dialogue):
        return None
    changed.meta = {**dialogue.meta, "derived_from": dialogue_id, "perturbation": identity(p, seed)}
    return changed


# --- helpers ------------------------------------------------------------------------------------


def _texts(d: Dialogue) -> list[str]:
    return [d.opener, *(t.text for t in d.turns)]


_SENTENCE = re.compile(r"[^.!?。！？]+(?:[.!?。！？]+|$)\s*")


def sentences(text: str) -> list[str]:
    """The sentences of a reply, each with its end mark and trailing space ("" kept out)."""
    return [s for s in _SENTENCE.findall(text) if s.strip()]


def replies(dialogue: Dialogue) -> list[Turn]:
    """The supporter's (target's) replies: what every perturbation changes."""
    return [t for t in dialogue.turns if t.speaker == "target"]


def _joiner(language: str) -> str:
    return "" if language == "zh" else " "


def _containing(text: str, markers: Sequence[str], language: str) -> bool:
    lowered = text.lower()
    if language == "zh":
        return any(m in text for m in markers)
    return any(re.search(rf"(?<![a-z]){re.escape(m.lower())}(?![a-z])", lowered) for m in markers)


def _strip_sentences(dialogue: Dialogue, markers: Sequence[str], filler: Sequence[str]) -> Dialogue | None:
    """Remove from every reply the sentences containing a marker; a reply left empty gets a neutral
    sentence instead (a reply is never empty). None where no sentence had a marker."""
    removed = False
    for turn in replies(dialogue):
        kept = [s for s in sentences(turn.text) if not _containing(s, markers, dialogue.language)]
        if len(kept) != len(sentences(turn.text)):
            removed = True
            turn.text = "".join(kept).strip() or filler[0]
    return dialogue if removed else None


# --- degradations -------------------------------------------------------------------------------


@perturbation(
    "dismissive", DEGRADATION, "a dismissive sentence opens one reply", ("empathy", "skill", "overall"),
    ("dismissive",), flags=("dismissive",),
)  # fmt: skip
def _dismissive(d: Dialogue, rng: random.Random, t: Mapping[str, Any]) -> Dialogue | None:
    turns = replies(d)
    if not turns:
        return None
    turn = rng.choice(turns)
    turn.text = rng.choice(t["dismissive"]) + _joiner(d.language) + turn.text
    return d


@perturbation(
    "unsafe_advice", DEGRADATION, "unsafe advice closes one reply", ("skill", "overall"), ("unsafe_advice",),
    flags=("harmful_content",),
)  # fmt: skip
def _unsafe(d: Dialogue, rng: random.Random, t: Mapping[str, Any]) -> Dialogue | None:
    turns = replies(d)
    if not turns:
        return None
    turn = rng.choice(turns)
    turn.text = turn.text.rstrip() + _joiner(d.language) + rng.choice(t["unsafe_advice"])
    return d


@perturbation(
    "no_empathy", DEGRADATION, "the replies' empathic sentences removed", ("empathy",),
    ("empathy_markers", "neutral"),
)  # fmt: skip
def _no_empathy(d: Dialogue, rng: random.Random, t: Mapping[str, Any]) -> Dialogue | None:
    return _strip_sentences(d, t["empathy_markers"], t["neutral"])


@perturbation(
    "no_suggestions", DEGRADATION, "the replies' suggestions removed", ("suggestion",),
    ("suggestion_markers", "neutral"),
)  # fmt: skip
def _no_suggestions(d: Dialogue, rng: random.Random, t: Mapping[str, Any]) -> Dialogue | None:
    return _strip_sentences(d, t["suggestion_markers"], t["neutral"])


@perturbation(
    "ai_disclosure", DEGRADATION, '"As an AI language model" opens every reply', ("humanoid",),
    ("ai_disclosure",),
)  # fmt: skip
def _ai_disclosure(d: Dialogue, rng: random.Random, t: Mapping[str, Any]) -> Dialogue | None:
    for turn in replies(d):
        turn.text = t["ai_disclosure"] + turn.text
    return d if replies(d) else None


@perturbation("word_shuffle", DEGRADATION, "the words of one reply shuffled", ("fluency",))
def _word_shuffle(d: Dialogue, rng: random.Random, t: Mapping[str, Any]) -> Dialogue | None:
    # English: words; Chinese (no spaces): characters
    split = (lambda s: list(s)) if d.language == "zh" else (lambda s: s.split())
    turns = [turn for turn in replies(d) if len(set(split(turn.text))) >= 3]
    if not turns:
        return None
    turn = rng.choice(turns)
    words = split(turn.text)
    shuffled = words[:]
    rng.shuffle(shuffled)
    if shuffled == words:  # a shuffle that kept the order: rotate instead, so the order changes
        shuffled = words[1:] + words[:1]
    turn.text = _joiner(d.language).join(shuffled)
    return d


# --- neutral changes ----------------------------------------------------------------------------


@perturbation("neutral_padding", NEUTRAL, "a neutral sentence opens every reply (longer)", needs=("neutral",))
def _padding(d: Dialogue, rng: random.Random, t: Mapping[str, Any]) -> Dialogue | None:
    # before the reply, a sentence of its own: the reply is kept whole, and one cut at max_new_tokens
    # ("...who can share their") keeps its cut end (appended, the padding was glued onto the cut
    # sentence, "...share their I am reading what you wrote.", breaking fluency too: texts version 1)
    for turn in replies(d):
        turn.text = rng.choice(t["neutral"]) + _joiner(d.language) + turn.text
    return d if replies(d) else None


@perturbation("rename", NEUTRAL, "the people's names swapped for others", needs=("names",))
def _rename(d: Dialogue, rng: random.Random, t: Mapping[str, Any]) -> Dialogue | None:
    names = list(t["names"])
    every = [d.opener, *(turn.text for turn in d.turns)]
    found = [n for n in names if any(_has_name(text, n, d.language) for text in every)]
    if not found:
        return None
    free = [n for n in names if n not in found]
    rng.shuffle(free)
    mapping = dict(zip(found, free, strict=False))

    def renamed(text: str) -> str:
        # in one pass, so a name given to one person is not renamed again as another's
        pattern = "|".join(map(re.escape, sorted(mapping, key=len, reverse=True)))
        if d.language != "zh":
            pattern = rf"\b(?:{pattern})\b"
        return re.sub(pattern, lambda m: mapping[m.group(0)], text)

    d.opener = renamed(d.opener)
    for turn in d.turns:
        turn.text = renamed(turn.text)
    return d


def _has_name(text: str, name: str, language: str) -> bool:
    return name in text if language == "zh" else re.search(rf"\b{re.escape(name)}\b", text) is not None


@perturbation("sentence_swap", NEUTRAL, "two adjacent sentences of one reply swapped")
def _sentence_swap(d: Dialogue, rng: random.Random, t: Mapping[str, Any]) -> Dialogue | None:
    turns = [turn for turn in replies(d) if len(sentences(turn.text)) >= 2]
    if not turns:
        return None
    turn = rng.choice(turns)
    parts = [s.strip() for s in sentences(turn.text)]
    i = rng.randrange(len(parts) - 1)
    parts[i], parts[i + 1] = parts[i + 1], parts[i]
    turn.text = _joiner(d.language).join(parts)
    return d


def selected(names: Any) -> list[Perturbation]:
    """The perturbations `stress.perturbations` names ("all": every registered one, in order)."""
    if names in (None, "all"):
        return list(PERTURBATIONS.values())
    return [PERTURBATIONS[n] for n in ([names] if isinstance(names, str) else names)]
