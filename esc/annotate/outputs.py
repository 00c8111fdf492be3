"""What the rating loop writes, by the run folder's rule: nothing people made is replaced without
`--force`, never a source, and every read-modify-write under a lock (issue 50: an export that replaced a
rated task folder, a site written into any folder, two `--add` imports that lost one rater's labels).

The lock is the one run folders use (`filelock`, an OS-level lock that dies with its process), on a
file beside the output (`.NAME.lock`), so that an output folder stays empty until it is written."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from esc.errors import UserError
from esc.output_folder import check_not_a_source  # re-exported: every output folder's one source check

__all__ = ["check_new_folder", "check_not_a_source", "locked"]

#: how long a command waits for another one writing the same output (an import takes seconds)
LOCK_WAIT_S = 120.0


@contextlib.contextmanager
def locked(path: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the lock of `path` (a file or folder, existing or not): another esc command writing it
    waits for this one to end; a UserError after `wait_s` seconds."""
    path = Path(path).resolve()  # one lock per file, whichever link names it
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path.parent / f".{path.name}.lock", timeout=wait_s)
    try:
        lock.acquire()
    except Timeout:
        raise UserError(
            f"{path}: another esc command has been writing it for {wait_s:.0f} s; wait for it to end"
        ) from None
    try:
        yield
    finally:
        lock.release()


def check_new_folder(out: Path, force: bool, what: str, marker: str | None = None) -> None:
    """A UserError unless `out` is a new or empty folder, or one holding `marker` (this command made
    it), or `force` is given; a file is always refused."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: --out is an existing file; name a new or empty folder ({what})")
    if force or not out.is_dir() or not any(out.iterdir()):
        return
    if marker is None:
        raise UserError(
            f"{out}: --out is a folder that is not empty: an existing {what} is never replaced (what was "
            "rated on it would no longer import); name a new or empty folder, or add --force to write into it"
        )
    if not (out / marker).is_file():
        raise UserError(
            f"{out}: --out is a folder that is not empty and not {what} this command made; name a new or "
            "empty folder, or add --force to write into it"
        )
