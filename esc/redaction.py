"""The secret filter every written text passes: which values are secrets, and masking them.

A secret is known by its *key* (a mapping entry or `key=value` override named like a credential:
`api_key`, `token`, `Authorization`, ...) or by its *value*: credential-like environment variables,
the variables a config names in `api_key_env`, the values of credential-like config entries and
overrides, and the password of a URL (`http://user:PASSWORD@host/v1`) anywhere in a config, an
override or the environment. `known_secrets()` is every value this process knows of: what the
environment and command line hold, plus what an entry point registered from its config with
`remember_secrets` (a key written in a YAML file is in neither).

`scrub` masks the known values in a text. The writers of `esc.jsonl` (every dialogue, score and
report file), the report site's pages, the W&B payload, the request cache and the log and console
filters of `esc.secrets` call it, so a key a model echoes in its reply is masked in every file a
run writes. This module is below every other (it imports nothing from `esc`) so that the file
writers can use it.
"""

from __future__ import annotations

import base64
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

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
#: the user information of a URL: scheme://USER:PASSWORD@host
#: (no quotes, brackets or backslashes inside: masking never reaches across a JSON or HTML string's end)
URL_USERINFO = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://(?P<user>[^/@\s:\"'<>\\]*):(?P<password>[^/@\s\"'<>\\]+)@"
)

_remembered: set[str] = set()
_lock = threading.Lock()


def is_secret_key(name: object) -> bool:
    text = str(name)
    return text not in NOT_SECRET and not text.endswith("_env") and bool(SECRET_KEY.search(text))


def url_passwords(text: str) -> set[str]:
    """The passwords of the URLs in `text` (`http://user:PASSWORD@host`), as written and decoded, and
    the HTTP Basic credentials they become (base64 of `user:password`: what the client sends, and what a
    careless server echoes)."""
    found: set[str] = set()
    if "@" not in text:
        return found
    for match in URL_USERINFO.finditer(text):
        user, password = match.group("user"), match.group("password")
        found |= {password, unquote(password)}
        basic = f"{unquote(user)}:{unquote(password)}".encode()
        found.add(base64.b64encode(basic).decode("ascii"))
    return found


def strip_url_credentials(text: str) -> str:
    """`text` with the user information of every URL in it masked: `http://***@host/v1`."""
    return URL_USERINFO.sub(lambda m: m.group(0).split("://", 1)[0] + f"://{MASK}@", text)


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
    elif isinstance(obj, str):
        found |= url_passwords(obj)


def _override_secrets(args: Iterable[str]) -> set[str]:
    found = set()
    for arg in args:
        key, sep, value = str(arg).lstrip("+~").partition("=")
        if sep and is_secret_key(key.rsplit(".", 1)[-1]):
            found.add(value.strip("'\""))
        found |= url_passwords(str(arg))
    return found


def secret_values(config: Any = None, argv: Iterable[str] | None = None) -> list[str]:
    """Every secret value this process knows of, those of `config` and of the command line (`argv`,
    default `sys.argv`) included, longest first (so that longer ones mask first)."""
    found: set[str] = set()
    env_names = {name for name in os.environ if is_secret_key(name)}
    _config_secrets(config, found, env_names)
    found |= _override_secrets(sys.argv[1:] if argv is None else argv)
    found |= {os.environ[name] for name in env_names if os.environ.get(name)}
    for value in os.environ.values():
        found |= url_passwords(value)  # a proxy URL with a password, say
    with _lock:
        found |= _remembered
    found = {value.strip() for value in found}
    found |= {value.split()[-1] for value in found if " " in value}  # "Bearer <key>": the key alone too
    return sorted((v for v in found if len(v) >= MIN_SECRET_LENGTH and v != MASK), key=len, reverse=True)


def remember_secrets(config: Any) -> None:
    """Register the secrets of `config` (a plain container) for the rest of this process: an entry point
    calls it once its config is composed, so that every later write masks them too."""
    found: set[str] = set()
    env_names: set[str] = set()
    _config_secrets(config, found, env_names)
    found |= {os.environ[name] for name in env_names if os.environ.get(name)}
    with _lock:
        _remembered.update(v.strip() for v in found if len(v.strip()) >= MIN_SECRET_LENGTH)


def forget_secrets() -> None:
    """Drop what `remember_secrets` registered (tests that run several jobs in one process)."""
    with _lock:
        _remembered.clear()


def known_secrets() -> list[str]:
    """`secret_values()`: the environment's, the command line's and the remembered configs'."""
    return secret_values()


def scrub_text(text: str, values: Iterable[str]) -> str:
    """`text` with each of `values` masked, and URL passwords masked."""
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return strip_url_credentials(text) if "@" in text else text


def scrub(text: str) -> str:
    """`text` with every known secret masked: what each writer calls on what it writes."""
    return scrub_text(text, known_secrets())


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
