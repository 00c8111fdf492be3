"""Join the outputs of sharded runs (SLURM array jobs) into one, reporting gaps and duplicates.

`--out` may be a new folder or one that already holds dialogues (an earlier merge, before a missing
shard was rerun; or the unsharded run itself). Nothing completed is ever dropped: merging goes by
dialogue identity. A dialogue already in `--out` stays as it is, byte for byte; the shards' dialogues
that are not there yet are appended, in the unsharded run's card order; the same dialogue found
twice is kept once. Two *different* completed dialogues for one card (the card was played twice, and
the replies differ) cannot both be kept and neither may be dropped silently: the merge is refused,
naming both files, before anything is written. So is a folder named twice (`A A`): it is not two
overlapping shards, and so are dialogues of two seeker profiles (`seeker=`, docs/seekers.md): one
run's folder holds one profile's dialogues.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from esc.cards.selection import CardSelection, Shard, select_cards
from esc.dialogues.record import Dialogue
from esc.dialogues.store import check_against_settings, one_seeker, read_dialogues
from esc.errors import ConfigError, DataError, UserError
from esc.jsonl import atomic_write_text
from esc.rundir import RunFolder, check_same_settings, read_settings
from esc.settings.plugins import load_node

#: what makes two records the same dialogue: what the judge reads (prompts, speakers, texts, finish
#: reasons); timings, cache hits and token counts differ between two runs of the same dialogue
TURN_IDENTITY = ("speaker", "text", "finish_reason")
DIALOGUE_IDENTITY = ("roleplayer", "target", "system_prompt", "opener", "target_system_prompt")


def same_settings(run_dirs: list[Path]) -> dict | None:
    """The shards' common `evaluate` settings (OUT/settings.json); a UserError naming the first
    difference when two shards were run with different settings. None for shards without a record."""
    recorded = [(Path(run), read_settings(Path(run)).get("evaluate")) for run in run_dirs]
    known = [(run, s) for run, s in recorded if s is not None]
    for run, s in known[1:]:
        check_same_settings(
            known[0][1], s, f"{known[0][0]} (compared with {run})", "merge only shards of one run"
        )
    return known[0][1] if known else None


@dataclasses.dataclass
class FilePlan:
    """What merging does to one dialogue file of `--out`: keep `existing` (its text, unchanged),
    append `added`; `duplicated` lists cards found in more than one shard."""

    existing: str = ""
    n_existing: int = 0
    keys: set[tuple[int, str]] = dataclasses.field(default_factory=set)
    added: list[Dialogue] = dataclasses.field(default_factory=list)
    duplicated: list[int] = dataclasses.field(default_factory=list)


def merge_runs(run_dirs: list[Path], dest: Path) -> dict[str, Any]:
    """Merge `run_dirs/dialogues/*.jsonl` into `dest` (new, or holding dialogues already).

    The expected cards come from the shards' manifests (their `cards` config without the shard);
    the report lists, per file, missing card ids (neither a shard nor `dest` has them) and the
    duplicated ones (in two shards). Two different dialogues for one card are a UserError raised
    before `dest` is touched (see the module docstring).
    """
    _refuse_twice_named(run_dirs)
    one_seeker(
        _completed([*run_dirs, dest]),
        "a run holds the dialogues of one seeker profile: merge each profile's folders into one of its own "
        "(--out NEW_DIR)",
    )
    manifests = [_read_manifest(Path(run) / "manifest.json", run) for run in run_dirs]
    settings = _merged_settings(run_dirs, dest)
    cards_cfgs = {json.dumps(m["config"]["cards"], sort_keys=True) for m in manifests}
    if len(cards_cfgs) > 1:
        raise UserError(
            "the runs selected different cards (their `cards` configs differ); merge runs of one grid"
        )
    selections = [
        _selection(Path(run) / "manifest.json", m) for run, m in zip(run_dirs, manifests, strict=True)
    ]
    shards = sorted(shard.index for _, shard in selections)
    count = selections[0][1].count
    order = {(c.id, c.language): i for i, c in enumerate(select_cards(selections[0][0]))}

    by_file: dict[str, list[tuple[Path, Dialogue]]] = defaultdict(list)
    for run in run_dirs:
        for path in sorted((Path(run) / "dialogues").glob("*.jsonl")):
            if not path.name.endswith(".failed.jsonl"):
                dialogues = list(read_dialogues(path))
                if settings is not None:
                    check_against_settings(path, dialogues, settings)
                by_file[path.name].extend((path, d) for d in dialogues)
    _plan(dest, by_file, order, settings)  # conflicts are refused before the folder is created or locked
    # the merged folder resumes like the shards (same settings); locked while it is written
    with RunFolder(dest, "evaluate" if settings is not None else "merge", settings):
        plans = _plan(dest, by_file, order, settings)  # again: what is in `dest` now, under the lock
        return _write_merged(run_dirs, dest, plans, order, shards, count)


def _completed(folders: list[Path]) -> Iterator[tuple[Path, Dialogue]]:
    """(file, dialogue) of every completed dialogue in the folders' dialogue files (none for a
    folder that does not exist yet)."""
    for folder in folders:
        for path in sorted((Path(folder) / "dialogues").glob("*.jsonl")):
            if not path.name.endswith(".failed.jsonl"):
                yield from ((path, dialogue) for dialogue in read_dialogues(path))


def _refuse_twice_named(run_dirs: list[Path]) -> None:
    """A UserError when one folder is named twice (`A A`, `A A/`, a link to A): its dialogues would
    count as duplicated between two shards, and its shard as two."""
    seen: dict[Path, Path] = {}
    for run in map(Path, run_dirs):
        first = seen.get(run.resolve())
        if first is not None:
            also = f" (also as {first})" if first != run else ""
            raise UserError(f"{run}: named twice{also}; name each shard's folder once")
        seen[run.resolve()] = run


def _merged_settings(run_dirs: list[Path], dest: Path) -> dict | None:
    """The shards' settings, which must be those of `dest` when it has a record already (checked
    here, so that a refused merge leaves `dest` untouched). `dest`'s own when the shards have none."""
    settings = same_settings(run_dirs)
    recorded = read_settings(dest).get("evaluate") if dest.is_dir() else None
    if settings is not None and recorded is not None:
        mine = {k: v for k, v in recorded.items() if k in settings}
        check_same_settings(mine, settings, str(dest), "merge into a new folder (--out NEW_DIR)")
    return settings if settings is not None else recorded


