"""Breakdowns (issue 23): the leaderboard and the agreement tables cut by what a dialogue is about.

A *facet* is one property of a dialogue: its language, its role card's taxonomy topic (tier 1) and
problem group (tier 2, the parent of the card's tier-3 `category`), the dataset the card was built
from (`source`), and its number of turns (role-player/target exchanges). `dialogue_facets` reads
them from the role cards (`esc.cards`) and the dialogue files the score records name
(`esc.dialogues`); a card not found, a card that is not the one played, or a dialogue file that is
gone give the value "unknown", which is a column of its own and counted like any other.

Leaderboard breakdown (`leaderboard_breakdowns`): per facet one table, rows (target, role-player
[, judge]), columns the facet's values. A cell is the mean over its dialogues of each dialogue's
average score (the mean of its valid dimension scores, /4 x 100 as the leaderboard), with a 95%
percentile bootstrap interval resampling role cards (a card's dialogues go in and out together;
`esc.reports.bootstrap.unit_intervals`) and n, its dialogues. A dialogue without any valid
judgment has no average: it is in no cell, and each cell counts such dialogues (`n_unscored`). A
cell with n below `min_n` is written "n=4 (< 10)", never as a number. The tier-2 table keeps only
the groups that reach `min_n` in some row and names those it leaves out.

Agreement breakdown: `esc.tasks.agreement.breakdown` computes the agreement tables again on the
annotated items of each language and each number of turns (`AGREEMENT_FACETS`, here).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.cards import RoleCard, load_cards, load_taxonomy
from esc.cards.schema import SOURCES
from esc.dialogues.store import played_by_source
from esc.errors import DataError, UserError
from esc.reports import result as result_
from esc.reports.bootstrap import NO_INTERVAL, card_unit_name, card_units, estimate, ratio_interval
from esc.reports.estimate import Estimate, format_estimate, resampled_units
from esc.scoring.judge import VALID
from esc.scoring.store import ScoreRecord

log = logging.getLogger(__name__)

UNKNOWN = "unknown"
FACETS = ("language", "tier1", "tier2", "source", "turns")
TITLES = {
    "language": "By language",
    "tier1": "By topic (taxonomy tier 1)",
    "tier2": "By problem group (taxonomy tier 2)",
    "source": "By card source (dataset)",
    "turns": "By number of turns (role-player/target exchanges)",
}
AGREEMENT_FACETS = ("language", "turns")  # annotated dialogues have no role card
MIN_N = 10  # `leaderboard.min_n`
MAX_EXACT_TURNS = 8  # more distinct turn counts than this are put in ranges (`turn_labels`)
# --- facets ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Facets:
    """What one dialogue is about; `UNKNOWN` (turns: None) where it cannot be told."""

    language: str = UNKNOWN
    tier1: str = UNKNOWN
    tier2: str = UNKNOWN
    source: str = UNKNOWN
    turns: int | None = None

    def value(self, facet: str) -> str:
        """The facet's value as a column key (turns as a number in text; `turn_labels` ranges them)."""
        if facet == "turns":
            return UNKNOWN if self.turns is None else str(self.turns)
        return getattr(self, facet)


def exchanges(lines: Iterable[tuple[str, str]]) -> int:
    """Role-player/target exchanges of a dialogue's (role, text) lines: the chatbot lines ("assistant")
    that answer a seeker line ("user"). An opener and consecutive lines of one side count once."""
    count, previous = 0, None
    for role, _ in lines:
        count += role == "assistant" and previous == "user"
        previous = role
    return count


def card_index(files: str | Sequence[str] | None) -> dict[tuple[int, str], RoleCard]:
    """The role cards by (id, language): `files` (`leaderboard.cards`), or the released cards (None).
    Released cards that are not on this machine (no `make data`) give no cards, with a warning: their
    dialogues are "unknown" in the card facets. Card files named and unreadable stop the run."""
    if files is None:
        try:
            cards = load_cards()
        except (DataError, UserError, OSError) as err:
            log.warning("the released role cards cannot be read (%s); topic, problem group and card "
                        "source are unknown for every dialogue", err)  # fmt: skip
            return {}
    else:
        cards = load_cards([Path(f) for f in ([files] if isinstance(files, str) else files)])
    return {(card.id, card.language): card for card in cards}


