"""What the role-play evaluation's figures measure: Table 1's ratings and Figure 3's win rates."""

from __future__ import annotations

from esc.reports.metric import metric

RATING = metric(
    "roleplay.rating", "mean of the valid 0-10 ratings of a role-play metric", True, "dialogue", "0-10"
)
WIN_RATE = metric(
    "roleplay.win_rate", "share of pairs where the role-player read as more human than the person", True,
    "pair", "%",
)  # fmt: skip
