"""User-facing errors: one line that names the file and record or the config key to change."""

from __future__ import annotations

import argparse
import errno
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from esc.secrets.redaction import scrub

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
        self.key, self.problem = key, problem


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
# OSErrors that say a path names the wrong kind of thing: a file where a folder is needed, or the reverse.
PATH_KIND_ERRNOS = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR})
INTERRUPTED = 130  # 128 + SIGINT, the shell's convention


def _run_folder() -> str | None:
    """The output folder of this Hydra job, if this is one."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return str(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else None
    except Exception:  # no Hydra, or a config without a runtime: no run folder to name
        return None


def _file_in_the_way(path: str) -> str:
    """`path`, or the nearest folder above it that is in fact a file (mkdir of A/B with A a file)."""
    for candidate in (Path(path), *Path(path).parents):
        if candidate.is_file():
            return str(candidate)
    return path


def _path_error(err: OSError, option: str | None) -> UserError:
    filename = str(err.filename)
    reason = err.strerror or os.strerror(err.errno or 0)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        folder = _run_folder()
        inside = folder is not None and Path(filename).resolve().is_relative_to(Path(folder).resolve())
        where = f" (run folder {folder})" if inside else ""
        return UserError(
            f"{filename}: {reason}{where}; free some space, then rerun the same command: the files "
            "written before are kept"
        )
    if err.errno == errno.EISDIR:
        return UserError(f"{filename}: is a folder, where a file is needed; name a file")
    if err.errno in PATH_KIND_ERRNOS:
        option = option or ("hydra.run.dir=NEW_DIR" if _run_folder() is not None else "--out")
        return UserError(
            f"{_file_in_the_way(filename)}: is an existing file, where a folder is needed; name a folder "
            f"({option})"
        )
    option = option or ("hydra.run.dir=NEW_DIR" if _run_folder() is not None else "--out")
    return UserError(f"{filename}: {reason}; choose a writable place ({option})")


def environment_error(err: BaseException, option: str | None = None) -> UserError | None:
    """A one-line UserError naming the path when `err`, or an error that caused it (a log file that
    cannot be opened makes `logging` raise a ValueError), is an OSError on a named path that says
    what to change: permissions, a read-only or full disk (naming the run folder too), a file where
    a folder is needed or the reverse; None otherwise. `option`: what to change to name another
    folder (default: `hydra.run.dir` in a Hydra job, else `--out`)."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if (
            isinstance(cause, OSError)
            and cause.errno in ENVIRONMENT_ERRNOS | PATH_KIND_ERRNOS
            and cause.filename
        ):
            return _path_error(cause, option)
        cause = cause.__cause__ or cause.__context__
    return None


def exit_with_error(message: object, code: int = 2) -> NoReturn:
    print(f"error: {scrub(str(message))}", file=sys.stderr)
    sys.exit(code)


def exit_on_user_error(fn: F) -> F:
    """Decorate a CLI entry point so that a UserError ends the process with one line on stderr
    (exit code 2; 3 for an `IncompleteRun`), as does an OSError on a path that cannot be written
    (permissions, read-only or full disk); Ctrl-C (SIGINT) ends it with one line and exit code 130,
    keeping what was written, as SIGTERM does with 143 while a run holds its folder (`esc.rundir`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as err:
            if in_multirun():  # let the sweep's other jobs run; `run_hydra` exits at the end
                print(f"error: {scrub(str(err))}", file=sys.stderr)
                raise SweepJobFailed(str(err), err.exit_code) from None
            exit_with_error(err, err.exit_code)
        except KeyboardInterrupt as err:  # Ctrl-C; SIGTERM while a run holds its folder (esc.rundir)
            how = f" ({err})" if str(err) else ""
            exit_with_error(
                f"interrupted{how}; what was written so far is kept: rerun the same command to resume",
                getattr(err, "exit_code", INTERRUPTED),
            )
        except Exception as err:
            user_error = environment_error(err)
            if user_error is None:
                raise  # a bug, not bad input: keep the traceback
            exit_with_error(user_error)

    return wrapper  # type: ignore[return-value]


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error ends with the usage and one `error: ...` line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        exit_with_error(message)
