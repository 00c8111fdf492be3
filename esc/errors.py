"""User-facing errors: one line that names the file and record or the config key to change."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class UserError(Exception):
    """Bad input or configuration. Printed as one line, without a traceback, exit code 2."""


class DataError(UserError):
    """A data file or record is malformed. The message names the file and the record."""

    def __init__(self, path: object, record: object, problem: str) -> None:
        where = f"{path}" if record is None else f"{path} [record {record}]"
        super().__init__(f"{where}: {problem}")


class ConfigError(UserError):
    """A configuration value cannot work. The message names the key to change."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config `{key}`: {problem}")


def exit_on_user_error(fn: F) -> F:
    """Decorate a CLI entry point so that a UserError ends the process with one line on stderr."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
