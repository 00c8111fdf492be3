"""Experiment loggers from the `logger` config group; W&B goes offline rather than failing."""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from pytorch_lightning.loggers import CSVLogger, Logger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment

from esc.jsonl import atomic_write_text
from esc.masking import argv_redacted, redact, wandb_has_credentials

log = logging.getLogger(__name__)

CSV_LOGGERS = ("pytorch_lightning.loggers.CSVLogger", "lightning.pytorch.loggers.CSVLogger")


def build_loggers(
    logger_cfg: Mapping[str, Any] | None, config: Mapping[str, Any], start_step: int = 0
) -> list[Logger]:
    """Instantiate each configured logger. ``config`` (already redacted) is sent to W&B.

    Lightning's `CSVLogger` becomes a `ResumableCSVLogger`: training from step ``start_step`` (a
    resumed run) keeps the rows of earlier steps in metrics.csv and replaces the later ones.
    """
    loggers: list[Logger] = []
    for name, cfg in (logger_cfg or {}).items():
        if not cfg or "_target_" not in cfg:
            continue
        kwargs: dict[str, Any] = {}
        if cfg["_target_"] in CSV_LOGGERS:
            cfg = {**cfg, "_target_": f"{__name__}.ResumableCSVLogger"}
            kwargs["start_step"] = start_step
        if "Wandb" in str(cfg["_target_"]):
            mode = os.environ.get("WANDB_MODE")
            if mode is None and not wandb_has_credentials():
                log.warning(
                    "No W&B credentials (WANDB_API_KEY or ~/.netrc): logging to W&B offline; "
                    "sync later with `wandb sync`"
                )
                mode = "offline"
            if mode in ("offline", "disabled"):
                kwargs["offline"] = True
        logger = instantiate(cfg, **kwargs)
        if hasattr(logger, "log_hyperparams") and "Wandb" in str(cfg["_target_"]):
            with argv_redacted(config):  # W&B records the command line when its run starts
                logger.experiment  # noqa: B018  (starts the run now)
            logger.log_hyperparams(redact(config))
        log.info("Instantiated logger %s <%s>", name, cfg["_target_"])
        loggers.append(logger)
    return loggers


class AppendingExperimentWriter(ExperimentWriter):
    """Lightning's CSV writer, except that an existing metrics.csv is continued, never deleted.

    At the first write (not before, so a run that fails before training changes nothing), rows of
    steps from `start_step` on are dropped: the resumed run trains those steps again and logs them
    anew, so every step appears once. A fresh run (`start_step` 0) starts the file over.
    """

    def __init__(self, log_dir: str, start_step: int = 0) -> None:
        self.start_step = start_step
        self._trimmed = False
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:
        """Lightning deletes an existing metrics.csv here; this writer keeps it until `save`."""

    def save(self) -> None:
        if self.metrics and not self._trimmed:
            self._trim()
        super().save()

    def _trim(self) -> None:
        self._trimmed = True
        path = Path(self.metrics_file_path)
        if not path.is_file():
            return
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            rows = [row for row in reader if _row_step(row) < self.start_step]
        if not rows:
            path.unlink()
            return
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(path, text.getvalue())
        self.metrics_keys = header  # appended rows follow the existing columns


def _row_step(row: Mapping[str, str]) -> float:
    try:
        return float(row.get("step") or "nan")
    except ValueError:
        return float("nan")


class ResumableCSVLogger(CSVLogger):
    """`CSVLogger` writing through `AppendingExperimentWriter`: a resumed run continues metrics.csv."""

    def __init__(self, *args: Any, start_step: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start_step = start_step

    @property
    @rank_zero_experiment
    def experiment(self) -> AppendingExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = AppendingExperimentWriter(log_dir=self.log_dir, start_step=self.start_step)
        return self._experiment
