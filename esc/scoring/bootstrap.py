"""Paired percentile bootstrap intervals (scipy) that survive undefined resamples.

A correlation of a resample whose predictions are all equal is undefined (NaN). Those resamples are
left out of the percentiles instead of turning the whole interval into NaN; when more than half of
the resamples are undefined there is no honest interval, and NaN is returned.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

NAN_INTERVAL = (float("nan"), float("nan"))


def paired_intervals(
    x: np.ndarray, y: np.ndarray, statistic: Callable[..., object], n_resamples: int, seed: int
) -> list[tuple[float, float]]:
    """95% intervals of each value `statistic(x, y)` returns (a number or a 1-d array), pairs resampled."""
    from scipy.stats import bootstrap

    width = np.atleast_1d(np.asarray(statistic(x, y), dtype=float)).shape[0] if len(x) else 1
    if n_resamples <= 0 or len(x) < 2:
        return [NAN_INTERVAL] * width
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on degenerate resamples; handled below
        result = bootstrap(
            (x, y),
            statistic,
            paired=True,
            vectorized=False,
            n_resamples=n_resamples,
            method="percentile",
            random_state=np.random.default_rng(seed),
        )
    out = []
    for dist in np.atleast_2d(np.asarray(result.bootstrap_distribution, dtype=float)):
        dist = dist[~np.isnan(dist)]
        if len(dist) < n_resamples / 2:
            out.append(NAN_INTERVAL)
        else:
            low, high = np.percentile(dist, [2.5, 97.5])
            out.append((float(low), float(high)))
    return out


def mean_interval(values: np.ndarray, n_resamples: int, seed: int) -> tuple[float, float]:
    """`leaderboard.bootstrap_ci` of the mean, NaN (not None) without enough values or resamples."""
    from esc.scoring.leaderboard import bootstrap_ci

    if n_resamples <= 0:
        return NAN_INTERVAL
    low, high = bootstrap_ci(values, n_resamples=n_resamples, seed=seed)
    return NAN_INTERVAL if low is None or high is None else (low, high)
