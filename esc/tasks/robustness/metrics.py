"""What the robustness report's own figures measure: a target's change from the cooperative seeker,
and how often the role-player played a profile. (Its scores per profile are Table 2's figures, whose
metrics are mode=score's: `esc.tasks.score.metrics`.)"""

from __future__ import annotations

from esc.reports.metric import metric

#: a target's score with a hard seeker minus its score with the cooperative seeker (a dimension or the
#: Average) over the role cards both were played on: the mean of the per-card differences, each card's
#: value the mean of its dialogues; neither direction is "better" for the figure itself (a drop is the
#: chatbot's weakness, a rise is no merit of the measure), so none is marked
CHANGE = metric(
    "robustness.change",
    "mean over the cards both seekers played of (the profile's card mean - the cooperative seeker's), 0-100",
    None,
    None,
    "0-100",
)
#: the share of a role-player's seeker messages a profile's adherence question was answered "yes" for
#: (with the profile, or the cooperative seeker's messages on the same cards: the baseline)
ADHERENCE = metric(
    "robustness.adherence",
    "share of the validly answered seeker messages answered yes (the message shows the profile)",
    None,
    "role card",
    "%",
)
#: the profile's share minus the cooperative seeker's on the same question, paired by card (each card's
#: value its share of messages answered yes, each card weighted once): above 0, the profile was played
ADHERENCE_CHANGE = metric(
    "robustness.adherence_difference",
    "mean over the cards both seekers played of (the profile's card share - the cooperative seeker's), "
    "percentage points",
    True,
    "role card",
    "pp",
)
