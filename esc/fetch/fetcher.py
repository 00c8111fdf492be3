"""Fill data/ with the pinned third-party files listed in data/sources.yaml (`make data`).

For each file: skip it when it is already there with the right sha256; otherwise copy it from the
project's shared copy (`esc.paths.shared_data_dir()`) when that holds it, else download it from
https://raw.githubusercontent.com/{repo}/{commit}/{path}. Every copy and download is checked against
the manifest's sha256, written to a temporary file and renamed, so a failure never leaves half a file
and never removes files fetched before it.

    esc fetch                  # fill data/
    esc fetch --only esc_eval  # one dataset (repeatable)
    esc fetch --check          # verify only; exit 1 listing problems
    esc fetch --offline        # never download
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import BinaryIO
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

try:
    from tqdm import tqdm
except ImportError:  # the progress bar is optional: `make data` may run before the full install
    tqdm = None

from esc.errors import UserError
from esc.fetch.manifest import DataFile, Dataset
from esc.hashing import sha256_file
from esc.paths import SHARED_DATA_ENV

TIMEOUT_S = 30.0
RETRIES = 3
RETRY_WAIT_S = 2.0  # multiplied by the attempt number
RETRY_HTTP_CODES = frozenset({408, 425, 429, 500, 502, 503, 504})
CHUNK = 1 << 20
USER_AGENT = "esc-eval-data-fetch"


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            return
        yield chunk


def _write_verified(target: Path, chunks: Iterable[bytes], f: DataFile, origin: str) -> None:
    """Write chunks to a temporary file next to target, check the sha256, then rename onto target."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
        got = digest.hexdigest()
        if got != f.sha256:
            raise UserError(
                f"{f.path}: sha256 mismatch in {origin} (expected {f.sha256}, got {got}); "
                "nothing written for this file, files fetched before it are kept"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _download(f: DataFile, target: Path) -> None:
    """Download f.url into target with a timeout and RETRIES attempts; UserError when it cannot."""
    problem = "no attempt made"
    for attempt in range(1, RETRIES + 1):
        try:
            request = Request(f.url, headers={"User-Agent": USER_AGENT})
            with urlopen(request, timeout=TIMEOUT_S) as response:
                _write_verified(target, _chunks(response), f, f.url)
            return
        except HTTPError as err:
            problem = f"HTTP {err.code}"
            if err.code not in RETRY_HTTP_CODES:
                break
        except (URLError, OSError, http.client.HTTPException) as err:
            reason = getattr(err, "reason", None) or err
            problem = " ".join(f"{type(err).__name__}: {reason}".split())
        if attempt < RETRIES:
            time.sleep(RETRY_WAIT_S * attempt)
    raise UserError(f"{f.path}: download failed after {attempt} attempt(s) ({problem}) from {f.url}")


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, enabled: bool):
    if tqdm is None or not enabled:
        return _NoBar()
    return tqdm(total=total, unit="file", desc="data", leave=False)


def fetch_one(f: DataFile, dest: Path, shared: Path | None, offline: bool) -> tuple[str, bool]:
    """Make dest/f.path right. Returns (how: present|copied|downloaded, replaced_a_bad_file)."""
    target = dest / f.path
    replaced = False
    if target.is_file():
        if sha256_file(target) == f.sha256:
            return "present", False
        replaced = True
    source = shared / f.path if shared is not None else None
    if source is not None and source.is_file():
        with open(source, "rb") as fh:
            _write_verified(target, _chunks(fh), f, f"the shared copy {source}")
        return "copied", replaced
    # Where it looked, so that a machine without the network learns how to point at a copy.
    no_copy = f"no shared copy at {source}" if source is not None else "no shared copy"
    no_copy += f" ({SHARED_DATA_ENV} names the folder of one)"
    if offline:
        raise UserError(f"{f.path}: {no_copy}, and --offline forbids downloading it from {f.url}")
    try:
        _download(f, target)
    except UserError as err:
        raise UserError(f"{err}; {no_copy}") from None
    return "downloaded", replaced


def fetch(
    files: Sequence[DataFile],
    dest: Path,
    *,
    shared: Path | None = None,
    offline: bool = False,
    jobs: int = 8,
    progress: bool | None = None,
) -> Counter[str]:
    """Fetch files into dest (see module doc). Counts by outcome; the first failure raises UserError
    after the files in flight have finished, so every file that was fetched stays."""
    if progress is None:
        progress = sys.stderr.isatty()
    counts: Counter[str] = Counter()
    bar = _progress_bar(len(files), enabled=progress)
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        owner: dict[Future[tuple[str, bool]], DataFile] = {
            pool.submit(fetch_one, f, dest, shared, offline): f for f in files
        }
        pending = set(owner)
        order = {future: i for i, future in enumerate(owner)}
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            # in the files' order: when several have ended, the first failure reported is the first
            # file's, not whichever the set yields first (test_download_gives_up_after_retries saw both)
            for future in sorted(done, key=order.__getitem__):
                error = future.exception()
                if isinstance(error, OSError):  # e.g. dest not writable, disk full
                    raise UserError(f"{owner[future].path}: {error}") from error
                if error is not None:
                    raise error
                how, replaced = future.result()
                counts[how] += 1
                counts["replaced"] += replaced
                bar.update(1)
    finally:
        # On an error or Ctrl-C: start nothing new, let the files in flight finish (each is atomic).
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return counts


def check(files: Sequence[DataFile], dest: Path) -> list[str]:
    """One line per file that is missing or has the wrong sha256."""
    problems = []
    for f in files:
        target = dest / f.path
        if not target.is_file():
            problems.append(f"missing: {target}")
        elif sha256_file(target) != f.sha256:
            problems.append(f"sha256 mismatch: {target} (expected {f.sha256})")
    return problems


def select(datasets: Sequence[Dataset], only: Sequence[str] | None, manifest: Path) -> list[DataFile]:
    known = [ds.name for ds in datasets]
    for name in only or ():
        if name not in known:
            raise UserError(f"--only {name}: no such dataset in {manifest} (known: {', '.join(known)})")
    return [f for ds in datasets if not only or ds.name in only for f in ds.files]
