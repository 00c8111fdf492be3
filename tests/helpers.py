"""Test helpers: compose the real Hydra config, shrink it, and run the real entry points."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from esc.paths import REPO_ROOT, data_dir

CONF_DIR = REPO_ROOT / "conf"

# A small, fast version of the ESC-Role job: the tiny model, a few dozen samples, no W&B.
FAST_TRAIN = [
    "model=tiny",
    "cpu_fallback=true",  # +exp=train/esc_role is a GPU recipe (cpu_fallback: false)
    "logger=csv",
    "trainer.accumulate_grad_batches=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.limit_val_batches=2",
    "trainer.enable_progress_bar=false",
    "datamodule.batch_size=2",
    "data.sources.esconv.max_samples=24",
    "data.sources.smile.max_samples=24",
    "data.roleplay_ratio=0.25",
]


requires_data = pytest.mark.skipif(
    not (data_dir() / "esconv").is_dir(), reason="third-party data missing: run `make data`"
)


def compose(overrides: list[str], output_dir: Path | str = "/tmp/esc-test-out", config_name: str = "train"):
    """The composed config for `overrides`, with `output_dir` set (no Hydra runtime in tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=[*overrides, f"output_dir={output_dir}"])


def conf_node(
    node: str, *changes: dict, overrides: list[str] | None = None, config_name: str = "train"
) -> dict:
    """The config node `node` as the real conf/ composes it (with `overrides`; plain, resolved), each of
    `changes` merged into it in turn (deeply; a list replaced): a node a test gives the code has
    every key conf/ gives it, as no code assumes a value for a key left out."""
    from omegaconf import OmegaConf

    base = OmegaConf.to_container(
        OmegaConf.select(compose(overrides or [], config_name=config_name), node), resolve=True
    )
    return OmegaConf.to_container(OmegaConf.merge(base, *changes))


def kill_entry_when(script: str, args: list[str], ready: Callable[[], bool], timeout: float = 300) -> None:
    """Start a repo entry point and SIGKILL it as soon as `ready()` holds (or it ends, or `timeout`
    passes): a run killed mid-way, as an out-of-memory killer or a preempted node does."""
    proc = subprocess.Popen(
        [sys.executable, script, *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not ready():
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def run_entry(
    script: str, args: list[str], timeout: float = 600, env: dict[str, str] | None = None, **kwargs
) -> subprocess.CompletedProcess:
    """Run a repo entry point (train.py, ...) as a user would, capturing its output; `env` adds
    environment variables."""
    env = {
        **os.environ,
        "WANDB_MODE": "disabled",
        "HYDRA_FULL_ERROR": "0",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, script, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def evaluate_config(
    out: Path, *overrides: str, roleplayer_backend: dict | None = None, target_backend: dict | None = None
):
    """A small `evaluate.py` config (tiny × tiny, 3 cards per language, no cache, no progress bar),
    optionally with another backend on either side."""
    from omegaconf import open_dict

    cfg = compose(
        [
            "roleplayer=tiny",
            "target=tiny",
            "cards.limit=3",
            "engine.progress=false",
            "cache.enabled=false",
            *overrides,
        ],
        output_dir=out,
        config_name="evaluate",
    )
    with open_dict(cfg):
        if roleplayer_backend:
            cfg.roleplayer.backend = roleplayer_backend
        if target_backend:
            cfg.target.backend = target_backend
    return cfg


def refused(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """The one `error:` line of an `esc` command refused with exit 2 (run in this process)."""
    from esc.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error:"), err
    return err