def _card_facets(card: RoleCard | None) -> dict[str, str]:
    if card is None:
        return {}
    taxonomy = load_taxonomy()
    tier2 = UNKNOWN
    if card.category:
        tier2 = taxonomy.tier2_of(card.category)
    return {"tier1": card.topic, "tier2": tier2, "source": card.source}


def dialogue_facets(
    records: Iterable[ScoreRecord], cards: Mapping[tuple[int, str], RoleCard]
) -> tuple[dict[str, Facets], dict[str, dict[str, int]]]:
    """(dialogue id -> its facets, per language the counts of what is unknown and why) for the
    dialogues of `records` (per language: a table per language counts its own dialogues).

    The card is `cards[(card_id, language)]`, used only if it is the card the dialogue was played
    with (its problem text is in the role-player's system prompt) where the dialogue file is there to
    tell. Turns are read from the dialogue file each record names (`source`), each file once; a file
    that no longer exists, or no longer holds the dialogue, gives unknown turns."""
    first: dict[str, ScoreRecord] = {}
    for r in records:
        first.setdefault(r.dialogue_id, r)
    played = played_by_source(r.source for r in first.values() if r.source)  # file -> card id -> dialogue
    by_language: dict[str, dict[str, int]] = {}
    facets = {}
    for dialogue_id, r in first.items():
        counts = by_language.setdefault(r.language, {"no_card": 0, "card_mismatch": 0, "no_dialogue_file": 0})
        card = cards.get((r.card_id, r.language)) if r.card_id is not None else None
        dialogue = played.get(r.source or "", {}).get(r.card_id)
        dialogue = dialogue if dialogue is not None and dialogue.status == "complete" else None
        if card is None:
            counts["no_card"] += 1
        elif dialogue is not None and card.problem.strip() not in dialogue.system_prompt:
            counts["card_mismatch"] += 1
            card = None
        if dialogue is None:
            counts["no_dialogue_file"] += 1
        turns = exchanges(dialogue.lines()) if dialogue is not None else None
        facets[dialogue_id] = Facets(r.language, **_card_facets(card), turns=turns)
    return facets, by_language


def annotation_facets(annotations: Iterable[Any]) -> dict[str, Facets]:
    """Dialogue id -> language and turns of annotated dialogues (`esc.annotate.human_scores.Annotation`)."""
    out: dict[str, Facets] = {}
    for ann in annotations:
        if ann.dialogue_id not in out:
            out[ann.dialogue_id] = Facets(ann.language, turns=exchanges(ann.lines))
    return out


def turn_labels(counts: Iterable[int]) -> dict[int, str]:
    """Each turn count's column: itself when there are at most `MAX_EXACT_TURNS` distinct counts,
    else its range (0, 1, 2, 3-4, 5-8, 9-16, ...: powers of two), so sparse counts pool."""
    distinct = sorted(set(counts))
    if len(distinct) <= MAX_EXACT_TURNS:
        return {c: str(c) for c in distinct}
    labels = {}
    for c in distinct:
        if c <= 2:
            labels[c] = str(c)
        else:
            high = 1 << (c - 1).bit_length()  # the power of two at or above c
            labels[c] = f"{high // 2 + 1}-{high}"
    return labels


def _order(facet: str, values: Iterable[str]) -> list[str]:
    """Columns in a reader's order: languages and sources alphabetically or as Table 5, taxonomy
    keys as the taxonomy, turns by number; "unknown" last."""
    values = set(values)
    known = values - {UNKNOWN}
    if facet in ("tier1", "tier2"):
        taxonomy = load_taxonomy()
        order = taxonomy.tier1_keys() if facet == "tier1" else taxonomy.tier2_keys()
        ranked = [k for k in order if k in known] + sorted(known - set(order))
    elif facet == "source":
        ranked = [s for s in SOURCES if s in known] + sorted(known - set(SOURCES))
    elif facet == "turns":
        ranked = sorted(known, key=lambda v: int(v.split("-")[0]))
    else:
        ranked = sorted(known)
    return ranked + ([UNKNOWN] if UNKNOWN in values else [])


# --- the leaderboard's breakdowns --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Scored:
    """One dialogue's average over its valid dimension scores (0-100; None: no valid judgment)."""

    dialogue_id: str
    target: str
    roleplayer: str
    judge: str
    unit: tuple[Any, ...]  # the role card: (card id, language), else the dialogue
    average: float | None