class _Seen(NamedTuple):
    """The first dialogue found for a card: where (a dialogue file), and whether in `--out`."""

    place: Path
    dialogue: Dialogue
    in_out: bool


def _plan(
    dest: Path, by_file: dict[str, list[tuple[Path, Dialogue]]], order: dict, settings: dict | None
) -> dict[str, FilePlan]:
    """Per dialogue file: what `dest` holds already and what the shards add; UserError on two
    different dialogues for one card (in two shards, or in a shard and `dest`)."""
    plans = {}
    for name, found in sorted(by_file.items()):
        plan = FilePlan()
        seen = _read_out(dest / "dialogues" / name, settings, plan)
        for path, dialogue in found:
            before = seen.get(dialogue.key)
            _check_same(before, path, dialogue)
            if before is None:
                seen[dialogue.key] = _Seen(path, dialogue, in_out=False)
                plan.added.append(dialogue)
            elif not before.in_out:  # the same dialogue in two shards: overlapping shards
                plan.duplicated.append(dialogue.card_id)
        plan.added.sort(key=lambda d: order.get(d.key, len(order)))
        plan.keys = set(seen)
        plans[name] = plan
    return plans


def _read_out(path: Path, settings: dict | None, plan: FilePlan) -> dict[tuple[int, str], _Seen]:
    """The dialogues `--out` holds already in `path` (none if it does not exist), by card; its text
    goes to `plan.existing`, kept as it is."""
    seen: dict[tuple[int, str], _Seen] = {}
    if not path.is_file():
        return seen
    existing = list(read_dialogues(path))  # a DataError naming the line if one is not a dialogue
    if settings is not None:
        check_against_settings(path, existing, settings)
    for dialogue in existing:
        _check_same(seen.get(dialogue.key), path, dialogue)
        seen.setdefault(dialogue.key, _Seen(path, dialogue, in_out=True))
    plan.existing = path.read_text(encoding="utf-8")
    plan.n_existing = len(seen)
    return seen


def transcript(dialogue: Dialogue) -> tuple:
    """What makes a completed dialogue the dialogue it is (see TURN_IDENTITY)."""
    turns = tuple(tuple(getattr(t, f) for f in TURN_IDENTITY) for t in dialogue.turns)
    return (dialogue.key, *(getattr(dialogue, f) for f in DIALOGUE_IDENTITY), turns)


