"""Output folders a command writes whole: `esc report`'s site, `esc export`'s dataset,
`esc models convert-internlm2`'s checkpoint (issues 50, 62). One rule and one mechanism for all:

* OUT is new, empty, or the command's own: its marker (a JSON file in OUT, written last) lists every
  file and folder the command wrote there. Anything else in OUT a person put there: it is named and
  refused, unless `force` (where the command has a `--force`), and then kept: never deleted, never
  written over (a person's file where the command writes one is refused even so).
* OUT is never one of the command's inputs, nor holds one, even with `force`.
* A link is followed: the folder it names is written, and the link stays a link. `.` is the folder
  the shell is in, which stays where it is.
* The output is built in a staging folder beside OUT (`.NAME.staging-HOST-PID-XXXX`, new, made as
  any folder is, with the umask's mode), which holds a staging marker naming its process; it is put
  in place only when complete, so a refusal or a crash leaves OUT as it was. An OUT that holds only
  what the command wrote is swapped whole (the earlier OUT waits in `.NAME.aside-HOST-PID-XXXX`
  between two renames); an OUT that holds a person's files, or the shell's folder, is updated in
  place: the command's earlier files removed, its new ones moved in, the rest untouched.
* A staging folder whose process is gone (on this host; its staging marker says so) is removed by
  the next write to the same OUT, and an earlier OUT that a killed swap had set aside is put back.
  A folder a person made is never removed, whatever its name: it has no staging marker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import secrets
import shutil
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from esc.errors import UserError
from esc.jsonl import atomic_write_text

log = logging.getLogger(__name__)

STAGING_MARKER = ".esc-staging"  # in a staging folder while it is built: whose it is
Written = set[str] | re.Pattern[str]  # what a command wrote in OUT: its paths, or (an old output) a pattern


@dataclasses.dataclass(frozen=True)
class Command:
    """A command that writes an output folder whole, as its messages name it."""

    name: str  # "esc export"
    marker: str  # the file in OUT that lists what the command wrote there
    what: str  # "an export `esc export` wrote": "... not empty and not <what>"
    input_noun: str = "this command's input"  # "--out holds <input_noun> SOURCE"
    force_flag: str | None = "--force"  # None: the command has no such flag
    flag: str = "--out"
    #: an earlier version's output, whose marker lists nothing: the paths it wrote (None: not one)
    legacy: Callable[[Path], re.Pattern[str] | None] | None = None


# --- what is in a folder, and whose ----------------------------------------------------------------


def entries(folder: Path) -> tuple[list[str], list[str]]:
    """The files (links included) and folders under `folder`, as sorted relative POSIX paths; a
    linked folder counts as a file: it is not entered."""
    files, folders = [], []
    for top, dirs, names in os.walk(folder):
        rel = Path(top).relative_to(folder)
        for name in list(dirs):
            if (Path(top) / name).is_symlink():
                dirs.remove(name)
                names.append(name)
            else:
                folders.append((rel / name).as_posix())
        files.extend((rel / name).as_posix() for name in names)
    return sorted(files), sorted(folders)


def written(out: Path, command: Command) -> Written | None:
    """What `command` wrote in `out`, from its marker (for an output of an earlier version, whose
    marker lists nothing, the pattern of the paths it wrote); None: `out` is not its output."""
    marker = Path(out) / command.marker
    if marker.is_file():
        try:
            record = json.loads(marker.read_text(encoding="utf-8"))
            return {str(p) for p in [*record["files"], *record.get("folders", [])]}
        except (ValueError, TypeError, KeyError, AttributeError, OSError):
            pass
    return command.legacy(Path(out)) if command.legacy else None


def _ours(ours: Written | None) -> Callable[[str], bool]:
    if ours is None:
        return lambda p: False
    if isinstance(ours, set):
        return lambda p: p in ours
    return lambda p: bool(ours.fullmatch(p))


def foreign(out: Path, ours: Written | None) -> list[str]:
    """What in `out` the command did not write: files, and folders that hold no file it wrote
    (named for all they hold)."""
    files, folders = entries(out)
    mine = _ours(ours)
    kept = {parent.as_posix() for f in files if mine(f) for parent in Path(f).parents}
    foreign_folders = {d for d in folders if d not in kept and not mine(d)}
    found = [*(f for f in files if not mine(f)), *foreign_folders]
    return sorted(p for p in found if not any(q.as_posix() in foreign_folders for q in Path(p).parents))


def _mark(folder: Path, command: Command, record: Mapping[str, Any] | None) -> None:
    """The marker, written last: every file and folder the command wrote in `folder`."""
    files, folders = entries(folder)
    note = f"written by `{command.name}`; a new run replaces these files and keeps any other"
    data = {"note": note, "files": sorted({*files, command.marker}), "folders": folders, **(record or {})}
    atomic_write_text(folder / command.marker, json.dumps(data, indent=0, ensure_ascii=False) + "\n")


# --- the checks -------------------------------------------------------------------------------------


def check_not_a_source(
    out: Path, sources: Iterable[Path], flag: str = "--out", noun: str = "this command's input"
) -> None:
    """A UserError if the output folder `out` is, or holds, one of `sources` (even with --force)."""
    target = Path(out).resolve()
    for source in sources:
        s = Path(source).resolve()
        if s == target or target in s.parents:
            raise UserError(f"{out}: {flag} holds {noun} {source}; name another folder")


def check(out: Path, command: Command, sources: Iterable[Path] = (), force: bool = False) -> None:
    """A UserError (one line, naming `out`) unless `command` may write `out`: see the module docstring."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: is an existing file; {command.flag} names a folder")
    check_not_a_source(out, sources, command.flag, command.input_noun)
    if not out.is_dir() or not any(out.iterdir()) or force:
        return
    ours = written(out, command)
    or_force = f", or add {command.force_flag} to write beside it (kept)" if command.force_flag else ""
    if ours is None:
        raise UserError(
            f"{out}: a folder that is not empty and not {command.what}; name a new or empty folder "
            f"({command.flag}){or_force}"
        )
    others = foreign(out, ours)
    if others:
        more = f" and {len(others) - 1} more" if len(others) > 1 else ""
        raise UserError(
            f"{out}: holds {others[0]}{more}, which `{command.name}` did not write; move it out, or name a "
            f"new or empty folder ({command.flag}){or_force}"
        )


