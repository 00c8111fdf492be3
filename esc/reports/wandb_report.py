"""rank.py's reports on Weights & Biases (`wandb.enabled=true`): the leaderboard and agreement CSVs
as W&B tables and the charts as images, in one run per rank.py call.

Without credentials (WANDB_API_KEY or ~/.netrc) the run is written offline under OUT/wandb and
`wandb sync` uploads it later, as training does. The config sent is redacted (no API keys).
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.secrets import argv_redacted, redact, wandb_has_credentials

log = logging.getLogger(__name__)
TABLES = ("leaderboard.csv", "agreement.csv", "correlation.csv")


def _table(path: Path) -> Any:
    import wandb

    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return wandb.Table(columns=rows[0], data=rows[1:])


def log_reports(
    out: Path, settings: Mapping[str, Any], config: Mapping[str, Any], charts: Sequence[str] = ()
) -> str | None:
    """Log every report table of `out` (and the charts) to W&B; returns the run's folder."""
    import wandb

    mode = os.environ.get("WANDB_MODE") or ("online" if wandb_has_credentials() else "offline")
    if mode == "offline" and not os.environ.get("WANDB_MODE"):
        log.warning(
            "No W&B credentials: logging the reports offline under %s/wandb (`wandb sync` later)", out
        )
    with argv_redacted(config):  # W&B records the command line in its run file
        run = wandb.init(
            project=settings.get("project", "esc-eval"),
            entity=settings.get("entity"),
            name=config.get("run_name"),
            group=config.get("task_name", "rank"),
            job_type=f"rank-{config.get('mode', 'score')}",
            config=redact(dict(config)),
            dir=str(out),
            mode=mode,
        )
    try:
        payload: dict[str, Any] = {
            path.stem: _table(path) for name in TABLES if (path := out / name).is_file()
        }
        payload.update({f"charts/{Path(c).stem}": wandb.Image(str(c)) for c in charts})
        run.log(payload)
        return str(run.dir) if mode != "disabled" else None
    finally:
        run.finish()


def log_run(out: Path, resolved: Mapping[str, Any], charts: Sequence[str] = ()) -> str | None:
    """`log_reports` when the run's config enables W&B (`wandb.enabled`); the W&B folder or None."""
    settings = resolved.get("wandb") or {}
    if not settings.get("enabled"):
        return None
    return log_reports(out, settings, resolved, charts)
