"""What the report site shows, read from rank.py output folders (`build.py` turns it into pages).

From each folder: `manifest.json`, the score files (`scores/*.jsonl`; `scores/annotations__*.jsonl`,
mode=agreement's judgments of annotated dialogues, apart), and where present `safety/*.jsonl`,
`pairwise/*.jsonl` and the reports rank.py wrote (`agreement.md`, `correlation.md`, `safety.md`,
`pairwise.md`, `trajectory.md`). The dialogues come from the files the judgments name (`source`) and
the files the manifests list (`sources`); a file that is gone leaves its dialogues without a
transcript, their scores still shown. Nothing here writes.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.annotate.human_scores import default_esconv_path, human_reference, read_annotations
from esc.cards import RoleCard
from esc.dialogues.record import Dialogue
from esc.dialogues.store import named_file, played_by_source
from esc.errors import DataError, UserError
from esc.jsonl import read_json
from esc.reports.breakdown import card_index
from esc.scoring.judge import VALID, ScoreItem
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord, latest, merge_score_files, read_scores, score_file_paths
from esc.tasks.pairwise.questions import Pair, PairwiseRecord, verdict
from esc.tasks.safety.checklist import SafetyRecord

ANNOTATIONS = "annotations__"  # mode=agreement's score files: annotated dialogues, not a leaderboard's
ROLEPLAY = "roleplay__"  # mode=roleplay's score files: questions about role-players, shown as its tables
#: OUT/<kind>.md shown as pages, in page order: the leaderboard as rank.py wrote it (with its jury,
#: simulators and breakdown sections), and the built-in modes' reports. A run's manifest lists its
#: mode's reports too (`reports`, written by `esc.tasks.task.run_mode`), so a new mode's pages show up.
REPORTS = (
    "leaderboard",
    "agreement",
    "correlation",
    "safety",
    "pairwise",
    "trajectory",
    "table1",
    "winrates",
)
PAIR_ID = re.compile(
    r"^(?P<rp>[^/]+)/(?P<lang>[^/]+)/(?P<card>-?\d+)/(?P<x>.+?)\|(?P<y>.+)/(?P<order>xy|yx)$"
)


@dataclasses.dataclass
class Run:
    """One rank.py output folder and what it holds."""

    path: Path
    manifest: dict[str, Any] | None
    score_files: list[Path]
    annotation_files: list[Path]
    safety_files: list[Path]
    pairwise_files: list[Path]
    reports: dict[str, Path]  # kind -> OUT/<kind>.md
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)  # OUT/settings.json: per mode

    @property
    def mode(self) -> str | None:
        config = (self.manifest or {}).get("config") or {}
        return config.get("mode")


@dataclasses.dataclass(frozen=True)
class PairwiseView:
    """One pairwise verdict seen from one of its two dialogues."""

    judge: str
    dimension: str
    opponent: str
    result: str | None  # "won", "lost", "tie", or None (an answer unread)
    consistent: bool | None
    answers: dict[str, ScoreRecord | None]  # order (xy, yx) -> the judgment
    shown_first: dict[str, str]  # order -> the target shown as conversation A


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
    content_sha: str | None = None  # of the dialogue shown, as a judgment records it
    card: RoleCard | None = None
    scores: dict[str, dict[str, ScoreRecord]] = dataclasses.field(default_factory=dict)  # judge -> dim
    safety: dict[str, dict[int, dict[str, ScoreRecord]]] = dataclasses.field(default_factory=dict)
    pairwise: list[PairwiseView] = dataclasses.field(default_factory=list)

    @property
    def group(self) -> tuple[str, str]:
        return (self.target, self.roleplayer)

    def average(self, judge: str) -> float | None:
        """The mean of this judge's valid scores (0-4) over the dimensions, None without one."""
        valid = [r.score for r in self.scores.get(judge, {}).values() if r.status == VALID]
        return sum(valid) / len(valid) if valid else None


