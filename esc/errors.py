"""User-facing errors: one line that names the file and record or the config key to change."""

from __future__ import annotations

import argparse
import errno
import functools
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class UserError(Exception):
    """Bad input or configuration. Printed as one line, without a traceback, exit code 2."""

    exit_code = 2


class DataError(UserError):
    """A data file or record is malformed. The message names the file and the record."""

    def __init__(self, path: object, record: object, problem: str) -> None:
        where = f"{path}" if record is None else f"{path} [record {record}]"
        super().__init__(f"{where}: {problem}")


class ConfigError(UserError):
    """A configuration value cannot work. The message names the key to change."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config `{key}`: {problem}")


class IncompleteRun(UserError):
    """The run finished its work but left failures (dialogues, judgments) that a rerun retries: the
    summary as one line and exit code 3, so a scheduler sees that the run is not complete."""

    exit_code = 3


class SweepJobFailed(Exception):
    """A job of a sweep (`-m`) ended with a UserError: raised instead of exiting so that Hydra runs
    the sweep's other jobs; the sweep then exits with this code (see `run_hydra`)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def in_multirun() -> bool:
    """Whether this job is one of a Hydra sweep (`-m`)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


# OSErrors that say what to change about the machine (permissions, a read-only or full disk), not a bug.
ENVIRONMENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})
INTERRUPTED = 130  # 128 + SIGINT, the shell's convention


def environment_error(err: BaseException) -> UserError | None:
    """A one-line UserError naming the path when `err`, or an error that caused it (a log file that
    cannot be opened makes `logging` raise a ValueError), is a permission, read-only or disk-full
    OSError on a named path; None otherwise."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in ENVIRONMENT_ERRNOS and cause.filename:
            full = cause.errno in (errno.ENOSPC, errno.EDQUOT)
            hint = "free some space" if full else "choose a writable folder (hydra.run.dir=... or --out)"
            return UserError(f"{cause.filename}: {cause.strerror or os.strerror(cause.errno)}; {hint}")
        cause = cause.__cause__ or cause.__context__
    return None


def _fail(message: object, code: int = 2) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def exit_on_user_error(fn: F) -> F:
    """Decorate a CLI entry point so that a UserError ends the process with one line on stderr
    (exit code 2; 3 for an `IncompleteRun`), as does an OSError on a path that cannot be written
    (permissions, read-only or full disk); Ctrl-C (SIGINT) ends it with one line and exit code 130,
    keeping what was written."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as err:
            if in_multirun():  # let the sweep's other jobs run; `run_hydra` exits at the end
                print(f"error: {err}", file=sys.stderr)
                raise SweepJobFailed(str(err), err.exit_code) from None
            _fail(err, err.exit_code)
        except KeyboardInterrupt:
            _fail(
                "interrupted; what was written so far is kept: rerun the same command to resume", INTERRUPTED
            )
        except Exception as err:
            user_error = environment_error(err)
            if user_error is None:
                raise  # a bug, not bad input: keep the traceback
            _fail(user_error)

    return wrapper  # type: ignore[return-value]


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error ends with the usage and one `error: ...` line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        _fail(message)


def hydra_error_line(err: Exception) -> UserError:
    """Hydra's refusal to compose a config (unknown key, unknown option, bad override syntax) as one
    line; Hydra itself prints several."""
    cause = str(err.__cause__ or "").strip().splitlines()
    if getattr(err, "override", None):  # OverrideParseException: bad override syntax
        first = str(err).strip().splitlines()[0]
        return UserError(
            f"cannot parse the override `{err.override}`: {first} (see Hydra's override grammar)"
        )
    override = re.match(r"Could not override '([^']+)'", str(err))
    if override and cause:
        key = override.group(1)
        if "not in struct" in cause[0]:
            return ConfigError(key, f"no such key; check the spelling (to add a new key: +{key}=VALUE)")
        return ConfigError(key, cause[0])
    parts = []
    text = str(err).split("Config search path")[0]  # where Hydra looked: the same for every run
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        lines = [line.strip() for line in paragraph.splitlines() if line.strip()]
        if len(lines) > 1 and lines[0].endswith(":"):  # "Available options in 'x':" then one per line
            parts.append(f"{lines[0]} {', '.join(lines[1:])}")
        elif lines:
            parts.append(" ".join(lines))
    return UserError("; ".join(parts + cause[:1]))


def run_hydra(main: Callable[[], Any]) -> Any:
    """Call a `@hydra.main` function so that Hydra's own errors also end with one `error:` line and
    exit code 2: an unknown key or config option, a malformed override, a run folder it cannot write.

    Hydra prints these itself on several lines and exits with 1, unless HYDRA_FULL_ERROR=1 asks it to
    raise them instead, which this sets for the call. Other errors keep their full traceback.
    """
    from hydra.errors import ConfigCompositionException, OverrideParseException, SearchPathException

    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        return main()
    except (ConfigCompositionException, OverrideParseException, SearchPathException) as err:
        _fail(hydra_error_line(err))
    except SweepJobFailed as err:  # each failed job printed its line when it ended
        _fail(f"a job of the sweep did not complete (the first: {err})", err.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", INTERRUPTED)
    except Exception as err:  # also Hydra's own writes: OUT/.hydra, the log file
        user_error = environment_error(err)
        if user_error is None:
            raise  # a bug, not bad input: keep the traceback
        _fail(user_error)
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
