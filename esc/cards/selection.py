"""Which role cards a run plays: languages, explicit ids, a subset, a limit, and the shard of an array job."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from esc.cards.crisis import crisis_cards
from esc.cards.loader import load_cards
from esc.cards.schema import LANGUAGES, RoleCard
from esc.config_rules import Settings, relation
from esc.errors import ConfigError
from esc.settings.types import ExistingFile, NonEmpty

#: `cards.subset` -> the rule that keeps a language's cards (null: all of them)
SUBSETS: dict[str, Callable[[Sequence[RoleCard]], list[RoleCard]]] = {"crisis": crisis_cards}


class CardSelection(Settings):
    """`cards` (conf/evaluate.yaml): which cards a run plays."""

    languages: NonEmpty[Literal[LANGUAGES]]  # type: ignore[valid-type]  # one dialogue file per language
    ids: NonEmpty[int] | None = Field(description="card ids, e.g. [32025, 10000]")
    limit: int | None = Field(ge=1, description="the first N cards per language; null: all")
    paths: NonEmpty[ExistingFile] | None = Field(description="card files; null: the released cards")
    subset: Literal[tuple(SUBSETS)] | None = Field(  # type: ignore[misc]
        description="crisis: cards that mention suicide or self-harm (esc/cards/crisis.py)"
    )


class Shard(Settings):
    """`shard`: a SLURM array job's share, every `count`-th card from `index` on."""

    index: int = Field(ge=0)
    count: int = Field(ge=1)

    @model_validator(mode="after")
    def _index_below_count(self) -> Shard:
        if self.index >= self.count:
            raise relation("index", f"must be below shard.count ({self.count}), got {self.index}")
        return self


def select_cards(selection: CardSelection, shard: Shard | None = None) -> list[RoleCard]:
    """Cards in a fixed order (language, then file order), filtered by `selection`, then this shard's share.

    `ids`: explicit card ids (an unknown id is an error); `subset`: null for all, `crisis` for the
    cards that mention suicide or self-harm (`esc.cards.crisis`; applied per language before the
    limit); `limit`: the first N per language; `paths`: card files (null: the released high-quality
    cards). Shard i of n takes every n-th card starting at i, so shards are balanced and their union
    is the unsharded selection.
    """
    languages = selection.languages
    paths = [Path(p) for p in selection.paths] if selection.paths else None
    wanted = None if selection.ids is None else set(selection.ids)
    limit, subset = selection.limit, selection.subset
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
            f"no card selected (languages={languages}, ids={selection.ids}, subset={subset}, limit={limit})",
        )
    index, count = (shard.index, shard.count) if shard is not None else (0, 1)  # index < count: `Shard`
    return cards[index::count]
