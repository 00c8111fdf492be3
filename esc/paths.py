"""Where the repo keeps data and caches; each location can be moved by an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """Third-party data filled by `make data` (git-ignored). Override with ESC_DATA_DIR."""
    return Path(os.environ.get("ESC_DATA_DIR", REPO_ROOT / "data"))


def cache_dir() -> Path:
    """Built artefacts such as the embedded tiny model. Override with ESC_CACHE_DIR."""
    return Path(os.environ.get("ESC_CACHE_DIR", REPO_ROOT / ".cache"))


SHARED_DATA_ENV = "ESC_SHARED_DATA"


def shared_data_dir() -> Path:
    """The project's read-only copy of the public datasets, when this machine has one."""
    return Path(os.environ.get(SHARED_DATA_ENV, REPO_ROOT.parent / "shared" / "data"))
