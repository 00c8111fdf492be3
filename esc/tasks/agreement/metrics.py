"""What the agreement with people measures: a judge's scores against human scores.

The unit is the data's: role cards where the annotations name the dialogue's card, else dialogues
(each figure states which it resampled)."""

from __future__ import annotations

from esc.reports.metric import Metric, metric

BY_NAME: dict[str, Metric] = {
    "acc": metric("agreement.acc", "share of items scored exactly as people did", True, None, "%"),
    "acc_soft": metric("agreement.acc_soft", "share of items within 1 of people's score", True, None, "%"),
    "qwk": metric("agreement.qwk", "quadratic-weighted Cohen's kappa", True, None, "-1-1"),
    "mae": metric("agreement.mae", "mean absolute difference from people's score", False, None, "0-4"),
    "spearman": metric("agreement.spearman", "Spearman correlation with people's scores", True, None, "-1-1"),
    "pearson": metric("agreement.pearson", "Pearson correlation with people's scores", True, None, "-1-1"),
    "kendall": metric("agreement.kendall", "Kendall's tau-b with people's scores", True, None, "-1-1"),
}
#: agreement among raters, or of a judge with one rater (Krippendorff's alpha, ordinal)
ALPHA = metric("agreement.alpha", "Krippendorff's alpha (ordinal)", True, None, "-1-1")