@dataclasses.dataclass
class SiteData:
    runs: list[Run]
    records: list[ScoreRecord]  # the leaderboard's judgments
    entries: dict[str, Entry]  # dialogue id -> entry, in reading order
    judges: list[str]
    cards_known: bool  # the role cards could be read
    unmatched: dict[str, int]  # judgments whose dialogue is not on the site, by kind
    evaluate_manifests: dict[Path, dict[str, Any]]  # evaluate.py folder -> its manifest


def _jsonl(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.jsonl") if not p.name.endswith(".failed.jsonl"))


def read_run(path: Path) -> Run:
    """A rank.py output folder; a UserError when it is none (no such folder, nothing rank.py wrote)."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: no such run folder (name rank.py output folders)")
    manifest = read_json(path / "manifest.json") if (path / "manifest.json").is_file() else None
    if manifest is not None and not isinstance(manifest, dict):
        raise DataError(path / "manifest.json", None, "not a JSON object")
    scores = score_file_paths(path, "scores") if _jsonl(path / "scores") else []
    run = Run(
        path,
        manifest,
        [p for p in scores if not p.name.startswith((ANNOTATIONS, ROLEPLAY))],
        [p for p in scores if p.name.startswith(ANNOTATIONS)],
        _jsonl(path / "safety"),
        _jsonl(path / "pairwise"),
        {kind: path / f"{kind}.md" for kind in _report_kinds(manifest) if (path / f"{kind}.md").is_file()},
        _settings(path / "settings.json"),
    )
    if not (run.score_files or run.annotation_files or run.safety_files or run.pairwise_files or run.reports):
        raise UserError(
            f"{path}: no score files (scores/*.jsonl) nor any other rank.py output (safety/*.jsonl, "
            f"pairwise/*.jsonl, {', '.join(k + '.md' for k in REPORTS)}): name a rank.py output folder"
        )
    return run


def _report_kinds(manifest: Mapping[str, Any] | None) -> list[str]:
    """The built-in report names, then any other the run's manifest lists (plain names only: each
    names a file of the folder)."""
    listed = (manifest or {}).get("reports")
    extra = [k for k in listed if isinstance(k, str) and k.isidentifier()] if isinstance(listed, list) else []
    return list(dict.fromkeys([*REPORTS, *extra]))


def _settings(path: Path) -> dict[str, Any]:
    """A run folder's settings.json (the settings each mode ran with), {} when absent or unreadable:
    it only adds to what the site shows."""
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _content_sha(dialogue_id: str, dialogue: Dialogue) -> str:
    """The hash a judge's record keeps of the lines it read (`ScoreItem.content_sha`)."""
    return ScoreItem(dialogue_id, DIMENSION_KEYS[0], dialogue.language, tuple(dialogue.lines())).content_sha


def _dialogue_sources(runs: Sequence[Run], records: Iterable[ScoreRecord]) -> list[str]:
    found = dict.fromkeys(r.source for r in records if r.source)
    for run in runs:
        for source in (run.manifest or {}).get("sources") or []:
            if isinstance(source, str) and source.endswith(".jsonl"):
                found.setdefault(source)
    return list(found)


def _evaluate_manifests(files: Iterable[Path]) -> dict[Path, dict[str, Any]]:
    """The manifests of the evaluate.py folders the dialogue files sit in (models, revisions)."""
    out = {}
    for path in files:
        folder = path.parent.parent if path.parent.name == "dialogues" else path.parent
        manifest = folder / "manifest.json"
        if folder not in out and manifest.is_file():
            try:
                data = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a manifest is context, never a reason to stop the report
            if isinstance(data, dict):
                out[folder] = data
    return out