# --- staging, and putting in place ------------------------------------------------------------------


def owner_tag() -> str:
    """`HOST-PID`: whose temporary folder it is (a shared file system sees several hosts)."""
    return f"{socket.gethostname().replace('-', '_')}-{os.getpid()}"


def process_gone(host: str, pid: int) -> bool:
    """Whether process `pid` of `host` (as `owner_tag` spells hosts) ran on this host and has ended;
    False for another host's or a live process, and for this one."""
    if host != socket.gethostname().replace("-", "_") or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process
        return False
    return False


def _new_folder(beside: Path, kind: str) -> Path:
    """A new folder `.NAME.KIND-HOST-PID-XXXX` beside `beside`, made as any folder is (the umask's
    mode), holding the staging marker that names this process; never one that existed."""
    while True:
        path = beside.parent / f".{beside.name}.{kind}-{owner_tag()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        host = owner_tag().rpartition("-")[0]
        record = {"kind": kind, "out": beside.name, "host": host, "pid": os.getpid()}
        (path / STAGING_MARKER).write_text(json.dumps(record) + "\n", encoding="utf-8")
        return path


def remove_leftovers(out: Path) -> None:
    """What a killed write of `out` left beside it: its staging folder is removed; an earlier `out`
    it had set aside is put back when `out` is missing (the kill came between the two renames),
    removed otherwise. Only folders whose staging marker names `out` and a process of this host
    that is gone."""
    for path in sorted(out.parent.glob(f".{out.name}.*")):
        try:
            record = json.loads((path / STAGING_MARKER).read_text(encoding="utf-8"))
            kind, name, host, pid = (record[k] for k in ("kind", "out", "host", "pid"))
        except (OSError, ValueError, TypeError, KeyError):
            continue  # not a staging folder (a person's, whatever its name)
        if path.is_symlink() or name != out.name or not isinstance(pid, int):
            continue
        if not process_gone(str(host), pid):  # a write still going, or another host's
            continue
        earlier = path / out.name
        if kind == "aside" and earlier.is_dir() and not out.exists():
            os.rename(earlier, out)
            log.warning("%s: put back the earlier output a killed run had set aside", out)
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def staged(
    out: Path, command: Command, sources: Iterable[Path] = (), force: bool = False,
    record: Mapping[str, Any] | None = None,
) -> Iterator[Path]:  # fmt: skip
    """A staging folder to write `command`'s output in; when the body ends without an error, it is
    marked (with `record` beside the list of files) and put in place of `out`. Checked before and
    again after (a file put in `out` meanwhile is refused too). A failure leaves `out` as it was."""
    sources = list(sources)
    check(out, command, sources, force)
    target = Path(out).resolve()  # a link's folder; `.`: the shell's
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(target)
    tmp = _new_folder(target, "staging")
    try:
        yield tmp
        (tmp / STAGING_MARKER).unlink()
        _mark(tmp, command, record)
        check(out, command, sources, force)
        _put_in_place(tmp, target, command)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # ours; gone already once it became `out`


