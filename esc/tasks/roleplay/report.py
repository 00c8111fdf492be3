"""Role-play results as the paper reports them: Table 1 (the six metrics per role-player, on a 0-10
scale) and Figure 3 (how often a role-player's dialogue reads more like a real person than the
human dialogue its card came from), each with 95% bootstrap intervals.

Only valid judgments count; invalid and failed ones are counted per cell and never averaged in.
A pair counts in the win rate only when both orders were judged: its value is the mean of the two
(1: the role-player won both ways, 0.5: one each, the judge went by position, 0: lost both).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from esc.reports.bootstrap import mean_interval
from esc.reports.estimate import Estimate, format_estimate, interval_text, number_text
from esc.reports.result import Cell, Report, Table
from esc.scoring.judge import VALID
from esc.tasks.roleplay.metrics import RATING, WIN_RATE
from esc.tasks.roleplay.questions import ORDERS, PAIRWISE, metric_keys, roleplay_won

SCALE = 5.0  # 0-2 shown as 0-10, as Table 1 does


def _owner(dialogue_id: str) -> tuple[str, str]:
    roleplayer, language, _ = dialogue_id.split(":", 2)
    return roleplayer, language


def table1(records: Sequence[Any], n_resamples: int, seed: int) -> list[dict[str, Any]]:
    """One row per (role-player, language, metric) and an average row per (role-player, language)."""
    cells: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    invalid: dict[tuple[str, str, str], int] = defaultdict(int)
    for r in records:
        if r.dimension == PAIRWISE:
            continue
        key = (*_owner(r.dialogue_id), r.dimension)
        if r.status == VALID:
            cells[key].append(int(r.score))
        else:
            invalid[key] += 1
    rows = []
    owners = sorted({k[:2] for k in (*cells, *invalid)})
    for roleplayer, language in owners:
        per_dialogue: dict[str, list[float]] = defaultdict(list)
        for metric in metric_keys():
            values = np.array(cells.get((roleplayer, language, metric), []), dtype=float) * SCALE
            low, high = mean_interval(values, n_resamples, seed)
            rows.append(
                _row(
                    roleplayer, language, metric, values, (low, high), invalid[(roleplayer, language, metric)]
                )
            )
        for r in records:
            if (
                r.dimension != PAIRWISE
                and r.status == VALID
                and _owner(r.dialogue_id) == (roleplayer, language)
            ):
                per_dialogue[r.dialogue_id].append(r.score * SCALE)
        averages = np.array([np.mean(v) for v in per_dialogue.values()])
        n_invalid = sum(invalid[(roleplayer, language, m)] for m in metric_keys())
        rows.append(
            _row(
                roleplayer,
                language,
                "average",
                averages,
                mean_interval(averages, n_resamples, seed),
                n_invalid,
            )
        )
    return rows


def _row(roleplayer: str, language: str, metric: str, values: np.ndarray, ci: tuple[float, float],
         n_invalid: int) -> dict[str, Any]:  # fmt: skip
    return {
        "roleplayer": roleplayer,
        "language": language,
        "metric": metric,
        "n": len(values),
        "mean": float(values.mean()) if len(values) else float("nan"),
        "ci_low": ci[0],
        "ci_high": ci[1],
        "invalid": n_invalid,
    }


def win_rates(records: Sequence[Any], n_resamples: int, seed: int) -> list[dict[str, Any]]:
    """Per (role-player, language): the share of pairs it won against the human dialogue."""
    pairs: dict[str, dict[str, int]] = defaultdict(dict)
    incomplete: dict[tuple[str, str], int] = defaultdict(int)
    for r in records:
        if r.dimension != PAIRWISE:
            continue
        pair, _, order = r.dialogue_id.rpartition(":")
        if r.status == VALID:
            pairs[pair][order] = int(r.score)
        else:
            incomplete[_owner(pair)] += 1
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    consistent: dict[tuple[str, str], int] = defaultdict(int)
    for pair, votes in pairs.items():
        if set(votes) != set(ORDERS):
            incomplete[_owner(pair)] += 1
            continue
        wins = [roleplay_won(order, votes[order]) for order in ORDERS]
        values[_owner(pair)].append(sum(wins) / 2)
        consistent[_owner(pair)] += wins[0] == wins[1]
    rows = []
    for owner in sorted({*values, *incomplete}):
        v = np.array(values.get(owner, []))
        low, high = mean_interval(v, n_resamples, seed)
        rows.append(
            {
                "roleplayer": owner[0],
                "language": owner[1],
                "pairs": len(v),
                "win_rate": float(v.mean()) if len(v) else float("nan"),
                "ci_low": low,
                "ci_high": high,
                "position_consistent": consistent[owner] / len(v) if len(v) else float("nan"),
                "incomplete": incomplete.get(owner, 0),
            }
        )
    return rows


def table1_report(rows: Sequence[dict[str, Any]]) -> Report:
    """Table 1's layout: a row per role-player and language, a column per metric (mean [95% CI])."""
    metrics = [*metric_keys(), "average"]
    by_owner: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        by_owner[(r["roleplayer"], r["language"])][r["metric"]] = r

    def figure(r: dict[str, Any]) -> Cell:
        """The mean on 0-10 [95% interval, dialogues resampled]."""
        e = Estimate(r["mean"], r["ci_low"], r["ci_high"], r["n"], "dialogue")
        return Cell(format_estimate(e, 1), e)

    table = Table.of(
        ["role-player", "lang", *metrics, "invalid"],
        [
            [roleplayer, language, *(figure(cells[m]) for m in metrics), cells["average"]["invalid"]]
            for (roleplayer, language), cells in by_owner.items()
        ],
        csv="table1.csv",
        metrics=dict.fromkeys(metrics, RATING),
        rank_within=["lang"],
    )
    return Report("table1", (table,))


def winrate_report(rows: Sequence[dict[str, Any]]) -> Report:
    """Figure 3's win rates against the human dialogue, a row per role-player and language."""

    def rate(r: dict[str, Any]) -> Cell:
        """The share of pairs won, in percent [95% interval, pairs resampled]."""
        if not r["pairs"]:
            return Cell("n/a", Estimate(None, n=0, note="no pair"))
        e = Estimate(r["win_rate"], r["ci_low"], r["ci_high"], r["pairs"], "pair")
        return Cell(number_text(r["win_rate"], 1, 100) + "%" + interval_text(e.low, e.high, 1, 100), e)

    def consistent(r: dict[str, Any]) -> Cell:
        """The share of pairs won (or lost) both ways, no interval; n: the pairs."""
        if not r["pairs"]:
            return Cell("n/a", Estimate(None, n=0, note="no pair"))
        return Cell(
            f"{100 * r['position_consistent']:.0f}%", Estimate(r["position_consistent"], n=r["pairs"])
        )

    table = Table.of(
        ["role-player", "lang", "pairs", "win rate vs human [95% CI]", "position-consistent", "incomplete"],
        [[r["roleplayer"], r["language"], r["pairs"], rate(r), consistent(r), r["incomplete"]] for r in rows],
        csv="winrates.csv",
        metrics={"win rate vs human [95% CI]": WIN_RATE},
        rank_within=["lang"],
    )
    return Report("winrates", (table,))
