"""How well a judge agrees with people (paper Table 4, and more): per dimension, predicted vs human.

- ACC and ACC_soft (within one point, as the paper's ACC_soft) over *all* items, an invalid or
  failed judgment counting as wrong, so no judge gains by not answering;
- quadratic-weighted Cohen's kappa (scikit-learn), MAE, Spearman, Pearson and Kendall (scipy) over
  the valid items, which are all that can be compared;
- every figure with a percentile bootstrap 95% interval (items resampled, pairs kept together);
- the invalid rate;
- trivial baselines beside the judges: the training split's majority score, and a least-squares
  fit of the human score on the dialogue's length (both fitted on the training split only).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.scoring.bootstrap import paired_intervals
from esc.scoring.rubrics import DIMENSION_KEYS, SCORES, dimension

METRICS = ("acc", "acc_soft", "qwk", "mae", "spearman", "pearson", "kendall")
LABELS = {
    "acc": "ACC",
    "acc_soft": "ACC_soft",
    "qwk": "QWK",
    "mae": "MAE",
    "spearman": "Spearman",
    "pearson": "Pearson",
    "kendall": "Kendall",
}
PERCENT = {"acc", "acc_soft"}  # reported x 100, as the paper
AVERAGE = "Aver."  # the mean over dimensions, as Table 4's last row


def _acc(pred: np.ndarray, human: np.ndarray) -> float:
    return float(np.mean(pred == human))


def _acc_soft(pred: np.ndarray, human: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - human) <= 1))


def _qwk(pred: np.ndarray, human: np.ndarray) -> float:
    from sklearn.metrics import cohen_kappa_score

    if len(set(pred.tolist()) | set(human.tolist())) < 2:
        return float("nan")
    return float(cohen_kappa_score(human, pred, weights="quadratic", labels=list(SCORES)))


def _mae(pred: np.ndarray, human: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - human)))


def _corr(kind: str) -> Callable[[np.ndarray, np.ndarray], float]:
    def corr(pred: np.ndarray, human: np.ndarray) -> float:
        from scipy import stats

        if len(pred) < 2 or np.all(pred == pred[0]) or np.all(human == human[0]):
            return float("nan")  # undefined for a constant series
        fn = {"spearman": stats.spearmanr, "pearson": stats.pearsonr, "kendall": stats.kendalltau}[kind]
        return float(fn(pred, human)[0])

    return corr


FUNCTIONS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "acc": _acc,
    "acc_soft": _acc_soft,
    "qwk": _qwk,
    "mae": _mae,
    "spearman": _corr("spearman"),
    "pearson": _corr("pearson"),
    "kendall": _corr("kendall"),
}


@dataclasses.dataclass
class Agreement:
    judge: str
    dimension: str
    n: int  # items with a human score
    n_invalid: int  # of them, judged invalid or failed
    values: dict[str, float]  # metric -> value
    intervals: dict[str, tuple[float, float]]  # metric -> 95% interval

    @property
    def invalid_rate(self) -> float:
        return self.n_invalid / self.n if self.n else float("nan")


def _interval(
    fn: Callable, pred: np.ndarray, human: np.ndarray, n_resamples: int, seed: int
) -> tuple[float, float]:
    return paired_intervals(pred, human, fn, n_resamples, seed)[0]


def agreement(
    judge: str,
    dim: str,
    predicted: Sequence[int | None],
    human: Sequence[int],
    n_resamples: int = 1000,
    seed: int = 0,
) -> Agreement:
    """Agreement of `predicted` (None: invalid or failed) with `human`, item by item."""
    if len(predicted) != len(human):
        raise ValueError("predicted and human scores differ in length")
    all_pred = np.array([-10 if p is None else p for p in predicted], dtype=float)  # None never matches
    all_human = np.array(human, dtype=float)
    ok = np.array([p is not None for p in predicted])
    pred, ref = all_pred[ok], all_human[ok]
    values, intervals = {}, {}
    for metric in METRICS:
        fn = FUNCTIONS[metric]
        x, y = (all_pred, all_human) if metric in ("acc", "acc_soft") else (pred, ref)
        values[metric] = fn(x, y) if len(x) else float("nan")
        intervals[metric] = _interval(fn, x, y, n_resamples, seed)
    return Agreement(judge, dim, len(human), int((~ok).sum()), values, intervals)


# --- baselines ------------------------------------------------------------------------------------


def majority_baseline(train_scores: Sequence[int]) -> int:
    """The most frequent training score (the higher one on a tie)."""
    counts = Counter(train_scores)
    return max(SCORES, key=lambda s: (counts.get(s, 0), s))


def length_baseline(train_lengths: Sequence[float], train_scores: Sequence[int]) -> Callable[[float], int]:
    """Least-squares line human ≈ a + b·length on the training split, rounded and clipped to 0-4."""
    x, y = np.asarray(train_lengths, float), np.asarray(train_scores, float)
    b, a = np.polyfit(x, y, 1) if len(set(x.tolist())) > 1 else (0.0, float(np.mean(y)))
    return lambda length: int(np.clip(np.rint(a + b * length), 0, 4))


# --- reports --------------------------------------------------------------------------------------


def _fmt(agreement_: Agreement, metric: str) -> str:
    value = agreement_.values[metric]
    if value is None or math.isnan(value):
        return "n/a"
    low, high = agreement_.intervals[metric]
    scale = 100 if metric in PERCENT else 1
    digits = 1 if metric in PERCENT else 3
    text = f"{value * scale:.{digits}f}"
    if not (math.isnan(low) or math.isnan(high)):
        text += f" [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"
    return text


def to_markdown(results: Sequence[Agreement], title: str = "") -> str:
    """Table 4's layout (dimension, judge, ACC, ACC_soft) plus the other figures and the invalid rate."""
    head = ["Dim.", "Judge", *(LABELS[m] for m in METRICS), "invalid", "n"]
    lines = [title, ""] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {k: i for i, k in enumerate(DIMENSION_KEYS)}
    judges = list(dict.fromkeys(r.judge for r in results))  # the caller's order: judge first, baselines after
    for r in sorted(results, key=lambda r: (order.get(r.dimension, 99), judges.index(r.judge))):
        name = dimension(r.dimension).short if r.dimension in order else r.dimension
        lines.append(
            "| "
            + " | ".join(
                [
                    name,
                    r.judge,
                    *(_fmt(r, m) for m in METRICS),
                    f"{r.n_invalid} ({r.invalid_rate:.0%})",
                    str(r.n),
                ]
            )
            + " |"
        )
    lines.append("")
    lines.append(
        "ACC and ACC_soft (within 1) in %, over all items (an invalid judgment counts as wrong); QWK, MAE "
        "and the correlations over valid items; [95% bootstrap interval]."
    )
    return "\n".join(lines) + "\n"


