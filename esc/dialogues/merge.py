"""Join the outputs of sharded runs (SLURM array jobs) into one, reporting gaps and duplicates."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from esc.errors import UserError
from esc.interact.selection import select_cards
from esc.interact.store import read_dialogues


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
        manifests.append(json.loads(path.read_text()))
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
                by_file[path.name].extend(read_dialogues(path))
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
        tmp = dest / "dialogues" / (name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for key in sorted(seen, key=lambda k: order.get(k, len(order))):
                fh.write(json.dumps(seen[key].to_dict(), ensure_ascii=False) + "\n")
        os.replace(tmp, dest / "dialogues" / name)
        report["files"][name] = {"dialogues": len(seen), "missing": missing, "duplicated": sorted(duplicated)}
    (dest / "merge_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
