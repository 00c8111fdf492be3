"""A jury of judges (`rank.py jury=...`): the pooled score, and how the judges differ.

Each member judges every (dialogue, dimension) into its own score files; nothing is averaged there.
From their records, on one reading of a judgment (`jury.reading`: `expected`, the expected score
where a judge gives probabilities and the stated one where it does not; or `stated`, the score each
judge stated, as Table 2 reads it):

- **pooled score**: per (dialogue, dimension), the mean (or median, `jury.pool`) of the members'
  readings, over the members whose judgment is valid; fewer than `jury.min_valid` valid members
  (default: all) make the pooled judgment invalid, counted like any invalid judgment. The pooled
  rows join the leaderboard as judge ``jury``; each member's own row there keeps Table 2's reading
  (stated scores), and the jury section compares everything on the jury's reading.
- **leniency**: per member, the mean of its reading minus the mean of the *other* members'
  readings on the same (dialogue, dimension), where every member is valid (0-4 scale; above 0: more
  lenient than the others; two judges 0.9 apart read +0.90 and -0.90), with a 95% bootstrap interval
  resampling role cards. (Before issue 62 it was the difference from the pooled score, which holds
  the judge itself: half that with two judges, under words that said "from the other judges".)
- **agreement**: Krippendorff's alpha between the members, per dimension (interval level on
  expected readings, ordinal on stated ones: `alpha_level`, and the metric its figures name says
  which), with an interval resampling cards; undefined (n/a) where the scores do not vary.
- **rankings**: per (role-player, language), each member's order of the targets by their average on
  the jury's reading, Kendall's tau between each member's order and the pooled one, and every pair
  of targets two members put in opposite orders. Every pair a member ordered counts: a target whose
  Average is n/a for the jury (a dimension with no pooled judgment) is named, with the pairs the
  members order and the jury does not, and a member's tau with the jury is n/a where the jury lacks a
  target the member ranks (a tau over the rest would call a judge that ranks that target first and
  one that ranks it last both in perfect agreement with the jury).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from esc.reports import result as result_
from esc.reports.bootstrap import (
    NO_INTERVAL,
    Interval,
    card_unit_name,
    card_units,
    estimate,
    expand,
    unit_index,
    unit_intervals,
)
from esc.reports.estimate import format_estimate, resampled_units
from esc.reports.paired import value_ranks
from esc.scoring.judge import INVALID, VALID
from esc.scoring.jury import JURY
from esc.scoring.rubrics import DIMENSION_KEYS, label
from esc.scoring.store import ScoreRecord
from esc.tasks.score.leaderboard import Row
from esc.tasks.score.metrics import JURY_ALPHA, LENIENCY


def _value(record: ScoreRecord, reading: str = "expected") -> float:
    """A valid judgment's score on the jury's reading (see the module docstring)."""
    if reading == "expected" and record.expected is not None:
        return float(record.expected)
    return float(record.score)


def reading_records(records: Sequence[ScoreRecord], reading: str) -> list[ScoreRecord]:
    """The records with each valid score replaced by its reading: the members' rows on the jury's scale."""
    return [dataclasses.replace(r, score=_value(r, reading)) if r.status == VALID else r for r in records]


def _by_item(records: Sequence[ScoreRecord]) -> dict[tuple[str, str], dict[str, ScoreRecord]]:
    items: dict[tuple[str, str], dict[str, ScoreRecord]] = defaultdict(dict)
    for r in records:
        items[r.key][r.judge] = r
    return items


def pooled_records(
    records: Sequence[ScoreRecord], members: Sequence[str], pool: str = "mean", min_valid: int | None = None,
    reading: str = "expected",
) -> list[ScoreRecord]:  # fmt: skip
    """One record per (dialogue, dimension) with judge ``jury`` (see the module docstring)."""
    combine = statistics.fmean if pool == "mean" else statistics.median
    need = len(members) if min_valid is None else int(min_valid)
    out = []
    for _, by_judge in sorted(_by_item(records).items()):
        first = next(iter(by_judge.values()))
        valid = [_value(r, reading) for j, r in by_judge.items() if j in members and r.status == VALID]
        base = {f: getattr(first, f) for f in ("dialogue_id", "dimension", "language", "target", "roleplayer",
                                                "card_id", "content_sha", "source")}  # fmt: skip
        prompt = {"pool": pool, "reading": reading, "members": list(members)}
        if len(valid) >= need and valid:
            value = float(combine(valid))
            out.append(
                ScoreRecord(**base, judge=JURY, prompt=prompt, status=VALID, score=value, expected=value)
            )
        else:
            error = f"{len(valid)} of {len(members)} judges gave a valid score (min_valid {need})"
            out.append(ScoreRecord(**base, judge=JURY, prompt=prompt, status=INVALID, error=error))
    return out


@dataclasses.dataclass(frozen=True)
class Leniency:
    judge: str
    offset: float | None  # mean (own reading - the other members' mean reading), 0-4 scale
    interval: Interval
    items: int  # (dialogue, dimension) where every member is valid
    unit: str | None = None  # what the interval resampled


def leniency(
    records: Sequence[ScoreRecord], members: Sequence[str], reading: str = "expected", n: int = 1000,
    seed: int = 0,
) -> list[Leniency]:  # fmt: skip
    """Each member's mean offset from the other members (see the module docstring): own reading
    minus the others' mean reading, whatever the jury's `pool` (a difference from the others, not
    from a pooled score that holds the judge itself)."""
    complete = [
        by_judge for by_judge in _by_item(records).values()
        if all(m in by_judge and by_judge[m].status == VALID for m in members)
    ]  # fmt: skip
    resampled = card_units([b[members[0]] for b in complete])
    units, groups = unit_index(resampled)
    readings = np.asarray([[_value(b[m], reading) for m in members] for b in complete], dtype=float)
    out = []
    for i, m in enumerate(members):
        others = [j for j in range(len(members)) if j != i]
        offsets = (
            readings[:, i] - readings[:, others].mean(axis=1) if len(complete) and others else np.zeros(0)
        )
        if not len(offsets) or len(members) < 2:
            out.append(Leniency(m, None, NO_INTERVAL, len(offsets)))
            continue

        def statistic(drawn: np.ndarray, offsets: np.ndarray = offsets) -> float:
            picked = expand(groups, drawn)
            return float(offsets[picked].mean()) if len(picked) else math.nan

        interval = unit_intervals(len(units), statistic, n, seed)[0]
        out.append(Leniency(m, float(offsets.mean()), interval, len(offsets), card_unit_name(resampled)))
    return out


def alpha_level(reading: str) -> str:
    """Krippendorff's level for the jury's reading: the stated scores 0-4 are ordinal categories;
    expected scores are continuous (interval)."""
    return "ordinal" if reading == "stated" else "interval"


def _alpha(table: np.ndarray, level: str = "interval") -> float:
    """Krippendorff's alpha (`level`) of a judges x items table (NaN: no judgment); NaN when undefined."""
    import krippendorff

    if table.shape[1] < 2 or np.sum(~np.isnan(table)) < 4:
        return math.nan
    try:
        with np.errstate(invalid="ignore", divide="ignore"):
            if level == "ordinal":  # the categories are the scale's, not only those that occur
                return float(krippendorff.alpha(reliability_data=table, level_of_measurement="ordinal",
                                                value_domain=list(range(5))))  # fmt: skip
            return float(krippendorff.alpha(reliability_data=table, level_of_measurement=level))
    except (ValueError, ZeroDivisionError):  # a single value: no variation to agree on
        return math.nan


