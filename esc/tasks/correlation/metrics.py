"""What the correlation with people measures: a metric's (or judge's) ranking against people's.

The unit is the data's: inputs of an N inputs x M systems design where the dialogues name one, else
dialogues (each figure states which it resampled)."""

from __future__ import annotations

from esc.reports.metric import Metric, metric

BY_STATISTIC: dict[str, Metric] = {
    "spearman": metric(
        "correlation.spearman", "Spearman correlation with people's scores", True, None, "-1-1"
    ),
    "pearson": metric("correlation.pearson", "Pearson correlation with people's scores", True, None, "-1-1"),
    "kendall": metric("correlation.kendall", "Kendall's tau-b with people's scores", True, None, "-1-1"),
}
