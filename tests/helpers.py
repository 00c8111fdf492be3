"""Test helpers: compose the real Hydra config, shrink it, and run the real entry points."""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


HYDRA_SCRIPTS = ("train.py", "evaluate.py", "rank.py", "build_cards.py")


def run_entry(
    script: str,
    args: list[str],
    timeout: float = 600,
    env: dict[str, str] | None = None,
    process: bool = False,
) -> subprocess.CompletedProcess:
    """Run a repo entry point (`train.py ARGS`, or `-m MODULE ARGS`) as a user would, capturing its
    exit code and output; `env` adds environment variables. In this process (no 4-7 s of imports per
    run), unless `process`: a test whose subject is the process (signals, kill -9, what a fresh
    interpreter prints or loads, the shell's command line) starts one; `timeout` bounds that process."""
    env = {"WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0", "PYTHONUNBUFFERED": "1", **(env or {})}
    if process:
        return subprocess.run(
            [sys.executable, script, *args],
            cwd=REPO_ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return run_in_process([script, *args], env)


def run_in_process(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python SCRIPT ARGS` / `python -m MODULE ARGS` run in this process: its exit code, and what it
    printed to stdout and stderr (Python-level writes; its log records included). The environment,
    `sys.argv`, the working folder, the root logger and Hydra's global state (its config included) are
    restored after it."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    out, err = _Output(), _Output()
    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    os.environ.update(env or {})
    os.chdir(REPO_ROOT)
    code: object = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            _point_library_handlers_at(err)
            try:
                if argv[0] == "-m":
                    sys.argv = [argv[1], *argv[2:]]
                    module = importlib.import_module(argv[1])
                    if hasattr(module, "__path__"):  # a package runs its __main__
                        module = importlib.import_module(f"{argv[1]}.__main__")
                    code = module.main(argv[2:])
                else:
                    sys.argv = [str(REPO_ROOT / argv[0]), *argv[1:]]
                    runpy.run_path(str(REPO_ROOT / argv[0]), run_name="__main__")
            except SystemExit as exit_:
                code = exit_.code
            finally:
                _point_library_handlers_at(sys.__stderr__)
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None  # the run's Hydra config, which code after it must not see
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
    if isinstance(code, str):  # sys.exit("message"): printed to stderr, exit code 1
        err.write(code + "\n")
        code = 1
    return subprocess.CompletedProcess(argv, int(code or 0), out.getvalue(), err.getvalue())


class _Output(io.StringIO):
    """What a run printed; kept when a library closes the stream it was given (a fresh process's
    stderr is not closed by a handler's close either)."""

    def close(self) -> None:
        pass


def _point_library_handlers_at(stream: object) -> None:
    """Log handlers that libraries make when imported keep the stderr of whoever imported them (a
    pytest capture, an earlier run's buffer): point them at `stream`, as a fresh process has them on
    its own stderr. Every `logging.config.dictConfig` (Hydra's, each run) closes every handler ever
    made, and absl's (imported by rouge-score) closes its stream unless that is a `sys` standard
    stream, so none may be left on a capture that a later test still writes to. Handlers on their own
    files (torch's trace log) and logging's last resort (whatever sys.stderr is) are left alone."""
    for ref in list(logging._handlerList):  # every handler alive, attached to a logger or not
        handler = ref()
        if not isinstance(handler, logging.StreamHandler) or isinstance(handler, logging.FileHandler):
            continue
        if isinstance(getattr(type(handler), "stream", None), property):
            continue
        if type(handler).__module__.startswith("_pytest") or handler.stream is stream:
            continue  # pytest's own (caplog, the report's log section) keep their buffers
        old = handler.stream
        on_stderr = old is sys.__stderr__ or isinstance(old, _Output) or getattr(old, "closed", False)
        if not on_stderr and type(old).__module__ not in ("_pytest.capture", "esc.masking"):
            continue  # a handler on stdout or on a stream of its own
        handler.stream = stream  # not setStream: it flushes the old stream first
        handler.__dict__.pop("flush", None)  # transformers binds the old stream's flush


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name` that `build(folder)` fills, built once per test run: the first of pytest-xdist's
    workers to ask builds it under a lock in the run's shared temp root, the others wait and reuse
    it. Whoever uses it reads it only (copy it to change it). A build that failed is tried again."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this run
    folder, done = root / f"once-{name}", root / f"once-{name}.done"
    with FileLock(str(root / f"once-{name}.lock")):
        if not done.exists():
            if folder.exists():
                shutil.rmtree(folder)  # a build that failed half-way
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def run_job(job: str, cfg: Any) -> Any:
    """A job called as its entry point calls it, on a config composed here: the config validated
    once, then the job given the config and the sections `validate` returned (`evaluate.py`,
    `rank.py`, `build_cards.py`)."""
    from esc.cards.construct.run import build_cards
    from esc.config_schema import validate
    from esc.evaluate.run import evaluate
    from esc.rank.run import rank

    jobs = {"evaluate": evaluate, "rank": rank, "build_cards": build_cards}
    return jobs[job](cfg, validate(cfg, job))


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
