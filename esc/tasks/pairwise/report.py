"""The pairwise report (`rank.py mode=pairwise`): which chatbot the judge prefers, card by card.

From each pair's verdicts (`esc.tasks.pairwise.questions.verdict`: the same result both orders stands, two
different results are a tie, an unread answer leaves the pair out and is counted), per role-player:

- **position consistency**: the share of pairs (with both answers read) judged the same both ways,
  and the share of decisive answers that chose the conversation shown first (0.5 when the judge has
  no position preference), each with a 95% interval resampling cards;
- **win rates**: per pair of targets, the share of their shared cards' verdicts each won (a tie
  counts half), with an interval by card, over all dimensions and per dimension;
- **strengths**: Bradley-Terry log-strengths (`choix.ilsr_pairwise`, centred on 0; a win of i over j
  has probability 1 / (1 + exp(theta_j - theta_i))), a tie counted as half a win each way, with a
  stated prior (`PRIOR` pseudo-wins each way between every two targets with a verdict, added to the
  data: a target that won every verdict gets a finite strength; a target with none takes no part)
  and 95% bootstrap intervals resampling cards (every verdict of a card together); undefined (NaN,
  counted) for a target without a verdict and when the targets fall into groups that never met;
  over all dimensions and per dimension. A share at 0% or 100% (every resample equal) is given
  with its exact 95% interval by card instead, and by verdict in its note (`share_figure`). Ranked
  with ties: a target's rank is 1 + the targets whose strength is above its own by a difference whose interval
  (the same resamples, Bonferroni over the pairs: `esc.reports.paired`) excludes 0, so that
  targets that cannot be told apart (identical strengths among them) share a rank; without
  resamples, equal strengths share a rank. The report shows the strengths first (the overview
  shows a report's first table).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.reports.bootstrap import (
    NO_INTERVAL,
    Interval,
    estimate,
    expand,
    percentile_interval,
    ratio_interval,
    share_figure,
    unit_distributions,
    unit_index,
)
from esc.reports.chart_spec import Chart
from esc.reports.estimate import Estimate, format_estimate, resampled_units
from esc.reports.paired import Difference, difference_from, family_level, marked_best, tied_ranks
from esc.reports.result import Block, Cell, Heading, Report, Table, Text, figure, write_result
from esc.scoring.rubrics import label
from esc.tasks.pairwise.metrics import STRENGTH, WIN_RATE
from esc.tasks.pairwise.questions import TIE, Pair, Verdict

ALL = "all"
UNIT = "role card"  # what every interval resamples: a card's verdicts go together


@dataclasses.dataclass(frozen=True)
class Judged:
    """One pair's verdict on one dimension."""

    pair: Pair
    dimension: str
    verdict: Verdict


@dataclasses.dataclass(frozen=True)
class Share:
    """A share with its 95% interval resampling cards, and what it is a share of."""

    value: float | None
    interval: Interval
    of: int
    cards: int = 0  # the distinct cards it rests on (the resampling unit)
    item: str = "verdict"  # what `of` counts
    why_not: str | None = None  # why it is n/a, where the data say more than "no verdict"

    @property
    def estimate(self) -> Estimate:
        """The share with its interval as its cell shows it (`share_figure`: at 0% or 100% the exact
        95% interval by card); n: what it is a share of."""
        note = None if self.value is not None else self.why_not or "no verdict"
        return share_figure(estimate(self.value, self.interval, self.of, UNIT, note), self.of, self.cards,
                            self.item)[1]  # fmt: skip

    def cell(self) -> str:
        return "n/a" if self.value is None else share_figure(self.estimate, self.of, self.cards, self.item)[0]


def _card_share(
    units: Sequence[object], hits: Sequence[float], totals: Sequence[float], n: int, seed: int,
    item: str = "verdict",
) -> Share:  # fmt: skip
    """sum(hits) / sum(totals), its interval resampling the units (cards) with all their rows."""
    total = float(sum(totals))
    if not total:
        return Share(None, NO_INTERVAL, 0, item=item)
    cards = len({u for u, t in zip(units, totals, strict=True) if t})
    return Share(
        float(sum(hits)) / total, ratio_interval(units, hits, totals, n, seed), int(total), cards, item
    )


@dataclasses.dataclass(frozen=True)
class Consistency:
    rate: Share  # of the pairs with both answers read, those judged the same both ways
    first: Share  # of the decisive answers, those that chose the conversation shown first
    unread: int  # pairs left out: an answer invalid or failed


