"""Locks of interrupted C++ extension builds, which make every later build wait forever.

DeepSpeed JIT-compiles its CPU ops with torch's `cpp_extension` on first use. The build holds a
`lock` file in its folder (`~/.cache/torch_extensions/py311_cpu/<op>/lock`) and every other process
waits until the file is gone. A build killed midway (Ctrl-C on a first `make test`) leaves the file,
and each later run then waits for nobody: the ZeRO tests hit their 900 s timeout. The file records no
owner, so a lock is taken as stale when it is older than `min_age_s` and no process is working in
its folder (the compiler runs there, with the build folder as its working directory).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)


def extensions_root() -> Path:
    """Where torch builds C++ extensions (`TORCH_EXTENSIONS_DIR`, else ~/.cache/torch_extensions)."""
    from torch.utils.cpp_extension import get_default_build_root

    return Path(get_default_build_root())


def _working_folders() -> set[Path] | None:
    """The working folders of every process (Linux /proc); None where they cannot be read."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    folders = set()
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                folders.add(Path(os.readlink(entry / "cwd")))
            except OSError:  # gone, or another user's
                continue
    return folders


def clear_stale_build_locks(root: Path | None = None, min_age_s: float = 60.0) -> list[Path]:
    """Remove the build locks under `root` (default `extensions_root()`) that no process holds; the
    locks removed. Nothing is removed where process folders cannot be read (not Linux)."""
    root = extensions_root() if root is None else Path(root)
    locks = [p for p in root.glob("*/*/lock") if p.is_file()] if root.is_dir() else []
    if not locks:
        return []
    working = _working_folders()
    if working is None:
        return []
    removed = []
    for lock in locks:
        folder = lock.parent
        try:
            age = time.time() - lock.stat().st_mtime
        except OSError:
            continue
        busy = any(w == folder or folder in w.parents for w in working)
        if age < min_age_s or busy:
            continue
        lock.unlink(missing_ok=True)
        removed.append(lock)
        log.warning(
            "Removed %s: a build of %s was interrupted %.0f min ago and left its lock (no process builds it)",
            lock,
            folder.name,
            age / 60,
        )
    return removed