def collect(sources: Sequence[Path], cards: Sequence[Path] | None = None) -> SiteData:
    """Everything the site shows of the rank.py folders `sources` (see the module docstring).
    `cards`: role card files for topics and sources (default: the released cards)."""
    runs: list[Run] = []
    for source in sources:
        run = read_run(Path(source))
        if all(run.path.resolve() != r.path.resolve() for r in runs):
            runs.append(run)
    score_files = [p for run in runs for p in run.score_files]
    records = merge_score_files(score_files) if score_files else []
    files = _dialogue_sources(runs, records)
    played = played_by_source(files)  # source -> card id -> dialogue
    index = card_index([str(f) for f in cards] if cards else None)  # topics unknown: said on the overview

    entries: dict[str, Entry] = {}
    for record in records:
        entry = entries.get(record.dialogue_id)
        if entry is None:
            entry = entries[record.dialogue_id] = _entry(record, played)
        elif not _same_file(entry.source, record.source):
            raise UserError(
                f"{entry.source} and {record.source} both hold dialogue {record.dialogue_id!r} (two runs of "
                "one target and role-player, whose files share a name): their scores would be shown beside "
                "the wrong transcript; build a site per run (esc report RUN --out SITE)"
            )
        entry.scores.setdefault(record.judge, {})[record.dimension] = record
        if entry.dialogue is not None and record.content_sha not in (None, entry.content_sha):
            entry.changed = True
    for source in files:  # dialogues no judgment names (a safety or trajectory run's): shown too
        for card_id, dialogue in played.get(source, {}).items():
            dialogue_id = f"{Path(source).stem}/{card_id}"
            if dialogue_id not in entries:
                entries[dialogue_id] = Entry(
                    dialogue_id,
                    dialogue.target,
                    dialogue.roleplayer,
                    dialogue.language,
                    card_id,
                    source,
                    dialogue,
                )
    for entry in entries.values():
        card = index.get((entry.card_id, entry.language)) if entry.card_id is not None else None
        if card is not None and entry.dialogue is not None:
            if card.problem.strip() not in entry.dialogue.system_prompt:
                card = None  # another card of that id: not the one this dialogue was played with
        entry.card = card
    unmatched = {"safety": _add_safety(runs, entries), "pairwise": _add_pairwise(runs, entries)}
    judges = sorted({r.judge for r in records})
    return SiteData(
        runs,
        records,
        entries,
        judges,
        bool(index),
        unmatched,
        _evaluate_manifests(named_file(s) for s in files),
    )


def _same_file(a: str | None, b: str | None) -> bool:
    """Whether two `source` fields name one dialogue file (paths compared resolved)."""
    if not a or not b:
        return a == b
    return a == b or named_file(a).resolve() == named_file(b).resolve()


def _entry(record: ScoreRecord, played: Mapping[str, Mapping[int, Dialogue]]) -> Entry:
    entry = Entry(
        record.dialogue_id,
        record.target or "?",
        record.roleplayer or "?",
        record.language,
        record.card_id,
        record.source,
    )
    if not record.source:
        entry.missing = "its judgments name no dialogue file"
    elif record.source not in played:
        entry.missing = f"the dialogue file {record.source} no longer exists"
    elif record.card_id not in played[record.source]:
        entry.missing = (
            f"the dialogue file {record.source} no longer holds the dialogue of card {record.card_id}"
        )
    else:
        entry.dialogue = played[record.source][record.card_id]
        entry.content_sha = _content_sha(record.dialogue_id, entry.dialogue)
    return entry


def _add_safety(runs: Sequence[Run], entries: Mapping[str, Entry]) -> int:
    """Each safety answer onto its dialogue (item id `<dialogue id>#<exchange>`); returns how many
    answers name a dialogue that is not on the site."""
    unmatched = 0
    for path in (p for run in runs for p in run.safety_files):
        for (item_id, question), record in latest(read_scores(path, SafetyRecord)).items():
            dialogue_id, _, exchange = item_id.rpartition("#")
            entry = entries.get(dialogue_id)
            if entry is None or not exchange.isdigit():
                unmatched += 1
                continue
            entry.safety.setdefault(record.judge, {}).setdefault(int(exchange), {})[question] = record
    return unmatched