def consistency(judged: Sequence[Judged], n_resamples: int = 1000, seed: int = 0) -> Consistency:
    read = [j for j in judged if j.verdict.consistent is not None]
    return Consistency(
        _card_share([j.pair.unit for j in read], [float(bool(j.verdict.consistent)) for j in read],
                    [1.0] * len(read), n_resamples, seed, "pair"),
        _card_share([j.pair.unit for j in judged], [j.verdict.first_position for j in judged],
                    [j.verdict.decisive for j in judged], n_resamples, seed, "answer"),
        len(judged) - len(read),
    )  # fmt: skip


def comparisons(judged: Sequence[Judged], index: dict[str, int]) -> list[tuple[int, int]]:
    """(winner, loser) pairs for choix: a win twice, a tie once each way (half a win each)."""
    data: list[tuple[int, int]] = []
    for j in judged:
        x, y, result = index[j.pair.x], index[j.pair.y], j.verdict.result
        if result is None:
            continue
        if result == TIE:
            data += [(x, y), (y, x)]
        elif result == j.pair.x:
            data += [(x, y), (x, y)]
        else:
            data += [(y, x), (y, x)]
    return data


def components(n_items: int, data: Sequence[tuple[int, int]]) -> list[set[int]]:
    """The groups of items linked by comparisons (items never compared are left out)."""
    parent = list(range(n_items))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in data:
        parent[root(a)] = root(b)
    present = {i for pair in data for i in pair}
    groups: dict[int, set[int]] = {}
    for i in present:
        groups.setdefault(root(i), set()).add(i)
    return list(groups.values())


#: the prior of the strengths: `PRIOR` pseudo-wins each way between every two targets that have a
#: verdict, added to the data as comparisons (then an exact maximum-likelihood fit). It keeps a
#: target that won (or lost) every verdict at a finite strength; with few verdicts it pulls every
#: strength towards 0. docs/scoring.md says how to read it.
PRIOR = 1.0


def pseudo_comparisons(n_items: int, prior: float) -> list[tuple[int, int]]:
    """`prior` pseudo-wins each way between every two of `n_items`, in `comparisons`' units (one
    entry is half a win); `prior` must be a multiple of 0.5."""
    entries = 2 * prior
    if entries < 0 or abs(entries - round(entries)) > 1e-9:
        raise ValueError(f"the prior must be a non-negative multiple of 0.5 pseudo-wins, got {prior}")
    pairs = [(a, b) for a in range(n_items) for b in range(n_items) if a != b]
    return pairs * round(entries)


def bradley_terry(n_items: int, data: Sequence[tuple[int, int]], prior: float = PRIOR) -> np.ndarray:
    """Log-strengths centred on the items with a comparison, fitted over those items only, with
    `prior` pseudo-wins each way between every two of them (`pseudo_comparisons`) and no other
    regularisation: the maximum-likelihood fit of the data plus the stated prior. NaN for an item
    with no comparison, and for every item when the comparisons fall into groups that never meet
    (nothing puts them on one scale)."""
    import choix

    theta = np.full(n_items, np.nan)
    groups = components(n_items, data)
    if len(groups) != 1:
        return theta
    present = sorted(groups[0])
    local = {item: k for k, item in enumerate(present)}
    fitted = [(local[w], local[loser]) for w, loser in data] + pseudo_comparisons(len(present), prior)
    params = np.asarray(choix.ilsr_pairwise(len(present), fitted, alpha=0.0, max_iter=1000, tol=1e-12))
    theta[present] = params - params.mean()
    return theta


@dataclasses.dataclass(frozen=True)
class Strength:
    target: str
    theta: float
    interval: Interval
    verdicts: int  # verdicts it took part in
    undefined: str | None = None  # why theta is NaN
    rank: int | None = None  # 1 + the targets shown stronger (`tied_ranks`); None where theta is NaN
    best: bool = False  # the strongest, shown stronger than every other target (`marked_best`)