@dataclasses.dataclass(frozen=True)
class Cell:
    """One facet value of one row: the mean of its dialogues' averages (n: the dialogues with one)."""

    facet: str
    value: str
    target: str
    roleplayer: str
    judge: str
    estimate: Estimate
    n_unscored: int  # dialogues of the cell without any valid judgment (no average, in no mean)
    shown: bool  # n >= min_n and (tier 2) its column kept
    cards: int = 0  # the distinct role cards of its dialogues (the resampling unit)

    @property
    def n(self) -> int:
        return self.estimate.n or 0


@dataclasses.dataclass
class Breakdown:
    facet: str
    columns: list[str]  # the values shown, in order ("unknown" last)
    rows: list[tuple[str, str, str]]  # (target, role-player, judge)
    cells: list[Cell]  # every cell, also those of the columns left out
    min_n: int
    left_out: dict[str, int] = dataclasses.field(default_factory=dict)  # tier 2: value -> its largest n
    language: str | None = None  # the dialogues' language, when the table holds one language only
    unknown_dialogues: int = 0  # distinct dialogues whose value is "unknown" (once, whatever the judges)
    unscored_dialogues: int = 0  # distinct dialogues some judge has no valid judgment of

    def cell(self, row: tuple[str, str, str], value: str) -> Cell | None:
        for c in self.cells:
            if (c.target, c.roleplayer, c.judge) == row and c.value == value:
                return c
        return None


def dialogue_averages(records: Iterable[ScoreRecord]) -> list[Scored]:
    """Per (judge, dialogue): the mean of its valid dimension scores on the 0-100 scale."""
    groups: dict[tuple[str, str], list[ScoreRecord]] = defaultdict(list)
    for r in records:
        groups[(r.judge, r.dialogue_id)].append(r)
    out = []
    for (judge, dialogue_id), recs in sorted(groups.items()):
        valid = [r.score for r in recs if r.status == VALID and r.score is not None]
        r = recs[0]
        [unit] = card_units([r])
        average = float(np.mean(valid)) / 4 * 100 if valid else None
        out.append(Scored(dialogue_id, r.target or "?", r.roleplayer or "?", judge, unit, average))
    return out


def _mean_cell(scored: Sequence[Scored], n_resamples: int, seed: int) -> Estimate:
    """The mean of the dialogues' averages and its interval, role cards resampled."""
    if not scored:
        return estimate(None, NO_INTERVAL, 0)
    values = [s.average for s in scored]
    units = [s.unit for s in scored]
    interval = ratio_interval(units, values, [1.0] * len(values), n_resamples, seed)
    return estimate(float(np.mean(values)), interval, len(values), card_unit_name(units))


def leaderboard_breakdowns(
    records: Iterable[ScoreRecord],
    facets: Mapping[str, Facets],
    min_n: int = MIN_N,
    n_resamples: int = 1000,
    seed: int = 0,
    only: Sequence[str] = FACETS,
) -> list[Breakdown]:
    """One table per facet (`FACETS`, or those in `only`) of the dialogues' average scores; see the
    module docstring. A dialogue missing from `facets` is "unknown" in every facet but its language
    (the record's)."""
    records = list(records)
    languages = {r.dialogue_id: r.language for r in records}
    scored = dialogue_averages(records)
    rows = sorted({(s.target, s.roleplayer, s.judge) for s in scored})
    tables = []
    for facet in only:
        values = {
            s.dialogue_id: facets.get(s.dialogue_id, Facets(languages[s.dialogue_id])).value(facet)
            for s in scored
        }
        if facet == "turns":
            labels = turn_labels(int(v) for v in values.values() if v != UNKNOWN)
            values = {k: v if v == UNKNOWN else labels[int(v)] for k, v in values.items()}
        columns = _order(facet, values.values())
        cells = []
        for row in rows:
            in_row = [s for s in scored if (s.target, s.roleplayer, s.judge) == row]
            for column in columns:
                chosen = [s for s in in_row if values[s.dialogue_id] == column]
                defined = [s for s in chosen if s.average is not None]
                cards = len({s.unit for s in defined})
                cells.append(Cell(facet, column, *row, _mean_cell(defined, n_resamples, seed),
                                  len(chosen) - len(defined), len(defined) >= min_n, cards))  # fmt: skip
        left_out: dict[str, int] = {}
        if facet == "tier2":  # only the groups with enough dialogues in some row
            largest = {c: max((x.n for x in cells if x.value == c), default=0) for c in columns}
            left_out = {c: n for c, n in largest.items() if c != UNKNOWN and n < min_n}
            columns = [c for c in columns if c not in left_out]
            if columns == [UNKNOWN]:  # no known group to show: no table, a note says why
                columns = []
            cells = [c if c.value in columns else dataclasses.replace(c, shown=False) for c in cells]
        unknown = len({s.dialogue_id for s in scored if values[s.dialogue_id] == UNKNOWN})
        unscored = len({s.dialogue_id for s in scored if s.average is None})
        tables.append(
            Breakdown(
                facet,
                columns,
                rows,
                cells,
                min_n,
                left_out,
                unknown_dialogues=unknown,
                unscored_dialogues=unscored,
            )
        )
    return tables


