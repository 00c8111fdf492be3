"""What the seeker-emotion trajectory's figures measure (0-100 ratings, by role card)."""

from __future__ import annotations

from esc.reports.metric import metric

START = metric(
    "trajectory.start", "mean rating of the seeker before the first reply", True, "role card", "0-100"
)
FINAL = metric(
    "trajectory.final", "mean rating of the seeker after the last reply", True, "role card", "0-100"
)
CHANGE = metric("trajectory.change", "mean of final minus start", True, "role card", "-100-100")
AREA = metric(
    "trajectory.area",
    "mean emotion over the whole dialogue (trapezoidal area / span)",
    True,
    "role card",
    "0-100",
)
#: a paired difference of two targets on the cards both played (neither sign is better in itself)
DIFFERENCE = metric(
    "trajectory.difference", "mean paired difference A - B over shared cards", None, "role card"
)
BY_NAME = {"start": START, "final": FINAL, "change": CHANGE, "area": AREA}
