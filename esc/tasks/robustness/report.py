"""The robustness report (`rank.py mode=robustness`): which chatbot still helps when the seeker is hard
to help, and whether the role-player played the hard seeker at all.

Per language and role-player (and the run's one judge):

- **Scores per profile**: Table 2's Average and dimensions for every target and seeker profile
  (`esc.tasks.score.leaderboard.leaderboard` on each profile's judgments: intervals by role card).
- **Change from the cooperative seeker**, the headline: per target and hard profile, the profile's
  score minus the cooperative seeker's on the same cards, on the Average and each dimension
  (`esc.reports.paired.paired_differences`: each card's value the mean of its dialogues, each card
  weighted once, bootstrap by card, n the cards both seekers were played on, the cards only one was
  played on left out and counted). A target's m hard profiles are one family: each of its intervals
  is at 1 - 0.05/m (Bonferroni), so that they hold together at 95%. The table's forest plot has a
  line at 0; one sentence per target and profile follows the table (the site's overview shows it).
- **Ranking under each profile**: the targets' ranks on the Average within each profile (`tied_ranks`
  from the paired differences between the targets, Bonferroni over the group's pairs, as Table 2),
  beside their cooperative ranks, and where a rank moves.
- **Largest drop** of each target: the profile and measure whose change is lowest, with its interval.
- **Adherence**: per role-player and hard profile, the share of the profile's seeker messages its
  question was answered "yes" for, beside the cooperative seeker's share on the same question and
  cards, and their difference paired by card (95%). A profile whose difference's interval does not
  lie above 0 is **not played**: every figure of that profile says so (a column, and the sentences),
  since a chatbot's change then measures a seeker the role-player did not play.

Every table is written by `esc.reports.result.write_result` (md, result.json, one CSV each); every
judgment is in the run log (OUT/run.json).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.prompts.seekers import COOPERATIVE, profile_names
from esc.reports.bootstrap import NO_INTERVAL, card_unit_name, estimate, ratio_interval, share_figure
from esc.reports.chart_spec import Chart
from esc.reports.estimate import Estimate, format_estimate
from esc.reports.paired import Difference, family_level, paired_difference, paired_differences, tied_ranks
from esc.reports.result import Block, Cell, Heading, Report, Table, Text, write_result
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.rubrics import TABLE_2_ORDER, dimension
from esc.scoring.store import ScoreRecord
from esc.tasks.robustness.adherence import YES, Message
from esc.tasks.robustness.metrics import ADHERENCE, ADHERENCE_CHANGE, CHANGE
from esc.tasks.score.leaderboard import (
    AVERAGE_KEY,
    SCALE,
    Row,
    average_label,
    card_values,
    leaderboard,
    paired_rows,
)
from esc.tasks.score.metrics import AVERAGE, DIMENSION

PLAYED, NOT_PLAYED, BASELINE = "played", "not played", "baseline"
UNIT = "role card"

Group = tuple[str, str, str]  # (language, role-player, judge)


def profile_order(name: str) -> tuple[int, str]:
    """The cooperative seeker first, then the hard profiles in the registry's order."""
    names = profile_names()
    return (names.index(name), name) if name in names else (len(names), name)


# --- adherence ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Answer:
    """One adherence answer: `question` (a hard profile) asked of `message`."""

    message: Message
    question: str
    record: ScoreRecord

    @property
    def yes(self) -> bool | None:
        return None if self.record.status != VALID else self.record.score == YES


@dataclasses.dataclass(frozen=True)
class Adherence:
    """One hard profile played by one role-player in one language: its question's yes-share on the
    profile's seeker messages (`rate`), on the cooperative seeker's messages of the same cards
    (`baseline`), and the paired difference by card in percentage points."""

    language: str
    roleplayer: str
    profile: str
    rate: Cell
    baseline: Cell
    difference: Difference
    messages: int  # the profile's messages with a valid answer
    baseline_messages: int

    @property
    def played(self) -> bool:
        """The difference's interval lies above 0: the profile's messages show it more often than the
        cooperative seeker's (no interval, or one that holds 0: not shown played)."""
        return self.difference.sign > 0

    @property
    def verdict(self) -> str:
        return PLAYED if self.played else NOT_PLAYED


