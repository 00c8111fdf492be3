"""Which role cards a run plays: languages, explicit ids, a subset, a limit, and the shard of an array job."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.cards.crisis import crisis_cards
from esc.cards.loader import load_cards
from esc.cards.schema import RoleCard
from esc.errors import ConfigError

#: `cards.subset` -> the rule that keeps a language's cards (null: all of them)
SUBSETS: dict[str, Callable[[Sequence[RoleCard]], list[RoleCard]]] = {"crisis": crisis_cards}


def select_cards(cfg: Mapping[str, Any], shard: Mapping[str, Any] | None = None) -> list[RoleCard]:
    """Cards in a fixed order (language, then file order), filtered by `cfg`, then this shard's share.

    `cfg`: languages (en/zh), ids (explicit card ids; an unknown id is an error), subset (null: all;
    `crisis`: the cards that mention suicide or self-harm, `esc.cards.crisis`; applied per language
    before the limit), limit (first N per language), paths (card files; null: the released
    high-quality cards). Shard i of n takes every n-th card starting at i, so shards are balanced and
    their union is the unsharded selection.
    """
    languages = list(_given(cfg, "languages", ["en", "zh"]))
    paths = [Path(p) for p in _given(cfg, "paths", [])] or None
    wanted = None if cfg.get("ids") is None else {_int("ids", i, 0) for i in _given(cfg, "ids", [])}
    limit = None if cfg.get("limit") is None else _int("limit", cfg["limit"], 1)
    subset = cfg.get("subset")
    if subset is not None and (not isinstance(subset, str) or subset not in SUBSETS):
        raise ConfigError("cards.subset", f"must be null or one of {', '.join(SUBSETS)}, got {subset!r}")
    cards: list[RoleCard] = []
    found: set[int] = set()  # the wanted ids that exist, whether the subset or the limit keeps them
    for language in languages:
        these = load_cards(paths, language=language)
        if wanted is not None:
            these = [c for c in these if c.id in wanted]
            found.update(c.id for c in these)
        if subset is not None:
            these = SUBSETS[subset](these)
        cards.extend(these if limit is None else these[:limit])
    if wanted is not None:
        unknown = sorted(wanted - found)
        if unknown:
            where = ", ".join(str(p) for p in paths) if paths else "the released cards"
            raise ConfigError(
                "cards.ids",
                f"unknown card ids {unknown[:10]}{' ...' if len(unknown) > 10 else ''} "
                f"for languages {languages} in {where}",
            )
    if not cards:
        raise ConfigError(
            "cards",
            f"no card selected (languages={languages}, ids={cfg.get('ids')}, subset={subset}, "
            f"limit={cfg.get('limit')})",
        )
    index, count = int((shard or {}).get("index", 0)), int((shard or {}).get("count", 1))
    if count < 1 or not 0 <= index < count:
        raise ConfigError("shard", f"need 0 <= shard.index < shard.count, got index={index} count={count}")
    return cards[index::count]


def _given(cfg: Mapping[str, Any], key: str, default: list[Any]) -> list[Any]:
    """The list at `cards.<key>`; null means `default`, an empty list selects nothing and is an error."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or not value:
        raise ConfigError(f"cards.{key}", f"must be a non-empty list or null, got {value!r}")
    return list(value)


def _int(key: str, value: Any, minimum: int) -> int:
    """`value` as the integer `cards.<key>` needs (not a bool, not a string), at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"cards.{key}", f"must be an integer >= {minimum}, got {value!r}")
    return value
