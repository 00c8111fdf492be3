"""`rank.py mode=robustness`: each chatbot against hard seekers, beside the cooperative seeker, and
whether the role-player played them (issue 65; docs/seekers.md).

    python rank.py mode=robustness judge=tiny dialogues=[COOPERATIVE_OUT,RESISTANT_OUT,GUARDED_OUT]

`dialogues`: evaluate.py folders or dialogue files of several seeker profiles; each dialogue's
profile is the one its record names (`meta.seeker`; none: the cooperative seeker). Two profiles'
folders hold files of one name (`tiny__tiny__en.jsonl`), so everything here is kept by profile: a
dialogue's id is `esc.dialogues.record.profiled_id` (`<stem>~<profile>/<card>`; the cooperative
seeker's `<stem>/<card>`, as mode=score names it), its judgments go to
`OUT/scores/<profile>/<stem>__<judge>.jsonl` (the run's dimensions, as mode=score) and its adherence
answers to `OUT/adherence/<profile>/<stem>__<judge>.jsonl`: for each hard profile P, P's yes/no
question (`esc/prompts/seekers.yaml`, in the dialogue's language) about every seeker message of P's
dialogues and of the cooperative dialogues the same role-player played on the same cards (the
baseline). One judging call set, its cost estimated first, resumable and kill-safe (appended as
judged; a rerun judges only what is missing). Then the report (`esc.tasks.robustness.report`).

Bad input stops before any request or file, one `error:` line: no cooperative dialogue (the baseline),
no hard profile's, no card both played with one target and role-player, a profile the prompt
registry does not hold at the version played, two files of one name and one profile.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from esc.config_rules import Section, Settings, check, show
from esc.dialogues.record import Dialogue, dialogue_lines, profiled_id
from esc.dialogues.store import read_dialogues
from esc.errors import DataError, UserError
from esc.prompts.seekers import COOPERATIVE, described, profile_names, profile_version
from esc.reports.runlog import Judgment
from esc.scoring.judge import FAILED, INVALID, VALID, Judge, ScoreItem
from esc.scoring.judging import Batch, score_batch, selected_dimensions
from esc.scoring.store import ScoreRecord, ScoreStore
from esc.tasks.answered import AnsweredResult
from esc.tasks.robustness.adherence import (
    AdherenceRecord,
    Message,
    adherence_digest,
    adherence_item,
    adherence_prompt,
    hard_profiles,
    seeker_messages,
)
from esc.tasks.robustness.report import NOT_PLAYED, Answer, write_report
from esc.tasks.run_log import logged
from esc.tasks.task import Context, Mode, Outcome, Plan, register

SCORES, ADHERENCE = "scores", "adherence"


MIN_RESAMPLES = 200
"""The fewest resamples the intervals may come from: whether a profile was played, a target's rank and
whether a change is a drop are read off a 95% interval's ends (the 2.5th and 97.5th percentiles, or
narrower with Bonferroni), which a few resamples do not place."""


def _resamples(value: int) -> str | None:
    """at least 200"""
    if value >= MIN_RESAMPLES:
        return None
    return (
        f"must be at least {MIN_RESAMPLES} resamples (whether a profile was played, the ranks and the drops "
        f"are read off the 95% intervals' ends, which fewer resamples do not place), got {show(value)}"
    )


class RobustnessSettings(Settings):
    """`robustness` (conf/rank.yaml): the intervals' resamples."""

    bootstrap: Annotated[int, check(_resamples)]  # resamples by role card for every 95% interval


@dataclasses.dataclass
class RobustnessResult(AnsweredResult):
    """mode=robustness: the report's markdown, this run's judgments by status, and what it found."""

    changes: int = 0  # (target, hard profile) pairs with a change
    not_played: list[str] = dataclasses.field(default_factory=list)  # "<lang>/<role-player>/<profile>"

    def summary(self) -> str:
        c = self.counts
        unplayed = f"; not played: {', '.join(self.not_played)}" if self.not_played else ""
        return (
            f"{self.markdown}\n{c.get(VALID, 0)} valid, {c.get(INVALID, 0)} invalid, {c.get(FAILED, 0)} "
            f"failed judgments and answers this run ({c.get('skipped', 0)} already done); {self.changes} "
            f"target x profile changes{unplayed}; {self.output_dir}/robustness.md, robustness_changes.csv"
        )


@dataclasses.dataclass(frozen=True)
class Played:
    """One complete dialogue of `dialogues`, with the profile it was played with and its id."""

    path: Path
    dialogue: Dialogue
    profile: str
    dialogue_id: str
    lines: tuple[tuple[str, str], ...]

    @property
    def card(self) -> tuple[str, str, int]:
        """(role-player, language, card id): what the baseline of a profile's question is matched on."""
        return (self.dialogue.roleplayer, self.dialogue.language, self.dialogue.card_id)