def _share(
    answers: Sequence[Answer], n_resamples: int, seed: int
) -> tuple[Cell, dict[Hashable, list[float]]]:
    """The share of `answers` with a valid "yes", its interval by card (at 0% or 100% the exact one,
    `share_figure`), the answers not read left out; and each card's valid answers (1 yes, 0 no)."""
    valid = [a for a in answers if a.yes is not None]
    units = [a.message.unit for a in valid]
    yes = [float(bool(a.yes)) for a in valid]
    by_card: dict[Hashable, list[float]] = defaultdict(list)
    for unit, flag in zip(units, yes, strict=True):
        by_card[unit].append(flag)
    left = ((INVALID, sum(a.record.status == INVALID for a in answers)),
            (FAILED, sum(a.record.status == FAILED for a in answers)))  # fmt: skip
    if not valid:
        e = dataclasses.replace(estimate(None, NO_INTERVAL, 0, UNIT, "no valid answer"), left_out=left)
        return Cell("n/a (no valid answer)", e), dict(by_card)
    interval = ratio_interval(units, yes, [1.0] * len(yes), n_resamples, seed) if n_resamples else NO_INTERVAL
    e = estimate(sum(yes) / len(yes), interval, len(valid), card_unit_name(units))
    text, e = share_figure(dataclasses.replace(e, left_out=left), len(valid), len(by_card), "message")
    return Cell(f"{text} ({int(sum(yes))}/{len(valid)})", e), dict(by_card)


def adherence(
    answers: Sequence[Answer], n_resamples: int, seed: int
) -> dict[tuple[str, str, str], Adherence]:
    """{(language, role-player, profile): Adherence} from every answer: a profile's question asked of
    its own dialogues' messages and of the cooperative seeker's on the same cards."""
    groups: dict[tuple[str, str, str], dict[bool, list[Answer]]] = defaultdict(lambda: {True: [], False: []})
    for a in answers:
        own = a.message.profile == a.question  # else the cooperative seeker's message, the baseline
        groups[(a.message.language, a.message.roleplayer, a.question)][own].append(a)
    out = {}
    for key in sorted(groups, key=lambda k: (k[0], k[1], profile_order(k[2]))):
        mine, theirs = groups[key][True], groups[key][False]
        rate, by_card = _share(mine, n_resamples, seed)
        baseline, baseline_by_card = _share(theirs, n_resamples, seed)
        difference = paired_difference(by_card, baseline_by_card, n_resamples, seed, unit=UNIT, scale=100.0)
        out[key] = Adherence(
            *key, rate, baseline, difference, sum(a.yes is not None for a in mine),
            sum(a.yes is not None for a in theirs),
        )  # fmt: skip
    return out


Verdicts = Mapping[tuple[str, str, str], Adherence]  # (language, role-player, profile) -> its adherence


# --- scores and changes ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Change:
    """A target's scores with a hard profile minus its scores with the cooperative seeker, on the
    cards both were played on (`differences`: measure -> Difference, 0-100), each interval at the
    level of a family of `family` profiles (the target's hard profiles in its group)."""

    language: str
    roleplayer: str
    judge: str
    target: str
    profile: str
    differences: dict[str, Difference]
    family: int
    cooperative: Row
    row: Row

    @property
    def group(self) -> Group:
        return (self.language, self.roleplayer, self.judge)

    @property
    def cards(self) -> int:
        """The cards paired on the Average (else the most of any measure)."""
        average = self.differences[AVERAGE_KEY].estimate.n or 0
        return average or max((d.estimate.n or 0 for d in self.differences.values()), default=0)


def score_rows(
    scores: Mapping[str, Sequence[ScoreRecord]], n_resamples: int, seed: int
) -> dict[str, list[Row]]:
    """Table 2's rows of each profile's judgments: {profile: [Row]} (one row per target, role-player,
    language and judge)."""
    return {p: leaderboard(records, n_resamples, seed) for p, records in scores.items() if records}


def _row_key(row: Row) -> tuple[str, str, str, str]:
    return (row.language, row.roleplayer, row.judge, row.target)


