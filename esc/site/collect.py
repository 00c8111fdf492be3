"""What the report site shows, read from the run logs of rank.py folders (`OUT/run.json`,
`esc.reports.runlog`); `build.py` turns it into pages.

From each folder its log: the header (what made the run), every judgment (each names its task and
the dialogues it is about), the figures and the reports (blocks of text and tables). The dialogues
come from the files the judgments name (`source`) and the files the headers list (`sources`); a
file that is gone leaves its dialogues without a transcript, their judgments still shown. Nothing
here knows a task: a new task's judgments and reports show as every other's. Nothing here writes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.cards import RoleCard
from esc.dialogues.record import Dialogue, profiled_id
from esc.dialogues.store import named_file, played_by_source
from esc.errors import DataError, UserError
from esc.reports.breakdown import card_index
from esc.reports.result import Report, _block  # a report's blocks from the log (`read_result` reads a file)
from esc.reports.run_folder import changed_since_judged, judged_sha, whole
from esc.reports.runlog import RUN_LOG, Judgment, RunLog, read_run_log
from esc.rundir import MANIFEST_FILE
from esc.runinfo import Manifest, read_manifest
from esc.scoring.judge import VALID


@dataclasses.dataclass
class Run:
    """One rank.py output folder: its run log, its reports, and its manifest (the command, status
    and times, shown as context) where there is one."""

    path: Path
    log: RunLog
    reports: dict[str, Report]  # kind -> the report, from the log
    manifest: Manifest | None

    @property
    def task(self) -> str:
        return self.log.task or "unknown"


@dataclasses.dataclass
class Entry:
    """One dialogue on the site: what was played, and every judgment about it."""

    dialogue_id: str
    target: str
    roleplayer: str
    language: str
    card_id: int | None
    source: str | None  # the dialogue file
    dialogue: Dialogue | None = None
    missing: str | None = None  # why the transcript cannot be shown
    changed: bool = False  # the file's dialogue is not the one judged (content hash differs)
    content_sha: str | None = None  # of the dialogue shown, as a judgment of it records it
    card: RoleCard | None = None
    judgments: dict[str, list[Judgment]] = dataclasses.field(default_factory=dict)  # task -> log order

    @property
    def group(self) -> tuple[str, str]:
        return (self.target, self.roleplayer)

    @property
    def variant(self) -> str | None:
        """The perturbation a stress-test variant was made by (rank.py mode=stress), None for a
        dialogue as played: the side-by-side page labels a variant beside its original."""
        made = (self.dialogue.meta or {}).get("perturbation") if self.dialogue else None
        return made.get("name") if isinstance(made, dict) else None

    def whole(self, task: str, judge: str | None = None) -> list[Judgment]:
        """The judgments of `task` (by `judge`, when given) about this dialogue as a whole."""
        return [j for j in self.judgments.get(task, ()) if whole(j) and judge in (None, j.judge)]

    def mean(self, task: str, judge: str) -> float | None:
        """The mean score of `judge`'s valid judgments of `task` about this dialogue as a whole (None
        without one): what orders a target's dialogues."""
        valid = [j.score for j in self.whole(task, judge) if j.status == VALID and j.score is not None]
        return sum(valid) / len(valid) if valid else None


@dataclasses.dataclass
class SiteData:
    runs: list[Run]
    entries: dict[str, Entry]  # dialogue id -> entry, in reading order
    cards_known: bool  # the role cards could be read
    unmatched: dict[str, int]  # task -> judgments about no dialogue on the site
    evaluate_manifests: dict[Path, Manifest]  # evaluate.py folder -> its manifest


