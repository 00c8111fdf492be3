"""The role card: who the simulated help-seeker is and what troubles them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, Literal

from esc.cards.taxonomy import load_taxonomy

Language = Literal["en", "zh"]
Quality = Literal["high", "middle", "invalid"]

LANGUAGES: tuple[str, ...] = ("en", "zh")
QUALITIES: tuple[str, ...] = ("high", "middle", "invalid")

# Field labels of the card text, in card order, per language (the released files' line format).
FIELDS: tuple[str, ...] = ("age", "gender", "occupation", "problem")
FIELD_LABELS: dict[str, dict[str, str]] = {
    "en": {"age": "Age", "gender": "Gender", "occupation": "Occupation", "problem": "Problem"},
    "zh": {"age": "年龄", "gender": "性别", "occupation": "职业", "problem": "问题"},
}
_SEPARATOR = {"en": ": ", "zh": "："}


def card_text(fields: Mapping[str, Any], language: str) -> str:
    """A card's text as the role-player sees it: the released files' line format, in `language`."""
    labels, sep = FIELD_LABELS[language], _SEPARATOR[language]
    return "\n".join(f"{labels[f]}{sep}{fields[f]}" for f in FIELDS)


# Raw `source` values in the released files -> normalised dataset names (paper Table 5).
SOURCE_NAMES: dict[str, str] = {
    "ESconv": "ESConv",
    "ExTES": "ExTES",
    "MHP": "MHP",
    "Psych": "Psych8K",
    "EPITOME": "EPITOME",
    "PsyQA": "PsyQA",
    "smile": "Smile",
    # not in the paper: ChatCounselor's counselling questions, a stand-in for Psych8K (esc.cards.construct)
    "ChatCounselor": "ChatCounselor",
}
SOURCES: tuple[str, ...] = tuple(dict.fromkeys(SOURCE_NAMES.values()))
_SOURCE_LOOKUP = {name.casefold(): canon for raw, canon in SOURCE_NAMES.items() for name in (raw, canon)}


def normalize_source(name: str) -> str:
    """Normalised dataset name for a raw or normalised source name (case-insensitive)."""
    canon = _SOURCE_LOOKUP.get(str(name).strip().casefold())
    if canon is None:
        raise ValueError(f"unknown source {name!r}; expected one of {', '.join(SOURCES)}")
    return canon


@dataclass(frozen=True)
class RoleCard:
    """One ESC-Eval role card; `topic` is a tier-1 and `category` a tier-3 taxonomy key."""

    id: int
    language: Language
    age: str
    gender: str
    occupation: str
    problem: str
    source: str
    topic: str
    category: str | None = None
    quality: Quality | None = None

    def __post_init__(self) -> None:
        validate(self)

    def to_text(self) -> str:
        """The card as the role-player sees it, in the released files' line format and its own language."""
        return card_text({f: getattr(self, f) for f in FIELDS}, self.language)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; `RoleCard.from_dict` reads it back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoleCard:
        """Build a card from `to_dict()` output; ValueError on missing or unknown keys."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        required = [f.name for f in fields(cls) if f.default is MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise ValueError(f"missing field(s): {', '.join(missing)}")
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown field(s): {', '.join(unknown)}")
        return cls(**data)


def validate(card: RoleCard) -> None:
    """Check one card; raises ValueError with a one-line message naming the bad field."""
    if not isinstance(card.id, int) or isinstance(card.id, bool):
        raise ValueError(f"id must be an integer, got {card.id!r}")
    if card.language not in LANGUAGES:
        raise ValueError(f"unknown language {card.language!r}; expected one of {', '.join(LANGUAGES)}")
    for field in FIELDS:
        value = getattr(card, field)
        if not isinstance(value, str):
            raise ValueError(f"{field} must be a string, got {type(value).__name__}")
        if value != value.strip():
            raise ValueError(f"{field} has leading or trailing whitespace: {value[:40]!r}")
        if field != "problem" and "\n" in value:
            raise ValueError(f"{field} must be a single line, got {value[:40]!r}")
    if not card.problem:
        raise ValueError("problem is empty")
    if card.source not in SOURCES:
        raise ValueError(f"unknown source {card.source!r}; expected one of {', '.join(SOURCES)}")
    taxonomy = load_taxonomy()
    if card.topic not in taxonomy.tier1_keys():
        raise ValueError(f"unknown topic {card.topic!r}; expected one of {', '.join(taxonomy.tier1_keys())}")
    if card.category is not None:
        if card.category not in taxonomy.tier3_keys():
            raise ValueError(f"unknown category {card.category!r}; expected a tier-3 taxonomy key")
        if taxonomy.tier1_of(card.category) != card.topic:
            raise ValueError(
                f"category {card.category!r} belongs to topic {taxonomy.tier1_of(card.category)!r}, "
                f"not {card.topic!r}"
            )
    if card.quality is not None and card.quality not in QUALITIES:
        raise ValueError(f"unknown quality {card.quality!r}; expected one of {', '.join(QUALITIES)}")