def _check_same(before: _Seen | None, path: Path, dialogue: Dialogue) -> None:
    """UserError naming both files when `dialogue` and the one seen `before` for its card differ."""
    if before is None or transcript(before.dialogue) == transcript(dialogue):
        return
    where = f"{before.place} and {path}" if before.place != path else f"{path} (twice)"
    raise UserError(
        f"{where}: card {dialogue.card_id} ({dialogue.language}) has two different completed dialogues "
        f"({_difference(before.dialogue, dialogue)}); merging would drop one: keep the one you want (delete "
        "the other's line) and merge again, or merge into a new folder (--out NEW_DIR)"
    )


def _difference(a: Dialogue, b: Dialogue) -> str:
    """Where two dialogues of one card first differ, in words."""
    for field in DIALOGUE_IDENTITY:
        if getattr(a, field) != getattr(b, field):
            return f"{field} differs"
    for i, (x, y) in enumerate(zip(a.turns, b.turns, strict=False), 1):
        if any(getattr(x, f) != getattr(y, f) for f in TURN_IDENTITY):
            return f"turn {i} differs"
    return f"{len(a.turns)} and {len(b.turns)} turns"


def _write_merged(
    run_dirs: list[Path], dest: Path, plans: dict[str, FilePlan], order: dict, shards: list[int], count: int
) -> dict[str, Any]:
    (dest / "dialogues").mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "runs": [str(r) for r in run_dirs],
        "shards": shards,
        "shard_count": count,
        "missing_shards": sorted(set(range(count)) - set(shards)),
        "already_in_out": {},
        "files": {},
    }
    for name, plan in plans.items():
        path = dest / "dialogues" / name
        if plan.added or not path.exists():  # what is there already stays as it is, byte for byte
            existing = plan.existing + ("\n" if plan.existing and not plan.existing.endswith("\n") else "")
            lines = [json.dumps(d.to_dict(), ensure_ascii=False) + "\n" for d in plan.added]
            atomic_write_text(path, existing + "".join(lines))
        language = name.rsplit("__", 1)[-1].removesuffix(".jsonl")
        missing = sorted(card for card, lang in order if lang == language and (card, lang) not in plan.keys)
        report["already_in_out"][name] = plan.n_existing
        report["files"][name] = {
            "dialogues": len(plan.keys),
            "missing": missing,
            "duplicated": sorted(plan.duplicated),
        }
    atomic_write_text(dest / "merge_report.json", json.dumps(report, indent=2) + "\n")
    return report


def _read_manifest(path: Path, run: Path) -> dict[str, Any]:
    """An evaluate.py run's manifest; DataError if it is not one (not JSON, no `config.cards`)."""
    if not path.exists():
        raise UserError(f"{path}: missing; is {run} the output directory of an evaluate.py run?")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(path, None, f"not a JSON manifest ({err})") from None
    if not isinstance(manifest, dict) or not isinstance((manifest.get("config") or {}).get("cards"), dict):
        raise DataError(path, None, "not the manifest of an evaluate.py run (no config.cards)")
    return manifest


def _selection(path: Path, manifest: dict[str, Any]) -> tuple[CardSelection, Shard]:
    """The cards and the shard a run's manifest says it played; DataError naming the file if not."""
    config = manifest["config"]
    # runs from before `cards.subset` (issue 22) or without `shard` selected all cards, unsharded
    cards = {"subset": None, **config["cards"]}
    shard = config.get("shard") or {"index": 0, "count": 1}
    try:
        return load_node("cards", CardSelection, cards), load_node("shard", Shard, shard)
    except ConfigError as err:
        raise DataError(path, None, f"its config: {err}") from None


def merge_summary(report: dict[str, Any], dest: Path) -> tuple[list[str], int]:
    """The lines `esc dialogues merge` prints for a merge report, and the number of problems
    (dialogues missing or duplicated, shards missing): a merge with problems exits with 1."""
    lines, problems = [], 0
    for name, info in report["files"].items():
        kept = report["already_in_out"].get(name, 0)
        lines.append(
            f"{name}: {info['dialogues']} dialogues"
            + (f" ({kept} already in {dest})" if kept else "")
            + f", {len(info['missing'])} missing, {len(info['duplicated'])} duplicated"
        )
        problems += len(info["missing"]) + len(info["duplicated"])
    if report["missing_shards"]:
        lines.append(f"missing shards: {report['missing_shards']} of {report['shard_count']}")
        problems += len(report["missing_shards"])
    lines.append(f"merged into {dest} (report: {dest / 'merge_report.json'})")
    return lines, problems