def _cell(by_judge: Mapping[str, ScoreRecord], member: str, reading: str) -> float:
    record = by_judge.get(member)
    return _value(record, reading) if record is not None and record.status == VALID else math.nan


def agreement_between_judges(
    records: Sequence[ScoreRecord],
    members: Sequence[str],
    reading: str = "expected",
    n: int = 1000,
    seed: int = 0,
) -> dict[str, tuple[float, Interval, int, str | None]]:
    """{dimension: (Krippendorff's alpha between the members, its interval by card, items, the unit
    resampled)}: ordinal on the stated scores (`reading: stated`), interval on expected scores."""
    level = alpha_level(reading)
    out = {}
    items = _by_item(records)
    for dim in DIMENSION_KEYS:
        keys = sorted(k for k in items if k[1] == dim)
        if not keys:
            continue
        table = np.asarray([[_cell(items[k], m, reading) for k in keys] for m in members], dtype=float)
        resampled = card_units([next(iter(items[k].values())) for k in keys])
        units, groups = unit_index(resampled)

        def statistic(drawn: np.ndarray, table: np.ndarray = table, groups: list = groups) -> float:
            return _alpha(table[:, expand(groups, drawn)], level)

        interval = unit_intervals(len(units), statistic, n, seed)[0]
        out[dim] = (_alpha(table, level), interval, len(keys), card_unit_name(resampled))
    return out


