"""Join the outputs of sharded runs (SLURM array jobs) into one, reporting gaps and duplicates."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from esc.errors import DataError, UserError
from esc.interact.selection import select_cards
from esc.interact.store import check_against_settings, read_dialogues
from esc.jsonl import atomic_write_text
from esc.rundir import RunFolder, check_same_settings, read_settings


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


def merge_runs(run_dirs: list[Path], dest: Path) -> dict[str, Any]:
    """Merge `run_dirs/dialogues/*.jsonl` into `dest`, in the unsharded run's card order.

    The expected cards come from the shards' manifests (their `cards` config without the shard);
    the report lists, per file, missing card ids (no shard completed them) and duplicated ones.
    """
    manifests = []
    for run in run_dirs:
        path = Path(run) / "manifest.json"
        if not path.exists():
            raise UserError(f"{path}: missing; is {run} the output directory of an evaluate.py run?")
        manifests.append(_read_manifest(path))
    settings = same_settings(run_dirs)
    cards_cfgs = {json.dumps(m["config"]["cards"], sort_keys=True) for m in manifests}
    if len(cards_cfgs) > 1:
        raise UserError(
            "the runs selected different cards (their `cards` configs differ); merge runs of one grid"
        )
    shards = sorted((m["config"].get("shard") or {}).get("index", 0) for m in manifests)
    count = (manifests[0]["config"].get("shard") or {}).get("count", 1)
    order = {(c.id, c.language): i for i, c in enumerate(select_cards(manifests[0]["config"]["cards"]))}

    by_file: dict[str, list] = defaultdict(list)
    for run in run_dirs:
        for path in sorted((Path(run) / "dialogues").glob("*.jsonl")):
            if not path.name.endswith(".failed.jsonl"):
                dialogues = list(read_dialogues(path))
                if settings is not None:
                    check_against_settings(path, dialogues, settings)
                by_file[path.name].extend(dialogues)
    # the merged folder resumes like the shards (same settings); locked while it is written
    with RunFolder(dest, "evaluate" if settings is not None else "merge", settings):
        return _write_merged(run_dirs, dest, by_file, order, shards, count)


def _write_merged(
    run_dirs: list[Path], dest: Path, by_file: dict[str, list], order: dict, shards: list[int], count: int
) -> dict[str, Any]:
    (dest / "dialogues").mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "runs": [str(r) for r in run_dirs],
        "shards": shards,
        "shard_count": count,
        "missing_shards": sorted(set(range(count)) - set(shards)),
        "files": {},
    }
    for name, dialogues in sorted(by_file.items()):
        seen: dict[tuple[int, str], Any] = {}
        duplicated = []
        for dialogue in dialogues:
            if dialogue.key in seen:
                duplicated.append(dialogue.card_id)
            else:
                seen[dialogue.key] = dialogue
        language = name.rsplit("__", 1)[-1].removesuffix(".jsonl")
        expected = {key for key in order if key[1] == language}
        missing = sorted(card_id for card_id, lang in expected - set(seen))
        keys = sorted(seen, key=lambda k: order.get(k, len(order)))
        lines = [json.dumps(seen[key].to_dict(), ensure_ascii=False) + "\n" for key in keys]
        atomic_write_text(dest / "dialogues" / name, "".join(lines))
        report["files"][name] = {"dialogues": len(seen), "missing": missing, "duplicated": sorted(duplicated)}
    atomic_write_text(dest / "merge_report.json", json.dumps(report, indent=2) + "\n")
    return report


def _read_manifest(path: Path) -> dict[str, Any]:
    """An evaluate.py run's manifest; DataError if it is not one (not JSON, no `config.cards`)."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(path, None, f"not a JSON manifest ({err})") from None
    if not isinstance(manifest, dict) or not isinstance((manifest.get("config") or {}).get("cards"), dict):
        raise DataError(path, None, "not the manifest of an evaluate.py run (no config.cards)")
    return manifest