def write_csv(results: Sequence[Agreement], path: Path) -> None:
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["judge", "dimension", "metric", "value", "ci_low", "ci_high", "n", "n_invalid"])
        for r in results:
            for m in METRICS:
                low, high = r.intervals[m]
                writer.writerow(
                    [r.judge, r.dimension, m, _num(r.values[m]), _num(low), _num(high), r.n, r.n_invalid]
                )


def _num(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 6)


def summary(results: Sequence[Agreement]) -> dict[str, Any]:
    """JSON-ready: judge -> dimension -> metric -> {value, ci}."""
    out: dict[str, Any] = {}
    for r in results:
        out.setdefault(r.judge, {})[r.dimension] = {
            "n": r.n,
            "n_invalid": r.n_invalid,
            **{m: {"value": _num(r.values[m]), "ci": [_num(x) for x in r.intervals[m]]} for m in METRICS},
        }
    return out


def mean_rows(results: Sequence[Agreement]) -> list[Agreement]:
    """Per judge, the mean of each metric over its dimensions (Table 4's "Aver." row); no interval."""
    rows = []
    by_judge: dict[str, list[Agreement]] = {}
    for r in results:
        by_judge.setdefault(r.judge, []).append(r)
    for judge, group in by_judge.items():
        values = {
            m: float(np.nanmean([g.values[m] for g in group]))
            if any(not math.isnan(g.values[m]) for g in group)
            else float("nan")
            for m in METRICS
        }
        nan = (float("nan"), float("nan"))
        rows.append(
            Agreement(
                judge,
                AVERAGE,
                sum(g.n for g in group),
                sum(g.n_invalid for g in group),
                values,
                dict.fromkeys(METRICS, nan),
            )
        )
    return rows


def by_dimension(
    pairs: Mapping[str, Sequence[tuple[int | None, int]]], judge: str, n_resamples: int = 1000, seed: int = 0
) -> list[Agreement]:
    """Agreement per dimension from {dimension: [(predicted or None, human), ...]}."""
    return [
        agreement(judge, dim, [p for p, _ in items], [h for _, h in items], n_resamples, seed)
        for dim, items in pairs.items()
        if items
    ]
