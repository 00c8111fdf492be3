"""Which model is really used: a hub commit, or a hash of the files on disk, never a config's `null`.

The request cache and the run manifest name a model by its *resolved* revision:

* a hub id (``Qwen/Qwen1.5-7B-Chat``): the commit of the snapshot in the Hugging Face hub cache
  that ``revision`` (default ``main``) points to, or the configured revision itself when it is
  already a 40-hex commit; unresolved (None) while the model has not been downloaded;
* a local directory inside the hub cache (``.../models--org--name/snapshots/<commit>/``): that
  commit;
* any other local directory, the embedded tiny model (`esc.models.tiny`) and a packaged model
  (`esc.models.packaged`, whose ``provenance.json`` is hashed without its conversion time): a
  content hash of what is on disk, ``sha256:<hex>``.

The content hash is cheap: config, tokenizer, chat template, code and index files (and any weight
file up to `FULL_HASH_LIMIT`) are hashed whole; larger weight files contribute their size, their
safetensors header (tensor names, dtypes, shapes, offsets) and three 1 MiB samples of their bytes
(start, middle, end), so a retrained checkpoint changes the hash while gigabytes are never read.
Adapters (PEFT directories) are small and hashed whole: `adapter_hash`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from esc.hashing import sha256_file
from esc.models.loading import ModelSettings, resolve_model_path
from esc.models.packaged import converted_dir, is_converted, packaged_model
from esc.paths import cache_dir

log = logging.getLogger(__name__)

FULL_HASH_LIMIT = 64 << 20  # bytes: larger files are sampled
SAMPLE_BYTES = 1 << 20
#: files that determine a model's outputs (config, tokenizer, template, remote code, weights)
MODEL_SUFFIXES = (
    ".json", ".jinja", ".model", ".txt", ".tiktoken", ".py",
    ".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5",
)  # fmt: skip
#: JSON fields that record when or where a file was made, not what it holds
VOLATILE_FIELDS = {"provenance.json": ("converted_at",)}
COMMIT = re.compile(r"^[0-9a-f]{40}$")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


@dataclasses.dataclass(frozen=True)
class Revision:
    """A resolved model revision and where it came from."""

    revision: str | None  # a commit hash or ``sha256:<hex>``; None when it cannot be known yet
    source: str  # "commit" (configured) | "hub-cache" | "snapshot" | "content" | "unresolved"
    configured: str | None = None  # the config's `revision`, as written

    @property
    def resolved(self) -> bool:
        return self.revision is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "revision_source": self.source,
            "configured_revision": self.configured,
        }


# --- content hashes ---------------------------------------------------------------------------


def _safetensors_header(path: Path) -> bytes:
    with path.open("rb") as handle:
        size_bytes = handle.read(8)
        if len(size_bytes) < 8:
            return b""
        size = int.from_bytes(size_bytes, "little")
        return handle.read(size) if 0 < size <= FULL_HASH_LIMIT else b""


def file_fingerprint(path: Path) -> str:
    """sha256 of a file, whole up to `FULL_HASH_LIMIT`, else of its size, header and three samples."""
    path = Path(path)
    size = path.stat().st_size
    if size <= FULL_HASH_LIMIT:
        return sha256_file(path)
    digest = hashlib.sha256(f"sampled:{size}:".encode())
    if path.suffix == ".safetensors":
        digest.update(_safetensors_header(path))
    with path.open("rb") as handle:
        for offset in (0, size // 2 - SAMPLE_BYTES // 2, size - SAMPLE_BYTES):
            handle.seek(max(0, offset))
            digest.update(handle.read(SAMPLE_BYTES))
    return "sampled-" + digest.hexdigest()


def _file_digest(path: Path) -> str:
    drop = VOLATILE_FIELDS.get(path.name)
    if drop:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            data = None
        if isinstance(data, dict):
            kept = {k: v for k, v in data.items() if k not in drop}
            return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()
    return file_fingerprint(path)


def _model_files(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    files = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):  # .cache/, .git/, lock files
            continue
        if path.is_file() and path.suffix in suffixes:
            files.append(path)
    return files


def directory_hash(root: str | Path, suffixes: tuple[str, ...] = MODEL_SUFFIXES) -> str:
    """``sha256:<hex>`` over the relative names and fingerprints of the model files under `root`
    (the same for a copy of the directory anywhere else)."""
    base = Path(root).resolve()
    digest = hashlib.sha256()
    for path in _model_files(base, suffixes):
        digest.update(f"{path.relative_to(base).as_posix()}\0{_file_digest(path)}\n".encode())
    return "sha256:" + digest.hexdigest()


def adapter_hash(root: str | Path) -> str:
    """sha256 over a PEFT adapter directory's config and weights, each hashed whole."""
    base = Path(root)
    digest = hashlib.sha256()
    for name in ADAPTER_FILES:
        if (base / name).is_file():
            digest.update(f"{name}\0{sha256_file(base / name)}\n".encode())
    return digest.hexdigest()


