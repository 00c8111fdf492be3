"""One table for a training sweep: the held-out loss of every job (`+exp=train/esc_role_ablation`).

A Hydra callback: when the sweep ends it reads each job's `heldout.json` (written by
`esc.train.heldout.HeldOutEvaluation`) and `.hydra/overrides.yaml`, and writes `ablation.md` and
`ablation.csv` in the sweep folder, one row per job in job order, and prints the markdown. A job
that failed or did not write its figures is a row that says so. Rerunning only the table:
`esc ablation SWEEP_DIR`.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from esc.jsonl import atomic_write_text

COLUMNS = ("job", "variant", "what", "train rows", "steps", "before", "after", "change", "change %")


def _job_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    rows = []
    jobs = sorted(
        (p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
    )
    for job in jobs:
        config_file = job / ".hydra" / "config.yaml"
        config = yaml.safe_load(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        variant = (config or {}).get("variant") or {}
        overrides_file = job / ".hydra" / "overrides.yaml"
        overrides = (
            yaml.safe_load(overrides_file.read_text(encoding="utf-8")) if overrides_file.is_file() else []
        )
        row: dict[str, Any] = {
            "job": job.name,
            "variant": variant.get("name") or " ".join(overrides or []),
            "what": variant.get("what", ""),
        }
        figures = job / "heldout.json"
        if figures.is_file():
            result = json.loads(figures.read_text(encoding="utf-8"))
            row.update(
                {
                    "train rows": result.get("train_rows"),
                    "steps": result["step"],
                    "before": f"{result['before']:.4f}",
                    "after": f"{result['after']:.4f}",
                    "change": f"{result['change']:+.4f}",
                    "change %": f"{100 * result['change'] / result['before']:+.1f}%",
                }
            )
        else:
            row["after"] = "no heldout.json (failed?)"
        rows.append(row)
    return rows


def write_table(sweep_dir: Path) -> str:
    """Write `ablation.md` and `ablation.csv` for the jobs under `sweep_dir`; return the markdown."""
    sweep_dir = Path(sweep_dir)
    rows = _job_rows(sweep_dir)
    first = next((json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/heldout.json"))), None)
    lines = []
    if first:
        lines.append(
            f"Held-out loss per role-player token, {first['source']} ({first['dialogues']} dialogues, "
            f"{first['tokens']:,} tokens), before (base model) and after training.\n"
        )
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in COLUMNS) + " |")
    markdown = "\n".join(lines) + "\n"
    atomic_write_text(sweep_dir / "ablation.md", markdown)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(sweep_dir / "ablation.csv", buffer.getvalue())
    return markdown


class HeldOutTable(Callback):
    """Hydra callback (`hydra.callbacks`): the table of a sweep's held-out losses at its end."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir():
            print(f"\n{write_table(sweep_dir)}Table: {sweep_dir / 'ablation.md'}")