def profile_of(path: Path, lineno: int, dialogue: Dialogue) -> str:
    """The profile a dialogue record names (none: the cooperative seeker); a DataError for a profile
    the prompt registry does not hold, or holds at another version (its adherence question would not
    be the one of the version played)."""
    seeker = dialogue.seeker
    if seeker is None:
        return COOPERATIVE
    name = seeker.get("name")
    where = f"its dialogue of card {dialogue.card_id} was played by the {described(seeker)} seeker"
    if name not in profile_names():
        raise DataError(
            path, f"line {lineno}", f"{where}, which esc/prompts/seekers.yaml does not hold (known: "
            f"{', '.join(profile_names())})",
        )  # fmt: skip
    if seeker.get("version") != profile_version(name):
        raise DataError(
            path,
            f"line {lineno}",
            f"{where}, and esc/prompts/seekers.yaml holds {name} version {profile_version(name)}: its "
            "adherence "
            f"question is that version's; play the cards again (evaluate.py seeker={name} into a new folder)",
        )
    return str(name)


def read_played(files: Sequence[Path]) -> list[Played]:
    """Every complete dialogue of `files` with its profile and id; a record that does not read, or
    whose turns do not alternate, is a DataError naming the file and line."""
    out = []
    for path in files:
        for lineno, dialogue in enumerate(read_dialogues(path), 1):
            if dialogue.status != "complete":
                continue
            profile = profile_of(path, lineno, dialogue)
            lines = dialogue_lines(dialogue, path, lineno)
            out.append(Played(path, dialogue, profile, profiled_id(path, dialogue), lines))
    return out


def check_inputs(files: Sequence[Path], played: Sequence[Played]) -> None:
    """Bad inputs (see the module docstring), each a UserError before any request."""
    where = ", ".join(map(str, files))
    if not played:
        raise UserError(f"no complete dialogue in {where}")
    profiles = {p.profile for p in played}
    if COOPERATIVE not in profiles:
        raise UserError(
            f"no dialogue of the cooperative seeker in {where} (profiles: {', '.join(sorted(profiles))}): "
            "the cooperative seeker's dialogues are the baseline: add a folder played with "
            "seeker=cooperative (evaluate.py's default)"
        )
    if profiles == {COOPERATIVE}:
        raise UserError(
            f"only the cooperative seeker's dialogues in {where}: mode=robustness compares a hard seeker "
            f"profile with them: add a folder played with one ({', '.join(hard_profiles())}: evaluate.py "
            "seeker=NAME)"
        )
    names: dict[tuple[str, str], Path] = {}
    for p in played:
        other = names.setdefault((p.profile, p.path.stem), p.path)
        if other != p.path:
            raise UserError(
                f"{other} and {p.path} have the same name and hold dialogues of the same seeker profile ("
                f"{p.profile}), so their dialogues would get the same ids: report them in separate rank.py "
                "runs (hydra.run.dir=...)"
            )
    base = {(p.dialogue.target, *p.card) for p in played if p.profile == COOPERATIVE}
    if not any((p.dialogue.target, *p.card) in base for p in played if p.profile != COOPERATIVE):
        raise UserError(
            f"no card in {where} was played by both the cooperative seeker and a hard profile with the same "
            "target and role-player: the change is paired by card; play the same cards with both seekers"
        )


def score_items(dialogues: Sequence[Played], dims: Sequence[str]) -> list[tuple[ScoreItem, dict[str, Any]]]:
    """(item, record fields) for every dialogue and dimension, as mode=score's (`load_items`), each
    with its profiled id."""
    items = []
    for p in dialogues:
        d = p.dialogue
        fields = {
            "dialogue_id": p.dialogue_id, "language": d.language, "target": d.target,
            "roleplayer": d.roleplayer, "card_id": d.card_id, "source": str(p.path),
        }  # fmt: skip
        items += [
            (ScoreItem(p.dialogue_id, key, d.language, p.lines), {**fields, "dimension": key}) for key in dims
        ]
    return items


def questions_asked(played: Sequence[Played]) -> dict[str, list[str]]:
    """The hard profiles whose question each dialogue (by id) is asked: its own profile's; for a
    cooperative dialogue, every hard profile the same role-player played on its card (the baseline)."""
    cards: dict[tuple[str, str, int], set[str]] = {}
    for p in played:
        if p.profile != COOPERATIVE:
            cards.setdefault(p.card, set()).add(p.profile)
    order = profile_names()
    return {
        p.dialogue_id: [p.profile]
        if p.profile != COOPERATIVE
        else sorted(cards.get(p.card, ()), key=order.index)
        for p in played
    }


