"""rank.py's reports on Weights & Biases (`wandb.enabled=true`): every report table that has a CSV
(leaderboard.csv, agreement.csv, correlation.csv, ...: `esc.reports.result`) as a W&B table, the
charts as images, and (mode=score) a dialogue table, one row per judged dialogue
with its transcript and its scores, as the report site shows them; one run per rank.py call.

Without credentials (WANDB_API_KEY or ~/.netrc) the run is written offline under OUT/wandb and
`wandb sync` uploads it later, as training does. The config and the transcripts sent are redacted
(no API keys, even one a model echoed).
"""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.config_rules import Settings
from esc.dialogues.store import played_by_source
from esc.masking import argv_redacted, redact, secret_values, wandb_has_credentials
from esc.prompts.speakers import speaker_lines
from esc.reports.result import read_result, table_csv
from esc.scoring.judge import VALID
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord

log = logging.getLogger(__name__)


class WandbSettings(Settings):
    """`wandb` (conf/rank.yaml): rank.py's reports on W&B."""

    enabled: bool
    project: str
    entity: str | None  # null: the credentials' default entity


def report_tables(out: Path) -> dict[str, list[list[str]]]:
    """Every table of OUT's reports (OUT/<kind>.result.json) that names a CSV, as that CSV's rows
    (`table_csv`: header first), by the CSV's stem: what W&B shows is what the CSV holds."""
    found = {}
    for path in sorted(Path(out).glob("*.result.json")):
        for table in read_result(path).tables():
            if table.csv:
                found[Path(table.csv).stem] = list(csv.reader(io.StringIO(table_csv(table))))
    return found


def _table(rows: list[list[str]]) -> Any:
    import wandb

    return wandb.Table(columns=rows[0], data=rows[1:])


DIALOGUE_COLUMNS = ("dialogue_id", "target", "roleplayer", "judge", "language", "card_id", "transcript")


def dialogue_rows(records: Sequence[ScoreRecord]) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows) of the dialogue table: per (dialogue, judge), its transcript ("Seeker: ..." /
    "Supporter: ..." lines, read from the dialogue file the scores name; empty when it is gone) and
    each dimension's score (null when not valid), then their average on 0-100."""
    transcripts = {
        (source, card_id, d.language): speaker_lines(d.lines(), "Seeker", "Supporter")
        for source, by_card in played_by_source(r.source for r in records if r.source).items()
        for card_id, d in by_card.items()
    }
    by_dialogue: dict[tuple[str, str], dict[str, ScoreRecord]] = {}
    for r in records:
        by_dialogue.setdefault((r.dialogue_id, r.judge), {})[r.dimension] = r
    rows = []
    for (dialogue_id, judge), dims in sorted(by_dialogue.items()):
        first = next(iter(dims.values()))
        scores = [dims[k].score if k in dims and dims[k].status == VALID else None for k in DIMENSION_KEYS]
        valid = [x for x in scores if x is not None]
        transcript = transcripts.get((first.source or "", first.card_id, first.language), "")
        average = round(sum(valid) / len(valid) / 4 * 100, 2) if valid else None
        head = [dialogue_id, first.target, first.roleplayer, judge, first.language, first.card_id, transcript]
        rows.append([*head, *scores, average])
    return [*DIALOGUE_COLUMNS, *DIMENSION_KEYS, "average_100"], rows


def log_reports(
    out: Path, settings: WandbSettings, config: Mapping[str, Any], charts: Sequence[str] = (),
    records: Sequence[ScoreRecord] = (),
) -> str | None:  # fmt: skip
    """Log every report table of `out` (and the charts, and the dialogue table of `records`) to W&B;
    returns the run's folder."""
    import wandb

    mode = os.environ.get("WANDB_MODE") or ("online" if wandb_has_credentials() else "offline")
    if mode == "offline" and not os.environ.get("WANDB_MODE"):
        log.warning(
            "No W&B credentials: logging the reports offline under %s/wandb (`wandb sync` later)", out
        )
    with argv_redacted(config):  # W&B records the command line in its run file
        run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            name=config["run_name"],
            group=config["task_name"],
            job_type=f"rank-{config['mode']}",
            config=redact(dict(config)),
            dir=str(out),
            mode=mode,
        )
    try:
        payload: dict[str, Any] = {name: _table(rows) for name, rows in report_tables(out).items()}
        payload.update({f"charts/{Path(c).stem}": wandb.Image(str(c)) for c in charts})
        if records:
            columns, rows = dialogue_rows(records)
            payload["dialogues"] = wandb.Table(columns=columns, data=redact(rows, secret_values(config)))
        run.log(payload)
        return str(run.dir) if mode != "disabled" else None
    finally:
        run.finish()


def log_run(
    out: Path,
    settings: WandbSettings,
    resolved: Mapping[str, Any],
    charts: Sequence[str] = (),
    records: Sequence[ScoreRecord] = (),
) -> str | None:
    """`log_reports` when the run's `wandb` section enables W&B; the W&B folder or None."""
    if not settings.enabled:
        return None
    return log_reports(out, settings, resolved, charts, records)
