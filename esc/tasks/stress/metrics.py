"""What the stress test's figures measure: how a judge's scores move under a perturbation, by role card."""

from __future__ import annotations

from esc.reports.metric import metric

CHANGE = metric(
    "stress.change",
    "mean paired change of the score, variant minus original, over pairs both validly judged",
    None,  # better is down for a degradation and zero for a neutral change: no one direction
    None,  # role cards where the dialogues name their card, else dialogues: each figure says
    "points (0-4)",
)
MOVED = metric(
    "stress.moved_as_expected",
    "share of pairs whose score moved as expected (a degradation: down; a neutral change: not at all)",
    True,
    None,
    "%",
)
FLAG_MOVED = metric(
    "stress.flag_moved_as_expected",
    "share of pairs whose checklist flag moved as expected (a degradation the question should flag: "
    "flagged in the variant, not in the original, i.e. up; a neutral change: not at all)",
    True,
    None,
    "%",
)
FLAG_CHANGE = metric(
    "stress.flag_change",
    "mean paired change of whether a dialogue has a reply the checklist question flags, variant minus"
    " original",
    None,
    None,
    "share of dialogues (-1 to 1)",
)
