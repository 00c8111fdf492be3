"""`make data`: the manifest of pinned datasets and the fetcher. Offline: downloads are faked."""

from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path
from urllib.error import HTTPError, URLError

import pytest
import yaml

from esc.cli import main as esc_main
from esc.errors import DataError, UserError
from esc.fetch import fetcher as fetch_mod
from esc.fetch.manifest import MANIFEST_PATH, RAW_URL, load_manifest
from esc.paths import shared_data_dir

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """No test may reach the network; tests that exercise downloads replace this opener."""

    def refuse(*args, **kwargs):
        raise AssertionError("a test tried to download")

    monkeypatch.setattr(fetch_mod, "urlopen", refuse)
    monkeypatch.setattr(fetch_mod, "RETRY_WAIT_S", 0.0)


# --- the real manifest ---------------------------------------------------------------------------


def test_real_manifest_is_well_formed():
    datasets = load_manifest()
    by_name = {ds.name: ds for ds in datasets}
    assert set(by_name) == {
        "esc_eval",
        "esconv_fado",
        "esconv_failed",
        "smile",
        "psyqa",
        "epitome",
        "chatcounselor_bench",
        "rolebench",
        "charactereval",
    }
    for ds in datasets:
        assert re.fullmatch(r"[0-9a-f]{40}", ds.commit)
        assert ds.licence.strip() and ds.licence_note.strip() and ds.used_for.strip()
        assert ds.files
        for f in ds.files:
            assert re.fullmatch(r"[0-9a-f]{64}", f.sha256)
            assert not f.path.startswith("/") and ".." not in f.path.split("/")
            assert f.url == RAW_URL.format(repo=ds.repo, commit=ds.commit, path=f.source_path)
            assert f.url.startswith(f"https://raw.githubusercontent.com/{ds.repo}/{ds.commit}/")
    assert len(by_name["esc_eval"].files) == 12
    assert {f.path: f.source_path for f in by_name["esc_eval"].files}[
        "esc_eval/example_dialogues/llama3_en.json"
    ] == "result/2024-06-24/llama3_en.json"
    smile = by_name["smile"].files
    assert len(smile) == 1972
    for f in smile:
        match = re.fullmatch(r"data/(\d+)\.json", f.source_path)
        assert match and int(match.group(1)) < 2000 and f.path == "smile/" + f.source_path
    # the card-construction sources (python build_cards.py): one sample, three CSVs, one JSONL
    assert [f.path for f in by_name["psyqa"].files] == ["psyqa/PsyQA_example.json"]
    assert len(by_name["epitome"].files) == 3
    assert [f.path for f in by_name["chatcounselor_bench"].files] == [
        "chatcounselor_counselling_bench/question.jsonl"
    ]
    # general and role-specific RoleBench, both languages (multi-turn role-play sessions, issue 9)
    assert sum("role_specific" in f.path for f in by_name["rolebench"].files) == 2
    assert len(by_name["rolebench"].files) == 4
    all_paths = [f.path for ds in datasets for f in ds.files]
    assert len(all_paths) == len(set(all_paths)) == 1999


# --- a small fake world: manifest + shared copy in tmp_path ----------------------------------------

FILES = {
    "alpha/a.txt": b"alpha file\n",
    "alpha/sub/b.json": b'{"b": 1}\n',
    "beta/data/1.json": b"[1]\n",
    "beta/data/2.json": b"[2]\n",
}