def strengths(
    judged: Sequence[Judged], n_resamples: int = 1000, seed: int = 0, prior: float = PRIOR
) -> list[Strength]:
    """Bradley-Terry strengths of the targets in `judged` (one role-player), best first. A resample
    in which a target with verdicts has none, or the targets fall into groups that never meet, gives
    NaN for every target (its strengths would be centred, and its prior spread, over other targets:
    another scale): counted as undefined (`Interval.undefined`), never filled in."""
    targets = sorted({t for j in judged for t in (j.pair.x, j.pair.y)})
    index = {t: i for i, t in enumerate(targets)}
    usable = [j for j in judged if j.verdict.result is not None]
    units, members = unit_index([j.pair.unit for j in usable])
    compared = {i for pair in comparisons(usable, index) for i in pair}

    def statistic(drawn: np.ndarray) -> np.ndarray:
        chosen = [usable[i] for i in expand(members, drawn)] if len(drawn) else []
        data = comparisons(chosen, index)
        if {i for pair in data for i in pair} != compared:  # centred and given the prior over fewer
            return np.full(len(targets), np.nan)  # targets: another scale, so undefined for all
        return bradley_terry(len(targets), data, prior)

    theta = statistic(np.arange(len(units)))
    dist = unit_distributions(len(units), statistic, n_resamples, seed) if usable else None
    intervals = [NO_INTERVAL] * len(targets) if dist is None else [percentile_interval(d) for d in dist]
    counts = {t: sum(t in (j.pair.x, j.pair.y) for j in usable) for t in targets}
    groups = components(len(targets), comparisons(usable, index))
    why = None
    if len(groups) > 1:
        why = "the targets fall into groups that never met: " + " | ".join(
            ", ".join(targets[i] for i in sorted(g)) for g in groups
        )
    values = {t: None if math.isnan(theta[i]) else float(theta[i]) for t, i in index.items()}
    differences = _differences(targets, theta, dist, len(units))
    ranks, best = tied_ranks(values, differences), marked_best(values, differences)
    rows = [
        Strength(
            t,
            float(theta[i]),
            intervals[i],
            counts[t],
            why if why else None if counts[t] else "no verdict",
            ranks[t],
            t == best,
        )  # fmt: skip
        for t, i in index.items()
    ]
    return sorted(rows, key=lambda r: (-(r.theta if not math.isnan(r.theta) else -math.inf), r.target))


def _differences(
    targets: Sequence[str], theta: np.ndarray, dist: np.ndarray | None, cards: int
) -> dict[tuple[str, str], Difference]:
    """theta_i - theta_j of every two targets with a strength, from the same resamples as the
    strengths' intervals, each at 1 - 0.05/m for the m pairs (Bonferroni, `esc.reports.paired`)."""
    placed = [i for i in range(len(targets)) if not math.isnan(theta[i])]
    m = len(placed) * (len(placed) - 1) // 2
    return {
        (targets[i], targets[j]): difference_from(
            float(theta[i] - theta[j]),
            None if dist is None else dist[i] - dist[j],
            cards,
            UNIT,
            family_level(m),
        )
        for k, i in enumerate(placed)
        for j in placed[k + 1 :]
    }


def win_rates(
    judged: Sequence[Judged], n_resamples: int = 1000, seed: int = 0
) -> dict[tuple[str, str], Share]:
    """{(a, b): a's share of their verdicts (a tie counts half), with its interval by card}."""
    by_pair: dict[tuple[str, str], tuple[list[object], list[float]]] = {}
    met: dict[tuple[str, str], set[object]] = {}  # the cards each pair was judged on, read or not
    for j in judged:
        for key in ((j.pair.x, j.pair.y), (j.pair.y, j.pair.x)):
            met.setdefault(key, set()).add(j.pair.unit)
        result = j.verdict.result
        if result is None:
            continue
        x, y = j.pair.x, j.pair.y
        score_x = 0.5 if result == TIE else float(result == x)
        for key, value in (((x, y), score_x), ((y, x), 1.0 - score_x)):
            units, values = by_pair.setdefault(key, ([], []))
            units.append(j.pair.unit)
            values.append(value)
    shares = {
        key: _card_share(units, values, [1.0] * len(values), n_resamples, seed)
        for key, (units, values) in by_pair.items()
    }
    for key, cards in met.items():  # met, but no verdict of theirs was read
        if key not in shares:
            why = f"met on {len(cards)} card(s), every verdict unread"
            shares[key] = Share(None, NO_INTERVAL, 0, len(cards), why_not=why)
    return shares


def dropped_cards(dialogues_by_card: Mapping[tuple[str, str, int], int]) -> list[tuple[str, str, int]]:
    """The (role-player, language, card) that only one target played: no pair, left out."""
    return sorted(key for key, targets in dialogues_by_card.items() if targets < 2)


