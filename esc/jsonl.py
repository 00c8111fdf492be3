"""Reading and writing JSON and JSON-lines files, for every package.

Readers (`read_json`, `read_jsonl`, `get_field`) name the file and the record of a bad input.
Writers: append-only JSON-lines files that survive a killed writer (dialogue and score files). Every
text written passes the secret filter (`esc.secrets.redaction`): a key a model echoed is written `***` (in a
record, inside its strings only: `scrub_strings`).

Each write appends whole lines, then fsyncs. A line cut short by a killed process has no newline at
the end of the file; `drop_partial_last_line` removes it on the next open, so every complete line
already written stays valid. A write that fails (a full disk) takes back its part line at once and
raises an OSError naming the file. Files replaced whole go through a temp file (`atomic_write_*`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.errors import ConfigError, DataError, UserError
from esc.secrets.redaction import known_secrets, scrub, scrub_strings

log = logging.getLogger(__name__)
_UMASK = os.umask(0o022)  # read the process umask (set it back at once): new files get 0o666 & ~umask
os.umask(_UMASK)


def require_file(path: Path) -> Path:
    """Return `path` if it is a file; otherwise a UserError that says to run `make data`."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: data file not found; run `make data` (or set ESC_DATA_DIR)")
    return path


class DuplicateKey(ValueError):
    """A JSON object that names one key twice (json keeps the last one silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(
                f"the key {key!r} appears twice in one object; which one is meant is not known"
            )
        seen[key] = value
    return seen


def loads(text: str) -> Any:
    """`json.loads` that refuses an object with a duplicate key (`DuplicateKey`), for every input."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def read_json(path: Path) -> Any:
    """Load one JSON document; DataError naming the file if it is not valid JSON or names a key twice."""
    path = require_file(path)
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh, object_pairs_hook=_unique_keys)
    except DuplicateKey as err:
        raise DataError(path, None, str(err)) from None
    except json.JSONDecodeError as err:
        raise DataError(path, None, f"not valid JSON ({err.msg} at line {err.lineno})") from None
    except UnicodeDecodeError as err:
        raise DataError(path, None, f"not UTF-8 text ({err.reason})") from None


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line_number, record) for each non-blank line, 1-based; DataError on a bad line."""
    path = require_file(path)
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(
                    path, f"line {lineno}", f"not UTF-8 text (byte {err.start}); save the file as UTF-8"
                ) from None
            if not line.strip():
                continue
            try:
                yield lineno, loads(line)
            except DuplicateKey as err:
                raise DataError(path, f"line {lineno}", str(err)) from None
            except json.JSONDecodeError as err:
                raise DataError(path, f"line {lineno}", f"not valid JSON ({err.msg})") from None


def get_field(record: Any, key: str, kind: type | tuple[type, ...], path: Path, where: object) -> Any:
    """Return `record[key]` checked to be of type `kind`; DataError naming file and record otherwise."""
    if not isinstance(record, dict):
        raise DataError(path, where, f"expected a JSON object, got {type(record).__name__}")
    if key not in record:
        raise DataError(path, where, f"missing key `{key}`")
    value = record[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(path, where, f"`{key}` should be {names}, got {type(value).__name__}")
    return value


def _write_all(fd: int, data: bytes, path: Path) -> None:
    """Write every byte of `data` to `fd`, then fsync. `path` (the file meant, for a temp file the one
    it will replace) is only for tests, which make this fail as a full disk would."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _named(err: OSError, path: Path) -> OSError:
    """`err` naming `path`: a write on a full disk raises an OSError that names no file."""
    if err.filename:
        return err
    return type(err)(err.errno, err.strerror or os.strerror(err.errno or 0), str(path))


def append_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Append records as JSON lines and make them durable (fsync). A write that fails (a full disk)
    takes back what it wrote, so the lines already in the file stay whole, and names the file."""
    values = known_secrets()  # masked inside each record's strings; keys and `status` are never rewritten
    lines = (json.dumps(scrub_strings(record, values), ensure_ascii=False) + "\n" for record in records)
    data = "".join(lines).encode("utf-8")
    if not data:
        return
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, data, path)
        except OSError as err:
            os.ftruncate(fd, size)
            raise _named(err, path) from None
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text`, its secrets masked (`esc.secrets.redaction.scrub`), in one step (see
    `atomic_write_bytes`)."""
    atomic_write_bytes(path, scrub(text).encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace `path` with `data` in one step, through a temp file unique to this process and call
    (two writers never share a temp file; a reader sees the old or the new file, never half). A write
    that fails (a full disk) leaves the old file as it was and names `path`. `mode`: the file's
    permissions, set before it appears (a secret is never readable by others, even for a moment);
    default: the old file's, else the umask's."""
    path = Path(path)
    if path.is_dir():  # os.replace would name the temp file
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            _write_all(fd, data, path)
        finally:
            os.close(fd)
        if mode is None:
            mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_UMASK
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise _named(err, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def drop_partial_last_line(path: Path) -> None:
    """Truncate a file whose last line was cut short (no newline) by a killed writer."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        data = path.read_bytes()
        fh.truncate(data.rfind(b"\n") + 1)
    log.warning("%s: dropped an incomplete last line left by an interrupted run", path)


def find_jsonl_files(
    spec: str | Path | Sequence[str | Path], subfolder: str, what: str, key: str | None = None
) -> list[Path]:
    """The JSONL files a config value names: files, or run directories whose `subfolder`
    (`dialogues`, `scores`) holds them (`*.failed.jsonl` left out), or the parent folder of a Hydra
    sweep (`-m`: its numbered runs, each such a run directory, in number order). `what` names them in
    errors; `key`, the config key the value came from, makes the error a ConfigError naming it."""

    def error(problem: str) -> UserError:
        return ConfigError(key, problem) if key else UserError(problem)

    paths: list[Path] = []
    for item in [spec] if isinstance(spec, str | Path) else spec:
        path = Path(str(item))
        if path.is_dir():
            folder = path / subfolder if (path / subfolder).is_dir() else path
            found = sorted(p for p in folder.glob("*.jsonl") if not p.name.endswith(".failed.jsonl"))
            runs = sweep_runs(path, subfolder) if not found else []
            if runs:
                paths += find_jsonl_files(runs, subfolder, what, key)
                continue
            if not found:
                raise error(
                    f"{folder}: no {what} files (*.jsonl): name a run folder (with {subfolder}/), "
                    f"{what} files, or a sweep's folder whose numbered runs hold {subfolder}/"
                )
            paths += found
        elif path.is_file():
            paths.append(path)
        else:
            raise error(f"{path}: no such {what} file or directory")
    return paths


def sweep_runs(path: Path, subfolder: str) -> list[Path]:
    """The runs of a Hydra sweep's folder (`hydra.sweep.dir`: subfolders named by the job's number,
    `0/`, `1/`, or `0_llama3/` as evaluate.py's `hydra.sweep.subdir` names them) that hold
    `subfolder`, in number order; [] when `path` is no such folder."""
    numbered = ((re.match(r"(\d+)(?:_|$)", d.name), d) for d in path.iterdir() if d.is_dir())
    runs = [(int(m.group(1)), d) for m, d in numbered if m and (d / subfolder).is_dir()]
    return [d for _, d in sorted(runs, key=lambda x: (x[0], x[1].name))]