def write_manifest(root: Path, files: dict[str, bytes] = FILES) -> Path:
    """A manifest with one inline dataset (alpha) and one checksum-file dataset (beta)."""
    (root / "checksums").mkdir(parents=True, exist_ok=True)
    beta = [p for p in files if p.startswith("beta/")]
    (root / "checksums" / "beta.sha256").write_text(
        "".join(f"{sha(files[p])}  {p}\n" for p in beta), encoding="utf-8"
    )
    manifest = {
        "datasets": [
            {
                "name": "alpha",
                "repo": "owner/alpha",
                "commit": COMMIT,
                "licence": "CC0-1.0",
                "licence_note": "test",
                "used_for": "tests",
                "files": [
                    {"path": p, "source_path": "orig/" + p.split("/", 1)[1], "sha256": sha(files[p])}
                    for p in files
                    if p.startswith("alpha/")
                ],
            },
            {
                "name": "beta",
                "repo": "owner/beta",
                "commit": COMMIT,
                "licence": "none found",
                "licence_note": "test",
                "used_for": "tests",
                "checksums": "checksums/beta.sha256",
                "local_prefix": "beta/",
                "source_prefix": "",
            },
        ]
    }
    path = root / "sources.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def world(tmp_path, monkeypatch):
    manifest = write_manifest(tmp_path / "manifest")
    shared = tmp_path / "shared"
    for rel, data in FILES.items():
        (shared / rel).parent.mkdir(parents=True, exist_ok=True)
        (shared / rel).write_bytes(data)
    monkeypatch.setenv("ESC_SHARED_DATA", str(shared))
    return {"manifest": manifest, "shared": shared, "dest": tmp_path / "dest"}


def run(world, *args: str) -> int:
    return esc_main(["fetch", "--manifest", str(world["manifest"]), "--dest", str(world["dest"]), *args])


def part_files(root: Path) -> list[Path]:
    return list(root.rglob("*.part")) if root.exists() else []


def test_fake_manifest_maps_paths(world):
    datasets = {ds.name: ds for ds in load_manifest(world["manifest"])}
    assert [f.source_path for f in datasets["alpha"].files] == ["orig/a.txt", "orig/sub/b.json"]
    assert [(f.path, f.source_path) for f in datasets["beta"].files] == [
        ("beta/data/1.json", "data/1.json"),
        ("beta/data/2.json", "data/2.json"),
    ]
    assert (
        datasets["beta"].files[0].url == f"https://raw.githubusercontent.com/owner/beta/{COMMIT}/data/1.json"
    )


def test_copies_from_shared_then_is_idempotent(world, capsys):
    assert run(world) == 0
    assert "4 copied, 0 downloaded, 0 already present" in capsys.readouterr().out
    for rel, data in FILES.items():
        assert (world["dest"] / rel).read_bytes() == data
    assert part_files(world["dest"]) == []

    assert run(world) == 0
    assert "0 copied, 0 downloaded, 4 already present" in capsys.readouterr().out
    assert run(world, "--check") == 0


def test_only_selects_datasets(world, capsys):
    assert run(world, "--only", "beta") == 0
    assert "2 copied" in capsys.readouterr().out
    assert not (world["dest"] / "alpha").exists()
    with pytest.raises(SystemExit) as exc:
        run(world, "--only", "gamma")
    assert exc.value.code == 2
    assert "--only gamma" in capsys.readouterr().err


def test_wrong_local_file_is_replaced(world, capsys):
    assert run(world) == 0
    (world["dest"] / "alpha/a.txt").write_bytes(b"edited\n")
    assert run(world) == 0
    assert "1 copied, 0 downloaded, 3 already present (1 replaced" in capsys.readouterr().out
    assert (world["dest"] / "alpha/a.txt").read_bytes() == FILES["alpha/a.txt"]


def test_corrupt_shared_file_is_an_error_and_keeps_fetched_files(world, capsys):
    assert run(world, "--only", "alpha") == 0
    (world["shared"] / "beta/data/2.json").write_bytes(b"[corrupted]\n")

    datasets = load_manifest(world["manifest"])
    files = fetch_mod.select(datasets, None, world["manifest"])
    with pytest.raises(UserError, match=r"^beta/data/2\.json: sha256 mismatch in the shared copy"):
        fetch_mod.fetch(files, world["dest"], shared=world["shared"], jobs=1)

    with pytest.raises(SystemExit) as exc:
        run(world)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "beta/data/2.json" in err and "sha256 mismatch" in err

    for rel in ("alpha/a.txt", "alpha/sub/b.json", "beta/data/1.json"):
        assert (world["dest"] / rel).read_bytes() == FILES[rel]
    assert not (world["dest"] / "beta/data/2.json").exists()
    assert part_files(world["dest"]) == []


def test_offline_without_local_copy_is_an_error(world, capsys):
    (world["shared"] / "alpha/sub/b.json").unlink()
    with pytest.raises(SystemExit) as exc:
        run(world, "--offline")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "alpha/sub/b.json" in err and "--offline" in err
    assert f"no shared copy at {world['shared'] / 'alpha/sub/b.json'}" in err