def read_run(path: Path) -> Run:
    """A rank.py output folder and its run log: a UserError when there is no such folder, the
    DataError of `read_run_log` when it has no (readable) log (it names `esc runs upgrade`)."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: no such run folder (name rank.py output folders)")
    log = read_run_log(path)
    reports = {}
    for kind, payload in log.reports.items():
        try:
            reports[kind] = Report(str(payload["kind"]), tuple(_block(b) for b in payload["blocks"]))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise DataError(path / RUN_LOG, f"reports.{kind}", f"not a report: {err}") from None
    return Run(path, log, reports, _manifest(path / MANIFEST_FILE))


def _manifest(path: Path) -> Manifest | None:
    """The run manifest at `path`, None when there is none (it only adds context to a page); one
    that does not read is the DataError of `read_manifest`, naming it."""
    return read_manifest(path) if path.is_file() else None


def _dialogue_files(runs: Sequence[Run]) -> list[str]:
    found = dict.fromkeys(j.source for run in runs for j in run.log.judgments if j.source)
    for run in runs:
        for source in run.log.header.sources:
            if source.endswith(".jsonl"):
                found.setdefault(source)
    return list(found)


def _evaluate_manifests(files: Iterable[Path]) -> dict[Path, Manifest]:
    """The manifests of the evaluate.py folders the dialogue files sit in (models, revisions)."""
    out = {}
    for path in files:
        folder = path.parent.parent if path.parent.name == "dialogues" else path.parent
        if folder not in out:
            manifest = _manifest(folder / MANIFEST_FILE)
            if manifest is not None:
                out[folder] = manifest
    return out


def _clash(a: str | None, b: str | None, dialogue_id: str) -> UserError:
    return UserError(
        f"{a} and {b} both hold dialogue {dialogue_id!r} (two runs of one target and role-player, whose "
        "files share a name): their judgments would be shown beside the wrong transcript; build a site "
        "per run (esc report RUN --out SITE)"
    )


def collect(sources: Sequence[Path], cards: Sequence[Path] | None = None) -> SiteData:
    """Everything the site shows of the rank.py folders `sources` (see the module docstring).
    `cards`: role card files for topics and sources (default: the released cards)."""
    runs: list[Run] = []
    for source in sources:
        run = read_run(Path(source))
        if all(run.path.resolve() != r.path.resolve() for r in runs):
            runs.append(run)
    files = _dialogue_files(runs)
    played = played_by_source(files)  # source -> card id -> dialogue
    held: dict[str, tuple[str, Dialogue]] = {}  # dialogue id (file stem/card, as judgments name it)
    plain: dict[str, tuple[str, Dialogue] | None] = {}  # a hard profile's dialogue by file stem/card
    for source, by_card in played.items():
        for card_id, dialogue in by_card.items():
            # a hard seeker profile's dialogue is `<stem>~<profile>/<card>` (mode=robustness's id: two
            # profiles' folders hold files of one name), and `<stem>/<card>` where only it has that id
            dialogue_id = profiled_id(source, dialogue)
            if dialogue_id in held and not _same_file(held[dialogue_id][0], source):
                raise _clash(held[dialogue_id][0], source, dialogue_id)
            held.setdefault(dialogue_id, (source, dialogue))
            short = f"{Path(source).stem}/{card_id}"
            if short != dialogue_id:
                seen = plain.setdefault(short, (source, dialogue))
                if seen is not None and not _same_file(seen[0], source):
                    plain[short] = None  # two profiles' files of one name: only their full ids tell
    for short, found in plain.items():
        if short not in held and found is not None:
            held[short] = found
    judgments = [j for run in runs for j in run.log.judgments]
    entries: dict[str, Entry] = {}
    shown: set[tuple[Path, int | None]] = set()  # (file, card) of the dialogues with an entry
    for j in judgments:  # the dialogues judgments name with their file, in reading order
        if j.source and len(j.dialogues) == 1:
            entry = entries.get(j.dialogues[0])
            if entry is None:
                entry = entries[j.dialogues[0]] = _entry(j, held, played)
                shown.add((named_file(str(entry.source)).resolve(), entry.card_id))
            elif not _same_file(entry.source, j.source):
                raise _clash(entry.source, j.source, entry.dialogue_id)
    for dialogue_id, (source, dialogue) in held.items():  # then the files' other dialogues
        if dialogue_id not in entries and (named_file(source).resolve(), dialogue.card_id) not in shown:
            entries[dialogue_id] = _played(dialogue_id, source, dialogue)
            shown.add((named_file(source).resolve(), dialogue.card_id))
    unmatched: Counter = Counter()
    for j in judgments:
        on = [entries[d] for d in dict.fromkeys(j.dialogues) if d in entries]
        unmatched[j.task] += not on
        for entry in on:
            entry.judgments.setdefault(j.task, []).append(j)
        if on and changed_since_judged(j, on[0].dialogue_id, on[0].dialogue):
            on[0].changed = True
    index = card_index([str(f) for f in cards] if cards else None)  # topics unknown: said on the overview
    for entry in entries.values():
        card = index.get((entry.card_id, entry.language)) if entry.card_id is not None else None
        if card is not None and entry.dialogue is not None:
            if card.problem.strip() not in entry.dialogue.system_prompt:
                card = None  # another card of that id: not the one this dialogue was played with
        entry.card = card
    return SiteData(
        runs, entries, bool(index), {k: n for k, n in unmatched.items() if n},
        _evaluate_manifests(named_file(s) for s in files),
    )  # fmt: skip


def _same_file(a: str | None, b: str | None) -> bool:
    """Whether two `source` fields name one dialogue file (paths compared resolved)."""
    if not a or not b:
        return a == b
    return a == b or named_file(a).resolve() == named_file(b).resolve()


def _played(dialogue_id: str, source: str, dialogue: Dialogue) -> Entry:
    entry = Entry(
        dialogue_id,
        dialogue.target,
        dialogue.roleplayer,
        dialogue.language,
        dialogue.card_id,
        source,
        dialogue,
    )
    entry.content_sha = judged_sha(dialogue_id, dialogue)
    return entry


def _entry(j: Judgment, held: Mapping[str, tuple[str, Dialogue]], played: Mapping[str, Any]) -> Entry:
    """The entry of the one dialogue `j` names, from its file, or saying why that file does not
    show it."""
    dialogue_id, source = j.dialogues[0], str(j.source)
    if dialogue_id in held:
        if not _same_file(held[dialogue_id][0], source):
            raise _clash(held[dialogue_id][0], source, dialogue_id)
        return _played(dialogue_id, *held[dialogue_id])
    entry = Entry(dialogue_id, j.target or "?", j.roleplayer or "?", j.language or "?", j.card_id, source)
    if source not in played:
        entry.missing = f"the dialogue file {source} no longer exists"
    else:
        entry.missing = f"the dialogue file {source} no longer holds the dialogue of card {j.card_id}"
    return entry
