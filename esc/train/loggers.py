"""Experiment loggers from the `logger` config group; W&B goes offline rather than failing."""

from __future__ import annotations

import logging
import netrc
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from pytorch_lightning.loggers import Logger

from esc.runinfo import redact

log = logging.getLogger(__name__)


def wandb_has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
        return path.exists() and netrc.netrc(path).authenticators("api.wandb.ai") is not None
    except (netrc.NetrcParseError, OSError):
        return False


def build_loggers(logger_cfg: Mapping[str, Any] | None, config: Mapping[str, Any]) -> list[Logger]:
    """Instantiate each configured logger. ``config`` (already redacted) is sent to W&B."""
    loggers: list[Logger] = []
    for name, cfg in (logger_cfg or {}).items():
        if not cfg or "_target_" not in cfg:
            continue
        kwargs: dict[str, Any] = {}
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
            logger.log_hyperparams(redact(config))
        log.info("Instantiated logger %s <%s>", name, cfg["_target_"])
        loggers.append(logger)
    return loggers
