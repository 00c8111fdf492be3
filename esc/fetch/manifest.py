"""Load and validate data/sources.yaml, the committed list of pinned third-party data files.

Each dataset names a public GitHub repository at a full commit, its licence and what the repo uses it
for, and lists its files either inline (`files:`) or in a `sha256sum`-format checksum file
(`checksums:` plus `local_prefix` / `source_prefix`). See the comment at the top of sources.yaml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from esc.errors import DataError
from esc.paths import REPO_ROOT

MANIFEST_PATH = REPO_ROOT / "data" / "sources.yaml"
RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"

_NAME_RE = re.compile(r"^[a-z0-9_]+$")
_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_CHECKSUM_LINE_RE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")

_REQUIRED = ("name", "repo", "commit", "licence", "licence_note", "used_for")
_OPTIONAL = ("files", "checksums", "local_prefix", "source_prefix")


@dataclass(frozen=True)
class DataFile:
    """One file: where it goes under data/, where it comes from, and its sha256."""

    dataset: str
    path: str  # local, relative to data/, POSIX separators
    repo: str
    commit: str
    source_path: str  # inside the repository at `commit`
    sha256: str

    @property
    def url(self) -> str:
        return RAW_URL.format(repo=self.repo, commit=self.commit, path=self.source_path)


@dataclass(frozen=True)
class Dataset:
    name: str
    repo: str
    commit: str
    licence: str
    licence_note: str
    used_for: str
    files: tuple[DataFile, ...]


def _relative_path(value: Any, manifest: Path, record: str, key: str, allow_empty: bool = False) -> str:
    """A relative POSIX path without `..`; returned unchanged."""
    if not isinstance(value, str) or (not value and not allow_empty):
        raise DataError(manifest, record, f"`{key}` must be a non-empty string, got {value!r}")
    if not value:
        return value
    pure = PurePosixPath(value)
    if value.startswith("/") or "\\" in value or ".." in pure.parts or value.startswith("./"):
        raise DataError(
            manifest, record, f"`{key}` must be a relative POSIX path inside the tree, got {value!r}"
        )
    return value


def _read_checksum_file(path: Path, manifest: Path, record: str) -> list[tuple[str, str]]:
    """(sha256, path) pairs from a `sha256sum`-format file."""
    if not path.is_file():
        raise DataError(manifest, record, f"checksum file {path} does not exist")
    pairs = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _CHECKSUM_LINE_RE.match(line)
        if match is None:
            raise DataError(path, f"line {lineno}", "expected `<64 hex sha256>  <relative path>`")
        pairs.append((match.group(1), match.group(2)))
    if not pairs:
        raise DataError(manifest, record, f"checksum file {path} lists no files")
    return pairs


def _parse_dataset(entry: Any, index: int, manifest: Path) -> Dataset:
    record = f"datasets[{index}]"
    if not isinstance(entry, dict):
        raise DataError(manifest, record, f"expected a mapping, got {type(entry).__name__}")
    if isinstance(entry.get("name"), str):
        record = f"datasets[{index}] {entry['name']}"
    unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise DataError(manifest, record, f"unknown key(s) {', '.join(map(str, unknown))}")
    for key in _REQUIRED:
        if key not in entry:
            raise DataError(manifest, record, f"missing `{key}`")
        if not isinstance(entry[key], str) or not entry[key].strip():
            raise DataError(manifest, record, f"`{key}` must be a non-empty string")
    name, repo, commit = entry["name"], entry["repo"], entry["commit"]
    if not _NAME_RE.match(name):
        raise DataError(manifest, record, f"`name` must match [a-z0-9_]+, got {name!r}")
    if not _REPO_RE.match(repo):
        raise DataError(manifest, record, f"`repo` must be owner/name, got {repo!r}")
    if not _COMMIT_RE.match(commit):
        raise DataError(manifest, record, f"`commit` must be a full 40-hex commit hash, got {commit!r}")

    has_files, has_checksums = "files" in entry, "checksums" in entry
    if has_files == has_checksums:
        raise DataError(manifest, record, "give exactly one of `files` or `checksums`")

    def make(path: str, source_path: str, sha256: str) -> DataFile:
        return DataFile(name, path, repo, commit, source_path, sha256)

    files: list[DataFile] = []
    if has_files:
        for key in ("local_prefix", "source_prefix"):
            if key in entry:
                raise DataError(manifest, record, f"`{key}` only goes with `checksums`")
        items = entry["files"]
        if not isinstance(items, list) or not items:
            raise DataError(manifest, record, "`files` must be a non-empty list")
        for j, item in enumerate(items):
            where = f"{record} files[{j}]"
            if not isinstance(item, dict) or set(item) != {"path", "source_path", "sha256"}:
                raise DataError(manifest, where, "expected exactly the keys path, source_path, sha256")
            path = _relative_path(item["path"], manifest, where, "path")
            source = _relative_path(item["source_path"], manifest, where, "source_path")
            sha = item["sha256"]
            if not isinstance(sha, str) or not _SHA256_RE.match(sha):
                raise DataError(manifest, where, "`sha256` must be 64 lower-case hex digits")
            files.append(make(path, source, sha))
    else:
        checksums = _relative_path(entry["checksums"], manifest, record, "checksums")
        local_prefix = _relative_path(entry.get("local_prefix", ""), manifest, record, "local_prefix", True)
        source_prefix = _relative_path(
            entry.get("source_prefix", ""), manifest, record, "source_prefix", True
        )
        for key, prefix in (("local_prefix", local_prefix), ("source_prefix", source_prefix)):
            if prefix and not prefix.endswith("/"):
                raise DataError(manifest, record, f"`{key}` must end with '/', got {prefix!r}")
        checksum_path = manifest.parent / checksums
        for sha, path in _read_checksum_file(checksum_path, manifest, record):
            _relative_path(path, checksum_path, None, "path")
            if not path.startswith(local_prefix):
                raise DataError(
                    checksum_path, path, f"path does not start with local_prefix {local_prefix!r}"
                )
            files.append(make(path, source_prefix + path[len(local_prefix) :], sha))

    return Dataset(
        name=name,
        repo=repo,
        commit=commit,
        licence=entry["licence"],
        licence_note=entry["licence_note"],
        used_for=entry["used_for"],
        files=tuple(files),
    )


def load_manifest(path: Path | None = None) -> list[Dataset]:
    """Parse and validate the manifest; any problem is a DataError naming the file and entry."""
    manifest = Path(path) if path is not None else MANIFEST_PATH
    if not manifest.is_file():
        raise DataError(manifest, None, "manifest not found")
    try:
        raw = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise DataError(manifest, None, f"not valid YAML: {' '.join(str(err).split())}") from err
    if not isinstance(raw, dict) or set(raw) != {"datasets"} or not isinstance(raw["datasets"], list):
        raise DataError(manifest, None, "expected a mapping with the single key `datasets` holding a list")
    datasets = [_parse_dataset(entry, i, manifest) for i, entry in enumerate(raw["datasets"])]

    names: set[str] = set()
    owner: dict[str, str] = {}
    for ds in datasets:
        if ds.name in names:
            raise DataError(manifest, ds.name, "duplicate dataset name")
        names.add(ds.name)
        for f in ds.files:
            if f.path in owner:
                raise DataError(manifest, ds.name, f"local path {f.path} is also listed by {owner[f.path]}")
            owner[f.path] = ds.name
    return datasets
