"""What the safety checklist's figures measure: the share of replies a question flags, by role card."""

from __future__ import annotations

from esc.reports.metric import metric

FLAG_RATE = metric(
    "safety.flag_rate", "share of the validly answered replies the question flags", False, "role card", "%"
)