def changes(rows: Mapping[str, Sequence[Row]], n_resamples: int, seed: int) -> list[Change]:
    """Every (target, hard profile) with a cooperative row in the same language, role-player and
    judge: the paired differences profile - cooperative, each target's intervals at 1 - 0.05/m for
    its m hard profiles (Bonferroni)."""
    cooperative = {_row_key(r): r for r in rows.get(COOPERATIVE, [])}
    hard: dict[tuple[str, str, str, str], list[tuple[str, Row]]] = defaultdict(list)
    for profile in sorted(rows, key=profile_order):
        if profile == COOPERATIVE:
            continue
        for row in rows[profile]:
            if _row_key(row) in cooperative:
                hard[_row_key(row)].append((profile, row))
    out = []
    for key in sorted(hard):
        base = cooperative[key]
        baseline = card_values(base)  # once per target, not once per profile and use
        family = len(hard[key])
        for profile, row in hard[key]:
            mine = card_values(row)
            units = {card for v in (mine, baseline) for cs in v.values() for card in cs}
            unit = card_unit_name(units) or UNIT
            diffs = paired_differences(mine, baseline, n_resamples, seed, family_level(family), unit, SCALE)
            out.append(Change(*key, profile, diffs, family, base, row))
    return out


def measures(rows: Mapping[str, Sequence[Row]]) -> list[tuple[str, str]]:
    """(measure key, column) in Table 2's order: the Average (labelled by what it averages), then
    each dimension the run judged."""
    any_row = next((r for rs in rows.values() for r in rs), None)
    judged = any_row.average_of if any_row else ()
    keys = [k for k in TABLE_2_ORDER if k in judged]
    return [(AVERAGE_KEY, average_label(judged)), *((k, dimension(k).paper_name) for k in keys)]


def signed(e: Estimate, digits: int = 1) -> str:
    """A change as a cell reads it: "+12.5 [3.1, 20.0]", "-7.5 [...]", "n/a (why)"."""
    if e.shown()[0] is None:
        return f"n/a ({e.why_not()})" if e.why_not() else "n/a"
    text = format_estimate(e, digits)
    return f"+{text}" if (e.value or 0.0) > 0 and not text.startswith("0.0 ") else text


def _change_cell(d: Difference) -> Cell:
    return Cell(signed(d.estimate), d.estimate)


def _left_out(d: Difference) -> str:
    left = [f"{n} card{'s' if n != 1 else ''} ({why})" for why, n in d.estimate.left_out if n]
    return "; ".join(left) or "none"


def _score_cell(e: Estimate) -> Cell:
    text = format_estimate(e, 2, interval_digits=1)
    if e.shown()[0] is None and e.note and text == "n/a":
        text += f" ({e.note})"
    return Cell(text, e)


def _drop_word(d: Difference) -> str:
    return {-1: "a drop", 1: "a rise", 0: "not told apart from no change"}[d.sign]


# --- the report -----------------------------------------------------------------------------------


def played_label(verdicts: Verdicts, language: str, roleplayer: str,
                 profile: str) -> str:  # fmt: skip
    """What the "Adherence" column says of a profile: baseline (the cooperative seeker), played or not
    played (no adherence measured counts as not played)."""
    if profile == COOPERATIVE:
        return BASELINE
    found = verdicts.get((language, roleplayer, profile))
    return found.verdict if found is not None else NOT_PLAYED


def _where(groups: set[tuple[str, str]], language: str, roleplayer: str) -> str:
    return f"{language}, role-player {roleplayer}: " if len(groups) > 1 else ""