def _kendall(member: Mapping[str, float], jury: Mapping[str, float]) -> float | None:
    """Kendall's tau-b between a member's scores of the targets and the jury's, over every target
    the member scored: ties kept (two targets with the same score are tied, not ordered by name).
    None where fewer than 2, where either side does not vary, and where the jury has no score of a
    target the member scored (`rankings` says which): a tau over the other targets would leave out
    every pair the member ordered with it."""
    from scipy.stats import kendalltau

    ranked = sorted(member)
    if len(ranked) < 2 or not set(ranked) <= set(jury):
        return None
    tau = kendalltau([member[t] for t in ranked], [jury[t] for t in ranked], variant="b").statistic
    return None if math.isnan(tau) else float(tau)


def _tiers(scores: Mapping[str, float]) -> list[list[str]]:
    """Targets best first, those with exactly the same score in one tier (names sorted within it): the
    rule of every rank where nothing is resampled (`esc.reports.paired.value_ranks`, equal values share
    a rank). The rankings order each judge's point estimates (no interval: a judge's order is what is
    compared), so only an exact tie is a tie here; which targets the data tell apart is Table 2's
    "Rank" (paired intervals)."""
    ranks = value_ranks(scores)
    tiers: dict[int, list[str]] = {}
    for target in sorted(scores):
        tiers.setdefault(ranks[target], []).append(target)
    return [tiers[r] for r in sorted(tiers)]