def cell_text(cell: Cell | None, min_n: int) -> str:
    """`mean [low, high], n=N` (0-100), or `n=N (< min_n)` when too few dialogues to show a number."""
    if cell is None or cell.n == 0:
        return "n=0"
    if not cell.shown or cell.estimate.value is None:
        return f"n={cell.n} (< {min_n})"
    text = format_estimate(cell.estimate, 1)
    if cell.cards == 1:
        text += " [no interval: one card]"
    return f"{text}, n={cell.n}"


def _shown(cell: Cell | None, min_n: int) -> result_.Cell:
    text = cell_text(cell, min_n)
    if cell is None:
        return result_.Cell(text, Estimate(None, n=0))
    if not cell.shown or cell.estimate.value is None:
        hidden = Estimate(None, n=cell.n, unit=cell.estimate.unit, note=f"fewer than {min_n} dialogues")
        return result_.Cell(text, hidden)
    return result_.Cell(text, cell.estimate)


def _row_name(row: tuple[str, str, str]) -> str:
    target, roleplayer, _ = row
    return f"{target} ({roleplayer})"


def breakdown_blocks(
    tables: Sequence[Breakdown], unknown: Mapping[str, Mapping[str, int]] | None = None
) -> list[result_.Block]:
    """The sections after leaderboard.md's table: "By language", "By topic (taxonomy tier 1)", ...;
    the first says how to read a cell, each says what it leaves out and why a value is unknown."""
    blocks: list[result_.Block] = []
    for k, t in enumerate(tables):
        several_judges = len({judge for _, _, judge in t.rows}) > 1
        blocks.append(result_.Heading(TITLES[t.facet] + (f", {t.language}" if t.language else "")))
        if t.columns:
            blocks.append(
                result_.Table.of(
                    ["Target (role-player)", *(["Judge"] if several_judges else []), *t.columns],
                    [
                        [
                            _row_name(row),
                            *([row[2]] if several_judges else []),
                            *(_shown(t.cell(row, c), t.min_n) for c in t.columns),
                        ]
                        for row in t.rows
                    ],
                )  # fmt: skip
            )
        notes = []
        if k == 0:
            unit = resampled_units(c.estimate.unit for b in tables for c in b.cells) or "nothing"
            notes.append(
                "Each cell: the mean of its dialogues' average scores (a dialogue's average: its valid "
                f"dimension scores, mean/4 x 100) [95% bootstrap interval, resampled by {unit}], n = "
                f"dialogues; a cell with n < {t.min_n} (`leaderboard.min_n`) is too few to show as a number. "
                "Every cell, shown or not, is in the last table (breakdown.csv)."
            )
        if t.facet == "tier2" and not t.columns:
            notes.append(f"No problem group reaches n={t.min_n} in any row: no table.")
        if t.left_out:
            named = ", ".join(f"{v} (largest n={n})" for v, n in t.left_out.items())
            notes.append(f"{len(t.left_out)} problem group(s) left out, under n={t.min_n} in every row: "
                         f"{named}.")  # fmt: skip
        if t.unscored_dialogues:
            judge = " of some judge" if several_judges else ""
            notes.append(f"{t.unscored_dialogues} dialogue(s) without any valid judgment{judge} have no "
                         "average there and are in no cell of its row (n_unscored in the CSV).")  # fmt: skip
        if t.unknown_dialogues:
            counts = counted(unknown, t.language)
            notes.append(f"unknown ({t.unknown_dialogues} dialogue(s)): {_unknown_reason(t.facet, counts)}.")
        if notes:
            blocks.append(result_.Text(" ".join(notes)))
    return blocks