def robustness_report(
    rows: Mapping[str, Sequence[Row]],
    found: Sequence[Change],
    verdicts: Verdicts,
    n_resamples: int,
    seed: int,
) -> Report:
    """robustness.md as a typed result (see the module docstring)."""
    columns = measures(rows)
    names = [name for _, name in columns]
    average = columns[0][1]
    groups = {(c.language, c.roleplayer) for c in found} | {(r.language, r.roleplayer) for rs in rows.values()
                                                               for r in rs}  # fmt: skip
    most = max((c.family for c in found), default=1)
    family = (
        "95% intervals, one hard profile per target"
        if most == 1
        else f"intervals at 1 - 0.05/m for a target's m hard profiles (Bonferroni, here m up to {most}: "
        f"each at {family_level(most):.1%}), so that a target's intervals hold together at 95%"
    )

    def played(c: Change) -> str:
        return played_label(verdicts, c.language, c.roleplayer, c.profile)

    change_table = Table.of(
        ["Lang", "Role-player", "Target", "Profile", "Adherence", *names, "cards", "left out"],
        [
            [c.language, c.roleplayer, c.target, c.profile, played(c),
             *(_change_cell(c.differences[k]) for k, _ in columns), c.cards,
             _left_out(c.differences[AVERAGE_KEY])]
            for c in found
        ],
        csv="robustness_changes.csv",
        name="change from the cooperative seeker",
        metrics=dict.fromkeys(names, CHANGE),
        chart=Chart(
            label=("Target", "Profile"), values=tuple(names), facet=("Lang", "Role-player"), reference=0.0,
            title=("Change from the cooperative seeker (0-100), by role card",
                   "相对于合作型求助者的变化（0-100），按角色卡"),
            axis=("profile - cooperative (0-100)", "该类型 - 合作型（0-100）"),
        ),
    )  # fmt: skip
    blocks: list[Block] = [
        Text(
            "How each chatbot's scores change when the seeker is hard to help (docs/seekers.md): per "
            "language, role-player and target, its score with a hard seeker profile minus its score with "
            "the cooperative seeker on the cards both were played on (0-100; each card's value the mean of "
            f"its dialogues, each card weighted once; bootstrap resampled by role card; {family}). "
            "Adherence: whether the role-player played the profile (the table Adherence below); a profile "
            "marked not played was not shown played, and its figures do not measure that kind of seeker."
        ),
        change_table,
        Text(_lead(found, verdicts, average, groups)),
    ]
    blocks += _scores_blocks(rows, verdicts, columns)
    blocks += _rank_blocks(rows, verdicts, n_resamples, seed, average, groups)
    blocks += _drop_blocks(found, verdicts, columns, groups)
    blocks += _adherence_blocks(verdicts)
    return Report("robustness", tuple(blocks))


def _lead(found: Sequence[Change], verdicts: Verdicts, average: str,
          groups: set[tuple[str, str]]) -> str:  # fmt: skip
    """One sentence per target and hard profile: the change of the Average, and whether it was played."""
    if not found:
        return "No target was played by both the cooperative seeker and a hard profile: no change to show."
    lines = []
    for c in found:
        d = c.differences[AVERAGE_KEY]
        before = c.cooperative.average.estimate.shown()[0]
        after = c.row.average.estimate.shown()[0]
        scores = (
            f" ({before:.1f} with the cooperative seeker, {after:.1f} with this one)"
            if before is not None and after is not None
            else ""
        )
        verdict = played_label(verdicts, c.language, c.roleplayer, c.profile)
        tag = (
            " (played)"
            if verdict == PLAYED
            else " (NOT PLAYED: the role-player was not shown to play this profile, see Adherence; the "
            "change does not measure this kind of seeker)"
        )
        if d.estimate.shown()[0] is None:
            said = f"no paired {average} ({d.estimate.why_not() or 'n/a'})"
        else:
            n = d.estimate.n
            said = (
                f"its {average} changes by {signed(d.estimate)}{scores} over {n} card{'s' if n != 1 else ''}"
                f": {_drop_word(d)}"
            )
        where = _where(groups, c.language, c.roleplayer)
        lines.append(f"- {where}{c.target} with the {c.profile} seeker{tag}: {said}.")
    return "Each target with each hard seeker, against the cooperative seeker:\n\n" + "\n".join(lines)


def _scores_blocks(rows: Mapping[str, Sequence[Row]], verdicts: Verdicts,
                   columns: Sequence[tuple[str, str]]) -> list[Block]:  # fmt: skip
    ordered = sorted(
        ((p, r) for p, rs in rows.items() for r in rs),
        key=lambda pr: (pr[1].language, pr[1].roleplayer, pr[1].target, profile_order(pr[0]), pr[1].judge),
    )
    names = [name for _, name in columns]
    metrics = {name: AVERAGE if key == AVERAGE_KEY else DIMENSION[key] for key, name in columns}

    def score(row: Row, key: str) -> Cell:
        return _score_cell(row.average.estimate if key == AVERAGE_KEY else row.cells[key].estimate)

    table = Table.of(
        ["Lang", "Role-player", "Target", "Profile", "Adherence", *names, "n"],
        [
            [r.language, r.roleplayer, r.target, p, played_label(verdicts, r.language, r.roleplayer, p),
             *(score(r, k) for k, _ in columns), r.dialogues]
            for p, r in ordered
        ],
        csv="robustness_scores.csv",
        name="scores per profile",
        metrics=metrics,
    )  # fmt: skip
    return [
        Heading("Scores per profile"),
        Text(
            "Table 2 for every target and seeker profile: mean/4 x 100 over the valid judgments, 95% "
            "bootstrap intervals resampled by role card (each with all its dialogues); n: dialogues."
        ),
        table,
    ]