def _put_in_place(new: Path, out: Path, command: Command) -> None:
    if not out.exists():
        os.rename(new, out)
        return
    ours = written(out, command) if any(out.iterdir()) else set()
    if foreign(out, ours) or _shell_inside(out):
        _update_in_place(new, out, command, ours)
    else:
        _swap(new, out)


def _shell_inside(out: Path) -> bool:
    """Whether this process works in `out` or below (`cd OUT && esc ... --out .`): a folder swapped
    away would leave the shell in a deleted one."""
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # its folder is gone already
        return False
    return cwd == out or out in cwd.parents


def _swap(new: Path, out: Path) -> None:
    """Rename `new` to `out`; the earlier `out` (only what the command wrote) is set aside meanwhile,
    put back if the second rename fails, then removed."""
    aside = _new_folder(out, "aside")
    os.rename(out, aside / out.name)
    try:
        os.rename(new, out)
    except BaseException:
        os.rename(aside / out.name, out)
        shutil.rmtree(aside, ignore_errors=True)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _update_in_place(new: Path, out: Path, command: Command, ours: Written | None) -> None:
    """Replace what the command wrote in `out` by the contents of `new`, leaving every other file
    where it is. The marker first lists both the earlier and the new files, so that a run killed
    halfway leaves nothing of its own unlisted; then the earlier files go and the new ones move in."""
    mine = _ours(ours)
    new_files, new_folders = entries(new)
    old_files, old_folders = entries(out)
    for path in [*new_files, *new_folders]:  # a person's file where the command writes: never over it
        there = out / path
        if (there.is_file() or there.is_symlink()) and not mine(path):
            raise UserError(
                f"{out}: holds {path}, which `{command.name}` did not write and would write over; move it out"
            )
        if path in new_files and there.is_dir() and not there.is_symlink():
            inside = [f"{path}/{p}" for p in [*entries(there)[0], *entries(there)[1]]]
            if not mine(path) or not all(mine(p) for p in inside):
                raise UserError(f"{out}: holds the folder {path}, where `{command.name}` writes a file")
    own_files = [f for f in old_files if mine(f)]
    own_folders = [d for d in old_folders if mine(d)]
    both = {
        "note": f"`{command.name}` is replacing its files here",
        "files": sorted({*own_files, *new_files}),
        "folders": sorted({*own_folders, *new_folders}),
    }
    atomic_write_text(out / command.marker, json.dumps(both, indent=0) + "\n")
    for path in own_files:
        if path not in new_files:
            (out / path).unlink(missing_ok=True)
    for path in sorted(own_folders, key=lambda p: -p.count("/")):  # deepest first; kept if not empty
        if path not in new_folders and (out / path).is_dir() and not any((out / path).iterdir()):
            (out / path).rmdir()
    for path in new_folders:
        (out / path).mkdir(parents=True, exist_ok=True)
    for path in [*(f for f in new_files if f != command.marker), command.marker]:  # the marker last
        there = out / path
        if there.is_dir() and not there.is_symlink():  # a folder of the command's that is now a file
            shutil.rmtree(there)  # only its own files (checked above)
        os.replace(new / path, there)
