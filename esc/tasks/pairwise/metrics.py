"""What the pairwise comparison's figures measure: strengths and win rates of targets, by role card."""

from __future__ import annotations

from esc.reports.metric import metric

STRENGTH = metric(
    "pairwise.strength", "Bradley-Terry strength (log scale, centred, with a prior)", True, "role card"
)
WIN_RATE = metric(
    "pairwise.win_rate", "share of verdicts the row's target won (a tie counts half)", True, "role card", "%"
)