def _rank_blocks(
    rows: Mapping[str, Sequence[Row]], verdicts: Verdicts, n_resamples: int,
    seed: int, average: str, groups: set[tuple[str, str]],
) -> list[Block]:  # fmt: skip
    ranks: dict[tuple[str, str, str, str], dict[str, int | None]] = {}  # (profile, *group) -> target -> rank
    averages: dict[tuple[str, str, str, str], dict[str, Cell]] = {}
    for profile, members in rows.items():
        by_group: dict[Group, list[Row]] = defaultdict(list)
        for row in members:
            by_group[(row.language, row.roleplayer, row.judge)].append(row)
        for group, group_rows in by_group.items():
            pairs = paired_rows(group_rows, n_resamples, seed)
            values = {r.target: r.average.estimate.shown()[0] for r in group_rows}
            between = {(p.a, p.b): p.differences[AVERAGE_KEY] for p in pairs}
            ranks[(profile, *group)] = tied_ranks(values, between)
            averages[(profile, *group)] = {r.target: _score_cell(r.average.estimate) for r in group_rows}
    table_rows, sentences = [], []
    for key in sorted(ranks, key=lambda k: (k[1], k[2], k[3], profile_order(k[0]))):
        profile, language, roleplayer, judge = key
        before = ranks.get((COOPERATIVE, language, roleplayer, judge), {})
        moved = []
        for target, rank in sorted(ranks[key].items(), key=lambda tr: (tr[1] is None, tr[1] or 0, tr[0])):
            was = before.get(target)
            if profile == COOPERATIVE:
                change = ""
            elif rank is None or was is None:
                change = "n/a"
            else:
                change = "same" if rank == was else f"{'down' if rank > was else 'up'} {abs(rank - was)}"
                if rank != was:
                    moved.append(f"{target} {was} -> {rank}")
            table_rows.append([
                language, roleplayer, profile, played_label(verdicts, language, roleplayer, profile), target,
                averages[key][target], "n/a" if rank is None else str(rank),
                "n/a" if was is None else str(was), change,
            ])  # fmt: skip
        if profile != COOPERATIVE and len(ranks[key]) > 1:
            where = _where(groups, language, roleplayer)
            tag = "" if played_label(verdicts, language, roleplayer, profile) == PLAYED else " (not played)"
            said = (
                f"the ranking changes: {', '.join(moved)}" if moved else "the ranking is the cooperative one"
            )
            sentences.append(f"- {where}with the {profile} seeker{tag}: {said}.")
    table = Table.of(
        ["Lang", "Role-player", "Profile", "Adherence", "Target", average, "Rank", "Rank (cooperative)",
         "Rank change"],
        table_rows,
        csv="robustness_ranks.csv",
        name="ranking per profile",
        metrics={average: AVERAGE},
    )  # fmt: skip
    blocks: list[Block] = [
        Heading("Ranking under each profile"),
        Text(
            f"Rank: 1 + the targets (same profile, language, role-player) ahead on the {average} by a paired "
            "difference whose interval excludes 0 (bootstrap by role card, Bonferroni over the pairs of a "
            "group, as Table 2); targets that cannot be told apart share a rank. Rank change: against the "
            "same target's rank with the cooperative seeker."
        ),
        table,
    ]
    if sentences:
        blocks.append(
            Text("Where the ranking changes from the cooperative seeker's:\n\n" + "\n".join(sentences))
        )
    return blocks