def _groups(judged: Sequence[Judged]) -> dict[str, list[Judged]]:
    groups: dict[str, list[Judged]] = {}
    for j in judged:
        groups.setdefault(j.pair.roleplayer, []).append(j)
    return groups


def report(
    judged: Sequence[Judged], dimensions: Sequence[str], n_resamples: int, seed: int, prior: float = PRIOR
) -> dict[str, Any]:
    """Per role-player: consistency, win rates and strengths, over all dimensions and per dimension."""
    out = {}
    for roleplayer, members in sorted(_groups(judged).items()):
        per_dimension = {d: [j for j in members if j.dimension == d] for d in dimensions}
        out[roleplayer] = {
            "consistency": consistency(members, n_resamples, seed),
            "strengths": {ALL: strengths(members, n_resamples, seed, prior)}
            | {d: strengths(js, n_resamples, seed, prior) for d, js in per_dimension.items() if js},
            "win_rates": {ALL: win_rates(members, n_resamples, seed)}
            | {d: win_rates(js, n_resamples, seed) for d, js in per_dimension.items() if js},
        }
    return out


def _rate(rates: Mapping[tuple[str, str], Share], a: str, b: str) -> Cell:
    if a == b:
        return Cell("-")
    if (a, b) not in rates:
        return figure("n/a", None, note="the two never met on a card")
    x = rates[(a, b)]
    if x.value is None:
        return Cell(f"n/a ({x.estimate.note})", x.estimate)
    return Cell(f"{x.cell()} ({x.of})", x.estimate)


def _strength(s: Strength | None) -> Cell:
    if s is None:
        return figure("n/a", None, note="no verdict on this dimension")
    if math.isnan(s.theta):
        text = f"n/a ({s.undefined})" if s.undefined else "n/a"
        return figure(text, None, n=s.verdicts, note=s.undefined, unit=UNIT)
    e = estimate(s.theta, s.interval, s.verdicts, UNIT)
    return Cell(format_estimate(e, 2), e)


def _rank_text(results: Mapping[str, Any]) -> str:
    """How the strengths are ranked, in words: by paired intervals, or by value without resamples."""
    rows = [s for res in results.values() for s in res["strengths"][ALL]]
    resampled = any(not math.isnan(s.interval.low) for s in rows)
    if not resampled:
        return "Rank: without resamples, by strength; equal strengths share a rank."
    return (
        "Rank: 1 + the number of targets whose strength is above this one's by a difference whose interval "
        "(the same resamples by card; with k targets, each of the k(k-1)/2 intervals at 1 - 0.05/m, "
        "Bonferroni, so that they hold together at 95%) excludes 0: targets that cannot be told apart share "
        "a rank."
    )