def adherence_items(
    dialogues: Sequence[Played], asked: Mapping[str, list[str]]
) -> list[tuple[Message, ScoreItem]]:
    """Each seeker message of `dialogues` with each question asked of its dialogue."""
    out = []
    for p in dialogues:
        for message, lines in seeker_messages(p.dialogue, p.dialogue_id, p.profile, p.lines):
            out += [(message, adherence_item(message, lines, q)) for q in asked[p.dialogue_id]]
    return out


@register
class Robustness(Mode):
    """Judge every profile's dialogues on the dimensions and the hard profiles' adherence; report the
    change of each target from the cooperative seeker."""

    name = "robustness"
    reads_dialogues = True
    own_questions = True  # the adherence questions: no per-dimension score adapters
    reports = ("robustness",)
    config = (Section("robustness", RobustnessSettings),)
    stores = ((f"{SCORES}/*/*.jsonl", ScoreRecord), (f"{ADHERENCE}/*/*.jsonl", AdherenceRecord))

    def judgment(self, record: ScoreRecord) -> Judgment:
        """A score as mode=score logs it; an adherence answer (item id `<dialogue id>#<k>`) about the
        seeker's k-th message: its dialogue, k as the turn, "yes" (the message shows the profile) or "no",
        and `detail` saying it is about a seeker message (the site shows it beside that message)."""
        if not isinstance(record, AdherenceRecord):
            return super().judgment(record)
        dialogue_id, _, number = record.dialogue_id.rpartition("#")
        if not dialogue_id or not number.isdigit():
            raise ValueError("not a seeker message's id (<dialogue id>#<k>)")
        answer = None if record.score is None else adherence_prompt()["answers"][record.score]
        return logged(
            self.name, record, (dialogue_id,), answer, turn=int(number), detail=(("message", "seeker"),)
        )

    def settings(self, sections: Mapping[str, Any]) -> dict[str, Any]:
        # the adherence prompt's bytes and the profiles' versions (their questions' texts)
        versions = {name: profile_version(name) for name in hard_profiles()}
        return {"robustness": {"adherence_sha256": adherence_digest(), "profiles": versions}}

    def plan(self, ctx: Context) -> Plan:
        files = ctx.dialogue_files()  # files of one name in two profiles' folders: kept apart by profile
        dims = selected_dimensions(ctx.run.dimensions)
        played = read_played(files)
        check_inputs(files, played)  # bad input stops here, before any request or file
        judge: Judge = ctx.judge
        groups: dict[tuple[str, Path], list[Played]] = {}
        for p in sorted(played, key=lambda p: profile_names().index(p.profile)):
            groups.setdefault((p.profile, p.path), []).append(p)
        asked = questions_asked(played)
        score_batches, adherence_batches, messages = [], [], []
        for (profile, path), mine in groups.items():
            store = ctx.out / SCORES / profile / f"{path.stem}__{judge.name}.jsonl"
            score_batches.append(score_batch(judge, path, score_items(mine, dims), store))
            found = adherence_items(mine, asked)
            if not found:
                continue
            messages += found
            fields = [
                {"target": m.target, "roleplayer": m.roleplayer, "card_id": m.card_id, "source": str(path)}
                for m, _ in found
            ]
            adherence_batches.append(
                Batch(
                    judge,
                    [item for _, item in found],
                    ScoreStore(
                        ctx.out / ADHERENCE / profile / f"{path.stem}__{judge.name}.jsonl", AdherenceRecord
                    ),
                    "seeker messages x adherence question",
                    "answer",
                    fields,
                    path,
                )
            )
        profiles = Counter(p.profile for p in played)
        manifest = {"sources": [str(p) for p in files], "profiles": dict(sorted(profiles.items()))}
        return Plan([*score_batches, *adherence_batches], manifest, (len(score_batches), messages))

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        n_scores, messages = plan.data
        counts: Counter = Counter(skipped=ctx.counts["skipped"])
        scores: dict[str, list[ScoreRecord]] = {}
        for batch in plan.batches[:n_scores]:
            profile = batch.store.path.parent.name
            for item in batch.items:
                record = batch.store.records[(item.item_id, item.dimension)]
                scores.setdefault(profile, []).append(record)
                counts[record.status] += 1
        answers = []
        by_key = {key: r for b in plan.batches[n_scores:] for key, r in b.store.records.items()}
        for message, item in messages:
            record = by_key[(item.item_id, item.dimension)]
            answers.append(Answer(message, item.dimension, record))
            counts[record.status] += 1
        section: RobustnessSettings = ctx.section("robustness")
        report = write_report(ctx.out, scores, answers, section.bootstrap, ctx.seed)
        unplayed = [f"{lang}/{rp}/{profile}" for (lang, rp, profile), a in report["adherence"].items()
                    if a.verdict == NOT_PLAYED]  # fmt: skip
        result = RobustnessResult(
            str(ctx.out), report["markdown"], dict(counts), len(report["changes"]), unplayed
        )
        return Outcome(result, {"counts": dict(counts), "report": str(ctx.out / "robustness.md")})
