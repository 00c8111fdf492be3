"""Append-only JSON-lines files that survive a killed writer (dialogue and score files).

Each write appends whole lines, then flushes and fsyncs. A line cut short by a killed process has no
newline at the end of the file; `drop_partial_last_line` removes it on the next open, so every
complete line already written stays valid.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
_UMASK = os.umask(0o022)  # read the process umask (set it back at once): new files get 0o666 & ~umask
os.umask(_UMASK)


def append_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Append records as JSON lines and make them durable (flush + fsync)."""
    lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    if not lines:
        return
    with Path(path).open("a", encoding="utf-8") as fh:
        fh.write(lines)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step, through a temp file unique to this process and call
    (two writers never share a temp file; a reader sees the old or the new file, never half)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_UMASK)
        os.replace(tmp, path)
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
    (`dialogues`, `scores`) holds them (`*.failed.jsonl` left out). `what` names them in errors;
    `key`, the config key the value came from, makes the error a ConfigError naming it."""
    from esc.errors import ConfigError, UserError

    def error(problem: str) -> UserError:
        return ConfigError(key, problem) if key else UserError(problem)

    paths: list[Path] = []
    for item in [spec] if isinstance(spec, str | Path) else spec:
        path = Path(str(item))
        if path.is_dir():
            folder = path / subfolder if (path / subfolder).is_dir() else path
            found = sorted(p for p in folder.glob("*.jsonl") if not p.name.endswith(".failed.jsonl"))
            if not found:
                raise error(f"{folder}: no {what} files (*.jsonl)")
            paths += found
        elif path.is_file():
            paths.append(path)
        else:
            raise error(f"{path}: no such {what} file or directory")
    return paths
