"""Keep credentials out of everything a run writes: manifest, Hydra's `.hydra/` files, W&B, logs.

Two nets, because a key can arrive by many roads (an environment variable, a config value, a header
in `extra_body`, a `+hf_token=...` override on the command line):

- by *key*: a mapping entry whose name looks like a credential (`api_key`, `token`, `Authorization`,
  ...) has its value replaced by ``***``;
- by *value*: every secret value known to this process -- credential-like environment variables,
  the variables a config names in `api_key_env`, credential-like config entries and command-line
  overrides -- is replaced by ``***`` wherever it appears, inside any string.

`RedactHydraFiles` is a Hydra callback (conf/hydra/default.yaml) that rewrites the files Hydra saves
into each run folder (`.hydra/config.yaml`, `overrides.yaml`, `hydra.yaml`) and a sweep's
`multirun.yaml` through the same nets.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

MASK = "***"
#: key names that hold credentials (matched at the end of the name, case-insensitive)
SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|password|passwd|token|authorization|credentials?|cookie|bearer)$", re.IGNORECASE
)
#: credential-like names that are not credentials
NOT_SECRET = frozenset(
    {"api_key_env", "pad_token", "eos_token", "bos_token", "unk_token", "max_new_tokens", "max_tokens"}
)
#: values shorter than this are never treated as secrets (they would mask ordinary words)
MIN_SECRET_LENGTH = 8


def is_secret_key(name: object) -> bool:
    text = str(name)
    return text not in NOT_SECRET and not text.endswith("_env") and bool(SECRET_KEY.search(text))


def _config_secrets(obj: Any, found: set[str], env_names: set[str]) -> None:
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if str(key).endswith("api_key_env") and isinstance(value, str):
                env_names.add(value)
            if is_secret_key(key) and isinstance(value, str | int) and not isinstance(value, bool):
                found.add(str(value))
            _config_secrets(value, found, env_names)
    elif isinstance(obj, list | tuple):
        for value in obj:
            _config_secrets(value, found, env_names)


def _override_secrets(args: Iterable[str]) -> set[str]:
    found = set()
    for arg in args:
        key, sep, value = str(arg).lstrip("+~").partition("=")
        if sep and is_secret_key(key.rsplit(".", 1)[-1]):
            found.add(value.strip("'\""))
    return found


def secret_values(config: Any = None, argv: Iterable[str] | None = None) -> list[str]:
    """Every secret value this process knows of, longest first (so that longer ones mask first)."""
    found: set[str] = set()
    env_names = {name for name in os.environ if is_secret_key(name)}
    _config_secrets(config, found, env_names)
    found |= _override_secrets(sys.argv[1:] if argv is None else argv)
    found |= {os.environ[name] for name in env_names if os.environ.get(name)}
    found = {value.strip() for value in found}
    found |= {value.split()[-1] for value in found if " " in value}  # "Bearer <key>": the key alone too
    return sorted((v for v in found if len(v) >= MIN_SECRET_LENGTH and v != MASK), key=len, reverse=True)


def scrub_text(text: str, values: Iterable[str]) -> str:
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact(obj: Any, values: Iterable[str] | None = None) -> Any:
    """A copy of `obj` with credential-like entries masked and every known secret value masked.

    `values`: the secret values to mask inside strings (default: `secret_values(obj)`).
    """
    values = list(secret_values(obj) if values is None else values)

    def walk(item: Any) -> Any:
        if isinstance(item, Mapping):
            return {
                k: (MASK if is_secret_key(k) and v not in (None, "") else walk(v)) for k, v in item.items()
            }
        if isinstance(item, list | tuple):
            return [walk(v) for v in item]
        if isinstance(item, str):
            return scrub_text(item, values)
        return item

    return walk(obj)


def redact_command(argv: Iterable[str], values: Iterable[str]) -> list[str]:
    """A command line with credential-like overrides (`+hf_token=...`) and secret values masked."""
    out = []
    for arg in argv:
        key, sep, _ = str(arg).partition("=")
        if sep and is_secret_key(key.lstrip("+~").rsplit(".", 1)[-1]):
            arg = f"{key}={MASK}"
        out.append(scrub_text(str(arg), values))
    return out


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


def scrub_file(path: Path, values: Iterable[str]) -> bool:
    """Mask secrets in a YAML file (Hydra's): parsed, so that a value YAML folded over two lines is
    still found; credential-like keys and `key=value` overrides are masked too. True if changed."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
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
    if clean == data:
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(yaml.safe_dump(clean, sort_keys=False, allow_unicode=True), encoding="utf-8")
    os.replace(tmp, path)
    return True


class RedactHydraFiles(Callback):
    """Hydra callback: mask secrets in the config files Hydra saved for this job (and the sweep)."""

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        from hydra.types import RunMode
        from omegaconf import OmegaConf

        hydra_cfg = config.hydra
        values = secret_values(OmegaConf.to_container(config, resolve=False), hydra_cfg.overrides.task)
        files: list[Path] = []
        if hydra_cfg.output_subdir is not None:
            files += sorted((Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir).glob("*.yaml"))
        if hydra_cfg.mode == RunMode.MULTIRUN:
            files.append(Path(hydra_cfg.sweep.dir) / "multirun.yaml")
        for path in files:
            if path.is_file():
                scrub_file(path, values)
