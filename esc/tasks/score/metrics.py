"""What Table 2's figures measure: a dimension's score and the Average, each 0-100.

Their intervals resample role cards, and a dialogue whose records name no card is its own unit
(`esc.reports.bootstrap.card_units`): the unit is the data's, and each figure states it."""

from __future__ import annotations

from esc.reports.metric import Metric, metric
from esc.scoring.rubrics import dimensions

#: a dimension's score: the mean of its valid 0-4 judgments, divided by 4, times 100
DIMENSION: dict[str, Metric] = {
    d.key: metric(f"score.{d.key}", "mean of the valid 0-4 judgments, /4 x 100", True, None, "0-100")
    for d in dimensions()
}
AVERAGE = metric("score.average", "mean of the dimension means", True, None, "0-100")
#: target A's score minus target B's (a dimension, or the Average) over the role cards both played:
#: the mean of the per-card differences, each card's value the mean of its dialogues; a difference,
#: so neither direction is better (which of the two is ahead is its sign)
DIFFERENCE = metric(
    "score.paired_difference", "mean over the cards both played of (A's card mean - B's), 0-100", None, None,
    "0-100",
)  # fmt: skip
#: a jury member's offset from the other members on the judgments all read (0: no leniency): its
#: score minus the mean of the other judges' scores, averaged over those judgments
LENIENCY = metric(
    "score.leniency",
    "mean of (own score - the other judges' mean score), same judgments",
    None,
    None,
    "0-4",
)
#: how far the jury's members agree, by Krippendorff's level (`esc.tasks.score.jury.alpha_level`):
#: interval on expected scores (`jury.reading: expected`), ordinal on the stated 0-4 (`stated`); two
#: metrics, as two statistics, so the name a figure carries says which one it is
JURY_ALPHA = {
    "interval": metric(
        "score.jury_alpha", "Krippendorff's alpha (interval, expected scores) across the judges", True,
        None, "-1-1",
    ),
    "ordinal": metric(
        "score.jury_alpha_ordinal", "Krippendorff's alpha (ordinal, stated scores 0-4) across the judges",
        True, None, "-1-1",
    ),
}  # fmt: skip
