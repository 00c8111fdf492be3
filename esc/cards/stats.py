"""Counts of role cards by language, source dataset and topic, as a dict or a text table."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any

from esc.cards.schema import LANGUAGES, SOURCES, RoleCard
from esc.cards.taxonomy import load_taxonomy


def card_stats(cards: Sequence[RoleCard]) -> dict[str, Any]:
    """{"total", "by_language", "by_source": {lang: {source: n}}, "by_topic": {lang: {topic: n}}}."""
    langs = [lang for lang in LANGUAGES if any(c.language == lang for c in cards)]
    by_language = Counter(c.language for c in cards)
    by_source = Counter((c.language, c.source) for c in cards)
    by_topic = Counter((c.language, c.topic) for c in cards)
    topics = load_taxonomy().tier1_keys()
    return {
        "total": len(cards),
        "by_language": {lang: by_language[lang] for lang in langs},
        "by_source": {
            lang: {src: by_source[lang, src] for src in SOURCES if by_source[lang, src]} for lang in langs
        },
        "by_topic": {lang: {t: by_topic[lang, t] for t in topics} for lang in langs},
    }


def _width(text: str) -> int:
    """Terminal columns of `text` (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int, right: bool = False) -> str:
    fill = " " * max(width - _width(text), 0)
    return fill + text if right else text + fill


def _table(title: str, rows: list[tuple[str, list[int]]], langs: list[str]) -> list[str]:
    header = [title, *langs, "total"]
    body = [[name, *(str(n) for n in counts), str(sum(counts))] for name, counts in rows]
    widths = [max(_width(r[i]) for r in [header, *body]) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        return "  ".join(
            [_pad(row[0], widths[0]), *(_pad(c, w, True) for c, w in zip(row[1:], widths[1:], strict=True))]
        )

    return [fmt(header), "-" * _width(fmt(header)), *(fmt(r) for r in body)]


def format_stats(stats: dict[str, Any]) -> str:
    """Readable tables of `card_stats()` output: totals, by source and by topic, one column per language."""
    langs = list(stats["by_language"])
    taxonomy = load_taxonomy()
    lines = _table("language", [("cards", [stats["by_language"][lang] for lang in langs])], langs)
    sources = [s for s in SOURCES if any(s in stats["by_source"][lang] for lang in langs)]
    source_rows = [(s, [stats["by_source"][lang].get(s, 0) for lang in langs]) for s in sources]
    lines += ["", *_table("source", source_rows, langs)]
    topic_rows = []
    for key in taxonomy.tier1_keys():
        node = taxonomy.node(key)
        name = f"{key} ({node.en}{' / ' + node.zh if node.zh else ''})"
        topic_rows.append((name, [stats["by_topic"][lang].get(key, 0) for lang in langs]))
    lines += ["", *_table("topic", topic_rows, langs)]
    return "\n".join(lines)
