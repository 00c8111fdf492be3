"""Which role cards a run plays: languages, explicit ids, a limit, and the shard of an array job."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esc.cards import RoleCard, load_cards
from esc.errors import ConfigError, UserError


def select_cards(cfg: Mapping[str, Any], shard: Mapping[str, Any] | None = None) -> list[RoleCard]:
    """Cards in a fixed order (language, then file order), filtered by `cfg`, then this shard's share.

    `cfg`: languages (en/zh), ids (explicit card ids; an unknown id is an error), limit (first N per
    language), paths (card files; null: the released high-quality cards). Shard i of n takes every
    n-th card starting at i, so shards are balanced and their union is the unsharded selection.
    """
    languages = list(cfg.get("languages") or ["en", "zh"])
    paths = [Path(p) for p in cfg["paths"]] if cfg.get("paths") else None
    wanted = {int(i) for i in cfg["ids"]} if cfg.get("ids") else None
    cards: list[RoleCard] = []
    for language in languages:
        these = load_cards(paths, language=language)
        if wanted is not None:
            these = [c for c in these if c.id in wanted]
        if cfg.get("limit") is not None:
            these = these[: int(cfg["limit"])]
        cards.extend(these)
    if wanted is not None:
        unknown = sorted(wanted - {c.id for c in cards})
        if unknown:
            where = ", ".join(str(p) for p in paths) if paths else "the released cards"
            raise UserError(
                f"cards.ids: unknown card ids {unknown[:10]}{' ...' if len(unknown) > 10 else ''} "
                f"for languages {languages} in {where}"
            )
    if not cards:
        raise ConfigError(
            "cards",
            f"no card selected (languages={languages}, ids={cfg.get('ids')}, limit={cfg.get('limit')})",
        )
    index, count = int((shard or {}).get("index", 0)), int((shard or {}).get("count", 1))
    if count < 1 or not 0 <= index < count:
        raise ConfigError("shard", f"need 0 <= shard.index < shard.count, got index={index} count={count}")
    return cards[index::count]