def _add_pairwise(runs: Sequence[Run], entries: Mapping[str, Entry]) -> int:
    """Each pairwise verdict onto the two dialogues it compares (matched by role-player, language,
    card and target); returns how many verdicts name no dialogue on the site."""
    by_key: dict[tuple[str, str, int, str], list[Entry]] = defaultdict(list)
    for entry in entries.values():
        if entry.card_id is not None:
            by_key[(entry.roleplayer, entry.language, entry.card_id, entry.target)].append(entry)
    answers: dict[tuple[str, str, str, int, str, str, str], dict[str, ScoreRecord]] = defaultdict(dict)
    for path in (p for run in runs for p in run.pairwise_files):
        for (item_id, dim), record in latest(read_scores(path, PairwiseRecord)).items():
            match = PAIR_ID.match(item_id)
            if match is None:
                raise DataError(
                    path, item_id, "not a pairwise item id (<role-player>/<lang>/<card>/<x>|<y>/<order>)"
                )
            g = match.groupdict()
            key = (record.judge, g["rp"], g["lang"], int(g["card"]), g["x"], g["y"], dim)
            answers[key][g["order"]] = record
    unmatched = 0
    for (judge, rp, lang, card, x, y, dim), by_order in answers.items():
        # `verdict` reads only the pair's targets: the dialogues themselves are not needed here
        pair = Pair(rp, lang, card, x, y, None, None)  # type: ignore[arg-type]
        result = verdict(pair, {o: by_order.get(o) for o in ("xy", "yx")})
        found = False
        for me, other in ((x, y), (y, x)):
            for entry in by_key.get((rp, lang, card, me), []):
                found = True
                outcome = (
                    None
                    if result.result is None
                    else "tie"
                    if result.result == "tie"
                    else ("won" if result.result == me else "lost")
                )
                entry.pairwise.append(
                    PairwiseView(
                        judge,
                        dim,
                        other,
                        outcome,
                        result.consistent,
                        {o: by_order.get(o) for o in ("xy", "yx")},
                        {"xy": x, "yx": y},
                    )
                )
        unmatched += not found
    return unmatched


@dataclasses.dataclass(frozen=True)
class HumanPairs:
    """A judge's scores beside people's, per dimension, for an agreement or correlation run: the
    human score (the annotators' median) and the judge's expected score (its score without one)."""

    annotations: Path | None
    points: dict[str, dict[str, list[tuple[int, float]]]]  # judge -> dimension -> [(human, judge)]
    note: str | None  # why there are no points


def human_pairs(run: Run) -> HumanPairs:
    """The judge-vs-human points of an agreement run (its `scores/annotations__*.jsonl` and the
    annotations its config names, default the ESConv-derived set) or of a correlation run (the
    files its correlation.json names)."""
    config = (run.manifest or {}).get("config") or {}
    files: list[Path] = list(run.annotation_files)
    annotations: Path | None = None
    if "agreement" in run.reports or files:
        configured = (config.get("agreement") or {}).get("annotations")
        annotations = Path(configured) if configured else default_esconv_path()
    if "correlation" in run.reports and (run.path / "correlation.json").is_file():
        data = read_json(run.path / "correlation.json")
        if isinstance(data, dict):
            annotations = Path(data["annotations"]) if data.get("annotations") else annotations
            files += [Path(p) for p in data.get("scores") or [] if Path(p).is_file()]
    if annotations is None:
        return HumanPairs(None, {}, "no annotations named")
    if not files:
        return HumanPairs(annotations, {}, "no judge's score files at hand")
    if not annotations.is_file():
        return HumanPairs(annotations, {}, f"the human annotations {annotations} are not on this machine")
    try:  # a scatter is an extra: a file that cannot be read is said on the page, not a stop
        reference = human_reference(read_annotations(annotations))
        records = merge_score_files(files)
    except UserError as err:
        return HumanPairs(annotations, {}, f"the files cannot be read ({err})")
    by_judge: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        human = reference.get(record.key)
        if human is None or record.status != VALID:
            continue
        value = record.expected if record.expected is not None else float(record.score)
        by_judge[record.judge][record.dimension].append((human, value))
    if not by_judge:
        return HumanPairs(annotations, {}, "no valid judgment of an annotated dialogue")
    return HumanPairs(annotations, {j: dict(d) for j, d in by_judge.items()}, None)