def counted(unknown: Mapping[str, Mapping[str, int]] | None, language: str | None) -> dict[str, int]:
    """The counts of unknowns of one language's dialogues (`dialogue_facets`), or of every
    language's for a table over all of them (`language` None)."""
    out: dict[str, int] = {}
    for lang, counts in (unknown or {}).items():
        if language is None or lang == language:
            for reason, n in counts.items():
                out[reason] = out.get(reason, 0) + n
    return out


def _unknown_reason(facet: str, unknown: Mapping[str, int] | None) -> str:
    if facet == "turns":
        return "the dialogue file named by the scores is gone or no longer holds the dialogue"
    counts = unknown or {}
    why = []
    if counts.get("no_card"):
        why.append(f"{counts['no_card']} whose card is not in the cards read (`leaderboard.cards`)")
    if counts.get("card_mismatch"):
        why.append(f"{counts['card_mismatch']} whose card there is not the one played (another problem)")
    if facet == "tier2":
        why.append("cards without a tier-3 `category` (the released cards have none)")
    return "; ".join(why) or "no card"


def cells_table(tables: Sequence[Breakdown]) -> result_.Table:
    """Every cell, also the ones not shown (n < `min_n`, a tier-2 column left out): its facet,
    language, value, row, its mean (0-100) with interval and n, the dialogues without an average,
    and whether the tables above show it. Written to breakdown.csv with the report; a cell not shown
    reads "not shown (n=N)" here too, its figure only in the CSV's and the log's numbers."""
    rows = [
        [c.facet, t.language or "all", c.value, c.target, c.roleplayer, c.judge,
         result_.Cell(format_estimate(c.estimate, 1) if c.shown else f"not shown (n={c.n})", c.estimate),
         c.n_unscored, "yes" if c.shown else "no"]
        for t in tables
        for c in t.cells
    ]  # fmt: skip
    columns = ["facet", "language", "value", "target", "role-player", "judge", "mean", "unscored", "shown"]
    return result_.Table.of(columns, rows, csv="breakdown.csv", name="every breakdown cell")


def breakdown_sections(
    records: Sequence[ScoreRecord], cards: str | Sequence[str] | None, min_n: int, n_resamples: int,
    seed: int,
) -> list[result_.Block]:  # fmt: skip
    """The sections for leaderboard.md, ending in the table of every cell (breakdown.csv)."""
    facets, unknown = dialogue_facets(records, card_index(cards))
    languages = sorted({r.language for r in records})
    if len(languages) > 1:  # the other facets per language, as Table 2 is: a cell never mixes en and zh
        tables = leaderboard_breakdowns(records, facets, min_n, n_resamples, seed, only=FACETS[:1]) + [
            dataclasses.replace(t, language=language)
            for language in languages
            for t in leaderboard_breakdowns(
                [r for r in records if r.language == language], facets, min_n, n_resamples, seed, FACETS[1:]
            )
        ]
    else:
        tables = leaderboard_breakdowns(records, facets, min_n, n_resamples, seed)
    cells = [
        result_.Heading("Every breakdown cell"),
        result_.Text(f"Also the cells not shown above (n < {min_n}, or a problem group left out; their "
                     "figures are in breakdown.csv): mean [95% interval] (0-100), n = dialogues with an "
                     "average; unscored: dialogues without one."),
        cells_table(tables),
    ]  # fmt: skip
    return [*breakdown_blocks(tables, unknown), *(cells if tables else [])]


__all__ = [
    "FACETS",
    "MIN_N",
    "UNKNOWN",
    "Breakdown",
    "Cell",
    "Facets",
    "annotation_facets",
    "breakdown_blocks",
    "card_index",
    "dialogue_averages",
    "dialogue_facets",
    "exchanges",
    "leaderboard_breakdowns",
    "turn_labels",
    "breakdown_sections",
    "cells_table",
]