def test_check_lists_problems(world, capsys):
    assert run(world) == 0
    (world["dest"] / "alpha/a.txt").unlink()
    (world["dest"] / "beta/data/1.json").write_bytes(b"bad")
    capsys.readouterr()
    assert run(world, "--check") == 1
    captured = capsys.readouterr()
    assert "missing:" in captured.err and "alpha/a.txt" in captured.err
    assert "sha256 mismatch:" in captured.err and "beta/data/1.json" in captured.err
    assert "2 of 4 files OK, 2 problem(s)" in captured.out


# --- the download path, with the URL opener faked ---------------------------------------------------


class FakeWeb:
    """Serves FILES at their pinned URLs; `failures` makes the first N requests of a URL fail."""

    def __init__(self, manifest: Path, payload: dict[str, bytes] = FILES, failures: int = 0, exc=None):
        self.by_url = {f.url: payload[f.path] for ds in load_manifest(manifest) for f in ds.files}
        self.failures = failures
        self.exc = exc or URLError("connection reset (fake)")
        self.calls: list[str] = []

    def __call__(self, request, timeout=None):
        assert timeout is not None and timeout > 0
        url = request.full_url
        self.calls.append(url)
        if self.calls.count(url) <= self.failures:
            raise self.exc
        if url not in self.by_url:
            raise HTTPError(url, 404, "Not Found", {}, None)
        return io.BytesIO(self.by_url[url])


@pytest.fixture
def no_shared(world, monkeypatch, tmp_path):
    monkeypatch.setenv("ESC_SHARED_DATA", str(tmp_path / "no-such-dir"))
    return world


def test_download_with_retry(no_shared, monkeypatch, capsys):
    world = no_shared
    web = FakeWeb(world["manifest"], failures=1)
    monkeypatch.setattr(fetch_mod, "urlopen", web)
    assert run(world) == 0
    assert "0 copied, 4 downloaded, 0 already present" in capsys.readouterr().out
    assert len(web.calls) == 8  # one failed attempt, then success, per file
    assert f"https://raw.githubusercontent.com/owner/alpha/{COMMIT}/orig/sub/b.json" in web.calls
    for rel, data in FILES.items():
        assert (world["dest"] / rel).read_bytes() == data

    web.calls.clear()
    assert run(world) == 0
    assert web.calls == []
    assert "4 already present" in capsys.readouterr().out


def test_download_gives_up_after_retries(no_shared, monkeypatch, capsys):
    world = no_shared
    web = FakeWeb(world["manifest"], failures=99)
    monkeypatch.setattr(fetch_mod, "urlopen", web)
    with pytest.raises(SystemExit) as exc:
        run(world, "--only", "beta", "--jobs", "1")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "beta/data/1.json: download failed after 3 attempt(s)" in err
    # where it looked for a copy, and how to point at one (a machine without the network needs it)
    assert f"no shared copy at {world['shared'].parent / 'no-such-dir' / 'beta/data/1.json'}" in err
    assert "ESC_SHARED_DATA names the folder of one" in err and len(err.splitlines()) == 1
    assert web.calls.count(web.calls[0]) == fetch_mod.RETRIES
    assert part_files(world["dest"]) == []


def test_download_404_is_not_retried(no_shared, monkeypatch):
    world = no_shared
    web = FakeWeb(world["manifest"])
    web.by_url = {u: d for u, d in web.by_url.items() if not u.endswith("/orig/a.txt")}
    monkeypatch.setattr(fetch_mod, "urlopen", web)
    datasets = load_manifest(world["manifest"])
    with pytest.raises(UserError, match=r"^alpha/a\.txt: download failed after 1 attempt\(s\) \(HTTP 404\)"):
        fetch_mod.fetch(fetch_mod.select(datasets, ["alpha"], world["manifest"]), world["dest"], jobs=1)