def pairwise_report(
    results: dict[str, Any], judge: str, dropped: Sequence[tuple[str, str, int]] = (), prior: float = PRIOR,
    judged: Sequence[Judged] = (),
) -> Report:  # fmt: skip
    """pairwise.md as a typed result, each table over every role-player (a column names it) and in a
    CSV of its own: position consistency, strengths (all dimensions, then each), win rates (all
    dimensions, then each), the cards left out and every verdict (`judged`)."""
    intro = (
        f"Pairwise preferences of judge `{judge}`: every pair of targets on every card both played, "
        "each dimension asked in both orders; two different answers are a tie. Every figure has a "
        "95% bootstrap interval resampled by {unit}."
    )
    if dropped:
        intro += f"\nLeft out: {len(dropped)} cards played by one target only (listed at the end)."
    dims = list(dict.fromkeys(d for res in results.values() for d in res["strengths"] if d != ALL))
    columns = [label(d) for d in dims]  # each dimension's paper name: Expression, not diversity
    consistency_rows, strength_rows, rate_rows = [], [], []
    best: set[tuple[int, str]] = set()  # the strongest where shown stronger than every other target
    for roleplayer, res in results.items():
        c: Consistency = res["consistency"]
        consistency_rows.append([
            roleplayer, Cell(f"{c.rate.cell()} of {c.rate.of} pairs", c.rate.estimate),
            Cell(f"{c.first.cell()} of {c.first.of} answers", c.first.estimate), c.unread,
        ])  # fmt: skip
        by_dim = {d: {s.target: s for s in rows} for d, rows in res["strengths"].items()}
        targets = [s.target for s in res["strengths"][ALL]]
        for s in res["strengths"][ALL]:
            shown = [s, *(by_dim.get(d, {}).get(s.target) for d in dims)]  # strength, then per dimension
            best |= {(len(strength_rows), c) for c, x in zip(["strength", *columns], shown, strict=True)
                     if x is not None and x.best}  # fmt: skip
            strength_rows.append(
                [roleplayer, "n/a" if s.rank is None else s.rank, s.target, *map(_strength, shown[:1]),
                 s.verdicts, *map(_strength, shown[1:])]
            )  # fmt: skip
        rates = res["win_rates"]
        rate_rows += [
            [roleplayer, a, b, *(_rate(rates.get(d, {}), a, b) for d in (ALL, *dims))]
            for a in targets
            for b in targets
            if a != b
        ]
    blocks: list[Block] = [
        Text(intro),
        Heading("Bradley-Terry strengths"),
        Text(
            f"Log scale, centred; a prior of {prior:g} pseudo-win each way between every two targets; over "
            "all dimensions (ranked), then per dimension."
        ),
        Table.of(
            ["role-player", "rank", "target", "strength", "verdicts", *columns],
            strength_rows,
            csv="strengths.csv",
            name="strengths",
            metrics=dict.fromkeys(["strength", *columns], STRENGTH),
            rank_within=["role-player"],
            chart=Chart(
                label=("target",),
                values=("strength", *columns),
                facet=("role-player",),
                reference=0.0,
                title=(
                    "Bradley-Terry strengths, all dimensions and each",
                    "Bradley-Terry 强度（全部维度及各维度）",
                ),
                axis=(
                    "strength (log scale, centred: 0 is the average target)",
                    "强度（对数尺度，居中：0 为平均水平）",
                ),
            ),
            best=best,
        ),
        Text(_rank_text(results)),
        Heading("Position consistency"),
        Text(
            "Of the pairs with both answers read, those judged the same both ways (the others count as "
            "ties); of the decisive answers, those that chose the conversation shown first (50%: no "
            "preference for a position); the pairs left out (an answer unread)."
        ),
        Table.of(
            ["role-player", "judged the same both ways", "chose the one shown first", "pairs left out"],
            consistency_rows,
            csv="consistency.csv",
            name="position consistency",
        ),
        Heading("Win rates"),
        Text(
            "A's share of the verdicts against B on the cards both played (a tie counts half; verdicts), "
            "over all dimensions, then per dimension."
        ),
        Table.of(
            ["role-player", "A", "B", ALL, *columns],
            rate_rows,
            csv="win_rates.csv",
            name="win rates",
            metrics=dict.fromkeys([ALL, *columns], WIN_RATE),
        ),  # fmt: skip
    ]
    if dropped:
        blocks += [
            Heading("Cards left out"),
            Table.of(
                ["role-player", "language", "card"],
                [list(d) for d in dropped],
                csv="dropped_cards.csv",
                name="cards left out",
            ),  # fmt: skip
        ]
    blocks += [
        Heading("Every verdict"),
        Text(
            "Per card, pair and dimension: the verdict (the winner, a tie, or none: an answer unread) and "
            "whether both orders gave the same result."
        ),
        Table.of(
            ["role-player", "language", "card", "x", "y", "dimension", "result", "consistent"],
            [
                [
                    j.pair.roleplayer,
                    j.pair.language,
                    j.pair.card_id,
                    j.pair.x,
                    j.pair.y,
                    label(j.dimension),
                    j.verdict.result or "",
                    "" if j.verdict.consistent is None else j.verdict.consistent,
                ]
                for j in judged
            ],
            csv="verdicts.csv",
            name="verdicts",
        ),  # fmt: skip
    ]
    unit = resampled_units(u for b in blocks if isinstance(b, Table) for u in [b.resampled()] if u)
    blocks[0] = Text(intro.replace("{unit}", unit or "nothing"))  # the words read from the figures
    return Report("pairwise", tuple(blocks))


def write_report(
    out: Path, judged: Sequence[Judged], dimensions: Sequence[str], judge: str, n_resamples: int, seed: int,
    dropped: Sequence[tuple[str, str, int]] = (), prior: float = PRIOR,
) -> dict[str, Any]:  # fmt: skip
    """pairwise.md, pairwise.result.json and each table's CSV (strengths.csv, win_rates.csv,
    verdicts.csv, ...), all by `esc.reports.result.write_result`."""
    results = report(judged, dimensions, n_resamples, seed, prior)
    markdown = write_result(out, pairwise_report(results, judge, dropped, prior, judged))
    return {"markdown": markdown, "results": results}