# --- hub commits ------------------------------------------------------------------------------


def snapshot_commit(path: str | Path) -> str | None:
    """The commit of a hub-cache snapshot directory (``models--org--name/snapshots/<commit>/...``)."""
    parts = Path(path).resolve(strict=False).parts
    # resolve() follows the snapshot's symlinks into blobs/ for files; look at the path as given too
    for candidate in (Path(path).absolute().parts, parts):
        for i in range(1, len(candidate) - 1):
            if (
                candidate[i] == "snapshots"
                and candidate[i - 1].startswith("models--")
                and COMMIT.match(candidate[i + 1])
            ):
                return candidate[i + 1]
    return None


def hub_cache_commit(repo_id: str, revision: str | None, cache_dir: str | Path | None = None) -> str | None:
    """The commit that `revision` (default ``main``) of `repo_id` points to in the hub cache, if any."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - a dependency of transformers
        return None
    try:
        found = try_to_load_from_cache(
            repo_id, "config.json", cache_dir=cache_dir, revision=revision or "main"
        )
    except Exception as err:  # an id the hub library rejects (e.g. a path that does not exist)
        log.debug("hub cache lookup for %s failed: %s", repo_id, err)
        return None
    return snapshot_commit(found) if isinstance(found, str) else None


# --- models -----------------------------------------------------------------------------------


def _local_dir(model: ModelSettings, materialize: bool) -> Path | None:
    """The directory of a tiny or packaged model, built or fetched only when `materialize`."""
    if materialize:
        return Path(resolve_model_path(model))
    if model.tiny:
        path = cache_dir() / "tiny" / f"qwen2-tiny-{model.tiny.spec().key()}"  # as ensure_tiny_model keeps it
        return path if (path / "build.json").is_file() else None
    spec = packaged_model(str(model.packaged))
    return converted_dir(spec) if is_converted(spec) else None


def resolve_revision(
    model: ModelSettings, materialize: bool = False, hub_cache: str | Path | None = None
) -> Revision:
    """The revision of the model a ``conf/model`` node names, from what is on disk.

    Nothing is downloaded or built unless `materialize` (then a tiny model is built and a packaged
    one fetched, as loading would); a hub model that is not in the hub cache yet is unresolved.
    """
    configured = model.revision
    if model.tiny or model.packaged:
        path = _local_dir(model, materialize)
        if path is None:
            return Revision(None, "unresolved", configured)
        return Revision(directory_hash(path), "content", configured)
    name = model.name_or_path or ""
    local = Path(name).expanduser()
    if name and local.is_dir():
        commit = snapshot_commit(local)
        if commit:
            return Revision(commit, "snapshot", configured)
        return Revision(directory_hash(local), "content", configured)
    if configured and COMMIT.match(configured):
        return Revision(configured, "commit", configured)
    commit = hub_cache_commit(name, configured, hub_cache) if name else None
    if commit:
        return Revision(commit, "hub-cache", configured)
    return Revision(None, "unresolved", configured)
