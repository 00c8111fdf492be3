"""What a trained judge learned from, so that it is measured only on what it never saw: ESC-RANK's
training writes `trained_on.json` beside its adapters; the agreement and correlation tasks read it
(through the judge's identity, or the manifest of the folder its score files sit in) and leave
those dialogues out."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.annotate.human_scores import Annotation
from esc.errors import DataError, UserError
from esc.jsonl import atomic_write_text
from esc.rundir import MANIFEST_FILE
from esc.runinfo import read_manifest

log = logging.getLogger(__name__)

TRAINED_ON = "trained_on.json"  # beside ESC-RANK adapters: the annotated dialogues they learned from


def write_trained_on(out: Path, annotations_path: str | None, learned: Iterable[Annotation]) -> Path:
    """OUT/trained_on.json: the dialogues an ESC-RANK run trained and validated on."""
    path = Path(out) / TRAINED_ON
    record = {
        "annotations": annotations_path,
        "dialogues": sorted({a.dialogue_id for a in learned}),
    }
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return path


def trained_dialogues(identity: Mapping[str, Any] | None) -> set[str]:
    """The annotated dialogues a judge learned from: named by `trained_on.json` beside (or above)
    its adapters. Empty for an untrained judge or adapters trained elsewhere."""
    files = ((identity or {}).get("adapters") or {}).get("files") or {}
    found: set[str] = set()
    for entry in files.values():
        adapter = Path(str(entry.get("path", "")))
        for folder in (adapter, adapter.parent):
            path = folder / TRAINED_ON
            if path.is_file():
                try:
                    found.update(json.loads(path.read_text(encoding="utf-8"))["dialogues"])
                except (json.JSONDecodeError, KeyError, TypeError) as err:
                    raise DataError(path, None, f"not a trained_on record ({err})") from None
                break
    return found


def folder_judge(path: Path) -> dict[str, Any] | list[dict[str, Any]] | None:
    """The judge identity in the manifest of the rank.py folder a score file sits in, if any (a
    jury's: each member's); a manifest that does not read is the DataError of `read_manifest`."""
    for manifest in (Path(path).parent.parent / MANIFEST_FILE, Path(path).parent / MANIFEST_FILE):
        if manifest.is_file():
            return read_manifest(manifest).judge
    return None


def held_out(annotations: Sequence[Annotation], trained: set[str], who: str) -> list[Annotation]:
    """`annotations` without the dialogues a trained judge learned from (logged)."""
    if not trained:
        return list(annotations)
    kept = [a for a in annotations if a.dialogue_id not in trained]
    dropped = len({a.dialogue_id for a in annotations}) - len({a.dialogue_id for a in kept})
    if dropped:
        log.warning("%s was trained on %d of these dialogues: left out, held-out ones only", who, dropped)
    if not kept:
        raise UserError(f"{who} was trained on every annotated dialogue of this split: nothing held out")
    return kept
