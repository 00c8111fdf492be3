"""The paper's three-tier problem taxonomy (Table 9), read from `taxonomy.yaml`.

The taxonomy has 3 tier-1 topics, 9 tier-2 groups and 35 tier-3 (leaf) categories; see the comment
at the top of `taxonomy.yaml` for why it is 35 and not the "37" of the paper text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from esc.errors import DataError

TAXONOMY_PATH = Path(__file__).with_name("taxonomy.yaml")
LEAF_COUNT = 35
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Category:
    """One node of the taxonomy. `high`/`middle` are the paper's card counts (tier 3 only)."""

    key: str
    tier: int
    en: str
    zh: str | None
    parent: str | None
    high: int | None = None
    middle: int | None = None


def _norm_label(label: str) -> str:
    return " ".join(label.replace("_", " ").split()).casefold()


class Taxonomy:
    """Lookups over the three tiers; build it with `load_taxonomy()`."""

    def __init__(self, nodes: list[Category], aliases: dict[str, str]) -> None:
        self._nodes = {node.key: node for node in nodes}
        self._order = [node.key for node in nodes]
        self._labels = dict(aliases)
        for node in nodes:
            if node.tier == 1:
                for label in (node.key, node.en, node.zh):
                    if label:
                        self._labels[_norm_label(label)] = node.key

    def node(self, key: str) -> Category:
        """The category with this key (any tier); ValueError if unknown."""
        try:
            return self._nodes[key]
        except KeyError:
            raise ValueError(f"unknown taxonomy key {key!r}") from None

    def _keys(self, tier: int) -> tuple[str, ...]:
        return tuple(k for k in self._order if self._nodes[k].tier == tier)

    def tier1_keys(self) -> tuple[str, ...]:
        """The 3 topic keys: family_life, work_study, social_other."""
        return self._keys(1)

    def tier2_keys(self) -> tuple[str, ...]:
        """The 9 secondary group keys."""
        return self._keys(2)

    def tier3_keys(self) -> tuple[str, ...]:
        """The 35 leaf category keys."""
        return self._keys(3)

    def leaves(self) -> Iterator[Category]:
        """Iterate over the 35 tier-3 categories in the paper's order."""
        return (self._nodes[k] for k in self.tier3_keys())

    def tier1_of(self, key: str) -> str:
        """The tier-1 key above a tier-2 or tier-3 key (a tier-1 key maps to itself)."""
        node = self.node(key)
        while node.parent is not None:
            node = self._nodes[node.parent]
        return node.key

    def tier2_of(self, tier3_key: str) -> str:
        """The tier-2 key above a tier-3 key."""
        node = self.node(tier3_key)
        if node.tier != 3 or node.parent is None:
            raise ValueError(f"{tier3_key!r} is not a tier-3 category")
        return node.parent

    def topic_from_label(self, label: str) -> str:
        """Tier-1 key for a released `res` label (家庭生活/工作学习/社会与其他), a key or an English name."""
        key = self._labels.get(_norm_label(str(label)))
        if key is None:
            known = ", ".join(f"{self._nodes[k].zh}/{k}" for k in self.tier1_keys())
            raise ValueError(f"unknown topic label {label!r}; expected one of {known}")
        return key


def _text(raw: dict[str, Any], field: str, where: str, required: bool = True) -> str | None:
    value = raw.get(field)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise DataError(TAXONOMY_PATH, where, f"`{field}` must be a non-empty string")
    return value.strip()


def _build(raw: Any) -> Taxonomy:
    nodes: list[Category] = []
    aliases: dict[str, str] = {}

    def add(item: Any, tier: int, parent: str | None, where: str) -> None:
        if not isinstance(item, dict):
            raise DataError(TAXONOMY_PATH, where, "expected a mapping with key/en/zh")
        key = _text(item, "key", where)
        assert key is not None
        if not _KEY_RE.match(key):
            raise DataError(TAXONOMY_PATH, where, f"key {key!r} is not snake_case")
        if any(n.key == key for n in nodes):
            raise DataError(TAXONOMY_PATH, where, f"duplicate key {key!r}")
        counts: dict[str, int | None] = {"high": None, "middle": None}
        if tier == 3:
            for field in counts:
                value = item.get(field)
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise DataError(TAXONOMY_PATH, key, f"`{field}` must be a non-negative integer")
                counts[field] = value
        en = _text(item, "en", key)
        assert en is not None
        nodes.append(Category(key, tier, en, _text(item, "zh", key, required=False), parent, **counts))
        if tier == 1:
            for alias in item.get("aliases") or []:
                aliases[_norm_label(str(alias))] = key
        children = item.get("children")
        if tier < 3:
            if not isinstance(children, list) or not children:
                raise DataError(TAXONOMY_PATH, key, "tier 1 and 2 entries need a non-empty `children` list")
            for i, child in enumerate(children):
                add(child, tier + 1, key, f"{key}.children[{i}]")
        elif children:
            raise DataError(TAXONOMY_PATH, key, "tier-3 entries cannot have children")

    top = raw.get("tier1") if isinstance(raw, dict) else None
    if not isinstance(top, list) or not top:
        raise DataError(TAXONOMY_PATH, None, "expected a top-level `tier1` list")
    for i, item in enumerate(top):
        add(item, 1, None, f"tier1[{i}]")
    return Taxonomy(nodes, aliases)


@functools.lru_cache(maxsize=1)
def load_taxonomy() -> Taxonomy:
    """Load and validate `taxonomy.yaml` once: 3 tier-1, 9 tier-2 and 35 tier-3 categories."""
    try:
        raw = yaml.safe_load(TAXONOMY_PATH.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise DataError(TAXONOMY_PATH, None, f"not valid YAML: {' '.join(str(err).split())}") from err
    return _build(raw)