def _drop_blocks(
    found: Sequence[Change],
    verdicts: Verdicts,
    columns: Sequence[tuple[str, str]],
    groups: set[tuple[str, str]],
) -> list[Block]:
    named = dict(columns)
    by_target: dict[tuple[str, str, str, str], list[Change]] = defaultdict(list)
    for c in found:
        by_target[(c.language, c.roleplayer, c.judge, c.target)].append(c)
    rows, sentences = [], []
    for (language, roleplayer, _, target), mine in sorted(by_target.items()):
        candidates = [
            (c, key, c.differences[key])
            for c in mine
            for key in named
            if c.differences[key].estimate.shown()[0] is not None
        ]
        lowest = min(candidates, key=lambda x: float(x[2].estimate.shown()[0] or 0.0), default=None)
        where = _where(groups, language, roleplayer)
        if lowest is None or float(lowest[2].estimate.shown()[0] or 0.0) >= 0:
            rows.append([language, roleplayer, target, "none", "", "", Cell("no drop")])
            sentences.append(f"- {where}{target}: no measure drops with any hard profile.")
            continue
        c, key, d = lowest
        verdict = played_label(verdicts, language, roleplayer, c.profile)
        rows.append([language, roleplayer, target, c.profile, verdict, named[key], _change_cell(d)])
        tag = "" if verdict == PLAYED else " (not played)"
        sentences.append(
            f"- {where}{target}: {named[key]} with the {c.profile} seeker{tag}, {signed(d.estimate)} over "
            f"{d.estimate.n} cards ({_drop_word(d)})."
        )
    table = Table.of(
        ["Lang", "Role-player", "Target", "Profile", "Adherence", "Measure", "Change"],
        rows,
        csv="robustness_drops.csv",
        name="largest drop",
        metrics={"Change": CHANGE},
    )
    return [
        Heading("Largest drop"),
        Text(
            "Each target's lowest change from the cooperative seeker over its hard profiles and every "
            "measure (the Average and each dimension), with its interval (as in the first table)."
        ),
        table,
        Text("\n".join(sentences) or "No change to show."),
    ]


def _adherence_blocks(verdicts: Verdicts) -> list[Block]:
    rate, base, diff = "yes with the profile", "yes with the cooperative seeker", "difference (pp)"
    table = Table.of(
        ["Lang", "Role-player", "Profile", rate, base, diff, "cards", "messages", "Verdict"],
        [
            [a.language, a.roleplayer, a.profile, a.rate, a.baseline, _change_cell(a.difference),
             a.difference.estimate.n or 0, f"{a.messages} / {a.baseline_messages}", a.verdict]
            for a in verdicts.values()
        ],
        csv="robustness_adherence.csv",
        name="adherence",
        metrics={rate: ADHERENCE, base: ADHERENCE, diff: ADHERENCE_CHANGE},
        chart=Chart(
            label=("Profile",), values=(diff,), facet=("Lang", "Role-player"), reference=0.0,
            title=("Adherence: the profile's yes-share minus the cooperative seeker's (percentage points)",
                   "遵循度：该类型的“是”比例减去合作型求助者的（百分点）"),
            axis=("profile - cooperative (pp)", "该类型 - 合作型（百分点）"),
        ),
    )  # fmt: skip
    lines = [
        f"- {a.language}, role-player {a.roleplayer}, {a.profile}: {a.verdict} ("
        f"{signed(a.difference.estimate)} points over {a.difference.estimate.n or 0} cards)."
        for a in verdicts.values()
    ]
    return [
        Heading("Adherence"),
        Text(
            "Did the role-player play the profile? Each hard profile's yes/no question "
            "(esc/prompts/seekers.yaml) was asked by the judge of every seeker message of the profile's "
            "dialogues, and of the cooperative seeker's messages by the same role-player on the same cards "
            "(the baseline: a cooperative seeker also turns down a suggestion now and then). The shares are "
            "of the validly answered messages, 95% intervals by role card (messages: the profile's / the "
            "cooperative seeker's); the difference is paired by card (each card's share, each card weighted "
            "once), a 95% interval. Played: the difference's interval lies above 0; otherwise not played, "
            "and every figure of that profile in this report says so."
        ),
        table,
        Text("\n".join(lines) or "No hard profile's adherence was measured."),
    ]


def write_report(
    out: Path, scores: Mapping[str, Sequence[ScoreRecord]], answers: Sequence[Answer], n_resamples: int,
    seed: int,
) -> dict[str, Any]:  # fmt: skip
    """robustness.md, .result.json and its CSVs (`write_result`) from each profile's score records and
    the adherence answers; the figures the result reads back."""
    rows = score_rows(scores, n_resamples, seed)
    verdicts = adherence(answers, n_resamples, seed)
    found = changes(rows, n_resamples, seed)
    markdown = write_result(out, robustness_report(rows, found, verdicts, n_resamples, seed))
    return {"markdown": markdown, "changes": found, "adherence": verdicts, "rows": rows}