def test_download_checksum_mismatch(no_shared, monkeypatch):
    world = no_shared
    monkeypatch.setattr(
        fetch_mod, "urlopen", FakeWeb(world["manifest"], payload={**FILES, "beta/data/2.json": b"x"})
    )
    datasets = load_manifest(world["manifest"])
    files = fetch_mod.select(datasets, ["beta"], world["manifest"])
    with pytest.raises(
        UserError, match=r"^beta/data/2\.json: sha256 mismatch in https://raw\.githubusercontent"
    ):
        fetch_mod.fetch(files, world["dest"], jobs=1)
    assert (world["dest"] / "beta/data/1.json").read_bytes() == FILES["beta/data/1.json"]
    assert not (world["dest"] / "beta/data/2.json").exists()
    assert part_files(world["dest"]) == []


# --- malformed manifests ---------------------------------------------------------------------------


def _entry(**overrides):
    entry = {
        "name": "broken",
        "repo": "owner/repo",
        "commit": COMMIT,
        "licence": "MIT",
        "licence_note": "n",
        "used_for": "u",
        "files": [{"path": "x/y.txt", "source_path": "y.txt", "sha256": sha(b"y")}],
    }
    entry.update(overrides)
    return {k: v for k, v in entry.items() if v is not None}


@pytest.mark.parametrize(
    "entry, problem",
    [
        (_entry(commit="9ad46e7"), "commit"),
        (_entry(licence=None), "missing `licence`"),
        (_entry(repo="no-slash"), "repo"),
        (_entry(files=[{"path": "../y.txt", "source_path": "y.txt", "sha256": sha(b"y")}]), "path"),
        (_entry(files=[{"path": "x/y.txt", "source_path": "y.txt", "sha256": "abc"}]), "sha256"),
        (_entry(files=None), "exactly one of `files` or `checksums`"),
        (_entry(checksums="checksums/missing.sha256"), "exactly one of"),
        (_entry(files=None, checksums="checksums/missing.sha256"), "does not exist"),
        (_entry(extra="?"), "unknown key"),
    ],
)
def test_malformed_entry_names_file_and_entry(tmp_path, entry, problem):
    path = tmp_path / "data" / "sources.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump({"datasets": [entry]}), encoding="utf-8")
    with pytest.raises(DataError) as exc:
        load_manifest(path)
    message = str(exc.value)
    assert str(path) in message and "datasets[0]" in message and problem in message
    if "name" in entry:
        assert "broken" in message


def test_duplicate_local_path_is_rejected(tmp_path):
    path = tmp_path / "sources.yaml"
    path.write_text(yaml.safe_dump({"datasets": [_entry(), _entry(name="other")]}), encoding="utf-8")
    with pytest.raises(DataError, match="x/y.txt is also listed by broken"):
        load_manifest(path)


def test_malformed_checksum_line(tmp_path):
    (tmp_path / "checksums").mkdir()
    (tmp_path / "checksums" / "c.sha256").write_text("nothex  a/b.json\n", encoding="utf-8")
    path = tmp_path / "sources.yaml"
    entry = _entry(files=None, checksums="checksums/c.sha256", local_prefix="a/", source_prefix="")
    path.write_text(yaml.safe_dump({"datasets": [entry]}), encoding="utf-8")
    with pytest.raises(DataError, match=r"c\.sha256 \[record line 1\]"):
        load_manifest(path)


# --- the real data, when this machine has the project's shared copy ---------------------------------

needs_shared = pytest.mark.skipif(
    not shared_data_dir().is_dir(), reason=f"no shared data copy at {shared_data_dir()}"
)


@needs_shared
def test_real_fetch_esc_eval_then_check(tmp_path, capsys):
    dest = tmp_path / "data"
    assert esc_main(["fetch", "--only", "esc_eval", "--offline", "--dest", str(dest)]) == 0
    assert "12 copied" in capsys.readouterr().out
    assert esc_main(["fetch", "--check", "--only", "esc_eval", "--dest", str(dest)]) == 0
    assert esc_main(["fetch", "--only", "esc_eval", "--offline", "--dest", str(dest)]) == 0
    assert "12 already present" in capsys.readouterr().out


@needs_shared
def test_manifest_matches_shared_copy():
    """Every checksum in data/sources.yaml (and checksums/) matches the project's shared copy."""
    assert (
        esc_main(["fetch", "--check", "--dest", str(shared_data_dir()), "--manifest", str(MANIFEST_PATH)])
        == 0
    )