def rankings(rows: Sequence[Row], members: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (role-player, language): each judge's order of the targets it scored (best first; `tiers`
    keeps exact ties together), Kendall's tau-b with the jury's scores (`_kendall`: n/a where the
    jury lacks a target the member scored), the target pairs that one member strictly prefers one
    way and another the other way (a tie is no dispute), over every pair the members scored, and
    what the jury leaves out: `unranked`, each target a member scored whose Average the jury does not
    show, with why (`Estimate.na_reason`); `unordered`, each pair of targets some member scored
    that the jury orders not, with each such member's preference (or "tie")."""
    out = {}
    groups: dict[tuple[str, str], dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        groups[(row.roleplayer, row.language)][row.judge].append(row)
    for key, by_judge in sorted(groups.items()):
        scores: dict[str, dict[str, float]] = {}
        why_na: dict[str, dict[str, str]] = {}
        for judge, rs in by_judge.items():
            for r in rs:
                value = r.average.estimate.shown()[0]  # what Table 2 shows: an n/a Average ranks nowhere
                if value is None:
                    why_na.setdefault(judge, {})[r.target] = r.average.estimate.na_reason()
                else:
                    scores.setdefault(judge, {})[r.target] = float(value)
        tiers = {judge: _tiers(s) for judge, s in scores.items()}
        pooled = scores.get(JURY, {})
        voters = [m for m in members if m in scores]
        scored = sorted({t for m in voters for t in scores[m]})
        disputed, unordered = [], []
        for t1, t2 in itertools.combinations(scored, 2):
            prefers = {
                m: (t1 if scores[m][t1] > scores[m][t2] else t2 if scores[m][t2] > scores[m][t1] else None)
                for m in voters
                if {t1, t2} <= set(scores[m])
            }
            said = {m: p if p is not None else "tie" for m, p in prefers.items()}
            if len({p for p in prefers.values() if p is not None}) > 1:
                disputed.append((t1, t2, said))
            if said and not {t1, t2} <= set(pooled):
                unordered.append((t1, t2, said))
        unranked = {t: why_na.get(JURY, {}).get(t, "no pooled judgment") for t in scored if t not in pooled}
        out[key] = {
            "orders": {judge: [t for tier in ts for t in tier] for judge, ts in tiers.items()},
            "tiers": tiers,
            "tau": {m: _kendall(scores[m], pooled) for m in voters},
            "disputed": disputed,
            "unranked": unranked,
            "unordered": unordered,
            "not_shown": {judge: sorted(ts) for judge, ts in why_na.items()},
        }
    return out


def _figure(value: float, interval: Interval, n: int, digits: int, unit: str | None) -> result_.Cell:
    e = estimate(value, interval, n, unit)
    return result_.Cell(format_estimate(e, digits), e)


def jury_blocks(
    leniencies: Sequence[Leniency], alphas: Mapping[str, tuple[float, Interval, int, str | None]],
    ranks: Mapping[tuple[str, str], Mapping[str, Any]], pool: str, members: Sequence[str],
    reading: str = "expected",
) -> list[result_.Block]:  # fmt: skip
    """The jury's section of leaderboard.md: leniency, agreement between the judges, rankings."""
    blocks: list[result_.Block] = [
        result_.Heading(f"The jury: {', '.join(members)}"),
        result_.Text(
            f"The pooled score (judge `{JURY}` in the table above) is the {pool} of the judges' {reading} "
            "scores; each judge's own row there, like Table 2, averages its stated scores. Everything below "
            f"is on the jury's reading ({reading})."
        ),
        result_.Text(
            "Leniency: mean of the judge's score minus the mean score of the other judges on the same "
            "judgment (0-4 scale; above 0 = more lenient than the others), 95% bootstrap interval "
            "resampled by "
            f"{resampled_units(le.unit for le in leniencies) or 'nothing'}, on the judgments every judge "
            "read."
        ),
        result_.Table.of(
            ["judge", "leniency", "judgments"],
            [
                [
                    le.judge,
                    result_.figure("n/a", None, n=le.items, note="no judgment every judge read")
                    if le.offset is None
                    else _figure(le.offset, le.interval, le.items, 2, le.unit),
                    le.items,
                ]
                for le in leniencies
            ],
            name="leniency",
            metrics={"leniency": LENIENCY},
        ),  # fmt: skip
        result_.Text(
            f"Agreement between the judges, Krippendorff's alpha ({alpha_level(reading)}) per "
            "dimension, 95% interval resampled by "
            f"{resampled_units(u for *_, u in alphas.values()) or 'nothing'}:"
        ),
        result_.Table.of(
            ["dimension", "alpha", "judgments"],
            [
                [
                    label(dim),
                    result_.figure("n/a (no variation)", None, n=n, note="no variation", unit=unit)
                    if math.isnan(alpha)
                    else _figure(alpha, interval, n, 3, unit),
                    n,
                ]
                for dim, (alpha, interval, n, unit) in alphas.items()
            ],
            metrics={"alpha": JURY_ALPHA[alpha_level(reading)]},
            name="agreement between the judges",
        ),  # fmt: skip
    ]
    for (roleplayer, language), r in ranks.items():
        lines = []
        unranked = r["unranked"]
        for judge in dict.fromkeys([*r["tiers"], *r["not_shown"]]):
            order = " > ".join(" = ".join(tier) for tier in r["tiers"].get(judge, []))
            missing = r["not_shown"].get(judge, [])
            if missing:
                order += ("; " if order else "") + f"n/a: {', '.join(missing)}"
            tau = ""
            if judge != JURY:
                lacking = [t for t in r["orders"].get(judge, []) if t in unranked]
                why = f": the jury has no Average for {', '.join(lacking)}" if lacking else ""
                tau = f" (Kendall's tau-b with the jury: {_tau(r['tau'].get(judge))}{why})"
            lines.append(f"- {judge}: {order}{tau}")
        if r["disputed"]:
            lines.append("- judges disagree on: " + "; ".join(_pairs(r["disputed"])))
        else:
            lines.append("- no two judges order a pair of targets oppositely (a tie is no dispute)")
        if r["unordered"]:
            why = "; ".join(f"{t}: {reason}" for t, reason in unranked.items())
            lines.append(
                f"- pairs the judges order and the jury does not (its Average is n/a for {why}): "
                + "; ".join(_pairs(r["unordered"]))
            )
        blocks += [
            result_.Text(f"Rankings ({language}, role-player {roleplayer}), best first (= an exact tie):"),
            result_.Text("\n".join(lines)),
        ]
    return blocks


def _pairs(pairs: Sequence[tuple[str, str, Mapping[str, str]]]) -> list[str]:
    """ "a vs b (judge: preferred, ...)" for each pair."""
    return [f"{a} vs {b} ({', '.join(f'{m}: {w}' for m, w in who.items())})" for a, b, who in pairs]


def _tau(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
