"""Keep credentials out of everything a run writes: manifest, Hydra's `.hydra/` files, W&B, logs.

The filter itself (which values are secrets; masking them in a text) is `esc.secrets.redaction`, below every
other module so that the file writers use it too. Two nets, because a key can arrive by many roads
(an environment variable, a config value, a header in `extra_body`, a `+hf_token=...` override, the
password of a `base_url`, a model that echoes its key in a reply):

- by *key*: a mapping entry whose name looks like a credential (`api_key`, `token`, `Authorization`,
  ...) has its value replaced by ``***``;
- by *value*: every secret value known to this process -- credential-like environment variables,
  the variables a config names in `api_key_env`, credential-like config entries and command-line
  overrides, URL passwords -- is replaced by ``***`` wherever it appears, inside any string.

`RedactHydraFiles` is a Hydra callback (conf/hydra/default.yaml) that registers the job's config
secrets (`esc.secrets.redaction.remember_secrets`), keeps Hydra's record of a job (`.hydra/config.yaml`,
`overrides.yaml`, `hydra.yaml`) masked by the same nets, and only written once the run folder has
accepted the run (`save_hydra_files`, called by `esc.rundir.RunFolder`); it masks a sweep's
`multirun.yaml` too. `RedactLogFilter` masks what the logs say, the console included (Hydra's
launcher echoes each job's overrides: `#0 : +hf_token=...`); `console_masked` masks every print.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import netrc
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from esc.jsonl import atomic_write_text
from esc.secrets.redaction import (  # noqa: F401  (the filter's names, kept importable from here)
    MASK,
    is_secret_key,
    redact,
    remember_secrets,
    scrub_text,
    secret_values,
)


def redact_command(argv: Iterable[str], values: Iterable[str]) -> list[str]:
    """A command line with credential-like overrides (`+hf_token=...`) and secret values masked."""
    out = []
    for arg in argv:
        key, sep, _ = str(arg).partition("=")
        if sep and is_secret_key(key.lstrip("+~").rsplit(".", 1)[-1]):
            arg = f"{key}={MASK}"
        out.append(scrub_text(str(arg), values))
    return out


def command_redacted(values: Iterable[str]) -> list[str]:
    """This process's command line (the script's name and its arguments) with secrets masked: what a
    run's manifest records. This module and `esc.secrets.redaction` (the secret values of overrides) are the
    places outside argument parsing that read `sys.argv`: to record it masked, and to mask it for the
    libraries that record it themselves."""
    return redact_command([Path(sys.argv[0]).name, *sys.argv[1:]], values)


@contextlib.contextmanager
def argv_redacted(config: Any = None) -> Iterator[None]:
    """`sys.argv` with secrets masked while the block runs: for libraries that record the command
    line (W&B's run file). Only for the block: child processes (DDP ranks) must get the real one."""
    saved = list(sys.argv)
    sys.argv[:] = redact_command(saved, secret_values(config, saved[1:]))
    try:
        yield
    finally:
        sys.argv[:] = saved


def scrub_yaml(text: str, values: Iterable[str]) -> str:
    """`text`, a YAML document (Hydra's), with secrets masked: parsed, so that a value YAML folded over
    two lines is still found; credential-like keys and `key=value` overrides are masked too. The text
    itself when there is nothing to mask."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    values = list(values)

    def overrides(item: Any) -> Any:
        if isinstance(item, str):
            return redact_command([item], values)[0]
        if isinstance(item, list):
            return [overrides(v) for v in item]
        if isinstance(item, dict):
            return {k: overrides(v) for k, v in item.items()}
        return item

    clean = overrides(redact(data, values))
    return text if clean == data else yaml.safe_dump(clean, sort_keys=False, allow_unicode=True)


def scrub_file(path: Path, values: Iterable[str]) -> bool:
    """Mask secrets in a YAML file (`scrub_yaml`). True if changed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    clean = scrub_yaml(text, values)
    if clean == text:
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(clean, encoding="utf-8")
    os.replace(tmp, path)
    return True


#: `key=value` in running text (an override, possibly quoted in a list): the value ends at a space,
#: a quote, a comma or a closing bracket
_ASSIGNMENT = re.compile(r"(?P<key>[+~]*[\w.-]+)=(?P<value>[^\s'\",\])}]+)")


def mask_overrides(text: str, values: Iterable[str]) -> str:
    """`text` (a log message, a line of console output) with secret values, and the values of
    credential-like `key=value` overrides, masked."""

    def mask(match: re.Match[str]) -> str:
        key = match.group("key")
        return f"{key}={MASK}" if is_secret_key(key.lstrip("+~").rsplit(".", 1)[-1]) else match.group(0)

    return scrub_text(_ASSIGNMENT.sub(mask, text), values)


class _MaskedStream:
    """A text stream that masks secrets in what is written to it (`console_masked`)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(mask_overrides(text, secret_values()))  # what is known now (a config's too)
        return len(text)

    def close(self) -> None:
        """Never the real stream's: a library handler made while the mask was on (absl's) closes
        its stream when logging is configured again (every Hydra run does)."""
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding...: the real stream's
        return getattr(self._stream, name)


@contextlib.contextmanager
def console_masked() -> Iterator[None]:
    """`sys.stdout` and `sys.stderr` with secrets masked while the block runs: what Hydra writes
    itself (a sweep's `Error executing job with overrides: [..., '+hf_token=...']`) and every print."""
    saved = sys.stdout, sys.stderr
    masked: Any = _MaskedStream(sys.stdout), _MaskedStream(sys.stderr)
    sys.stdout, sys.stderr = masked
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


class RedactLogFilter(logging.Filter):
    """A logging filter (on the handlers of conf/hydra/job_logging/esc.yaml and hydra_logging/esc.yaml,
    console and file) that masks secrets in every record before it is written: Hydra's launcher
    echoes a sweep's overrides."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = mask_overrides(message, secret_values())
        if clean != message:
            record.msg, record.args = clean, None
        return True


#: Hydra's record of the job running in this process, masked: {output dir: {file name: text}}
_HYDRA_FILES: dict[str, dict[str, str]] = {}
HYDRA_SUBDIR = ".hydra"  # where Hydra keeps its record of a job (its default `hydra.output_subdir`)


def _folder_key(folder: str | os.PathLike[str]) -> str:
    return os.path.realpath(folder)


def _hydra_record(config: Any) -> dict[str, str]:
    """The three files Hydra writes for a job (`hydra.core.utils.run_job`), as its texts, masked."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict, read_write

    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    values = secret_values(OmegaConf.to_container(config, resolve=False), config.hydra.overrides.task)
    texts = {
        "config.yaml": OmegaConf.to_yaml(task),
        "hydra.yaml": OmegaConf.to_yaml(HydraConfig.instance().cfg),
        "overrides.yaml": OmegaConf.to_yaml(config.hydra.overrides.task),
    }
    return {name: scrub_yaml(text, values) for name, text in texts.items()}


def save_hydra_files(folder: str | os.PathLike[str]) -> list[Path]:
    """Write Hydra's record of this job (`.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml`,
    masked) into `folder` when it is the job's output folder; `esc.rundir.RunFolder` calls this once
    it has accepted the run, so a refused or failed start leaves the folder's record as it was.
    Returns the files written (none outside a Hydra job)."""

    texts = _HYDRA_FILES.get(_folder_key(folder))
    if not texts:
        return []
    subdir = Path(folder) / HYDRA_SUBDIR
    subdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts.items():
        atomic_write_text(subdir / name, text)
        written.append(subdir / name)
    return written


class RedactHydraFiles(Callback):
    """Hydra callback: keep this job's record for `save_hydra_files` (conf/hydra/default.yaml sets
    `hydra.output_subdir: null`, so that Hydra does not write it before the job could check the
    folder), and mask the files Hydra saved itself (a sweep's `multirun.yaml`, and `.hydra/` when
    `hydra.output_subdir` is set again)."""

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        from hydra.types import RunMode
        from omegaconf import OmegaConf

        hydra_cfg = config.hydra
        remember_secrets(OmegaConf.to_container(config, resolve=False))
        if hydra_cfg.output_subdir is None:
            _HYDRA_FILES[_folder_key(hydra_cfg.runtime.output_dir)] = _hydra_record(config)
        values = secret_values(OmegaConf.to_container(config, resolve=False), hydra_cfg.overrides.task)
        files: list[Path] = []
        if hydra_cfg.output_subdir is not None:
            files += sorted((Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir).glob("*.yaml"))
        if hydra_cfg.mode == RunMode.MULTIRUN:
            files.append(Path(hydra_cfg.sweep.dir) / "multirun.yaml")
        for path in files:
            if path.is_file():
                scrub_file(path, values)

    def on_job_end(self, config: Any, **kwargs: Any) -> None:
        _HYDRA_FILES.pop(_folder_key(config.hydra.runtime.output_dir), None)


def wandb_has_credentials() -> bool:
    """A W&B key in the environment (WANDB_API_KEY) or in ~/.netrc: whether W&B can go online."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
        return path.exists() and netrc.netrc(path).authenticators("api.wandb.ai") is not None
    except (netrc.NetrcParseError, OSError):
        return False
