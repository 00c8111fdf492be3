"""Outputs never replace what a person made (issue 62): a killed export's staging folder is cleaned
by the next export (only a folder it marked as its own), `esc report --out LINK` writes the folder
the link names, a run folder whose latest run is going, was killed or ended before its log is said
to be so by `esc export` and `esc report` alike; `esc annotate agreement --out` and
`esc models convert-internlm2` keep a person's files."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from esc.cli import main
from esc.paths import REPO_ROOT
from esc.rundir import acquire_folder
from tests.helpers import refused
from tests.synthetic_run import synthetic_run


def _run(tmp_path: Path) -> Path:
    return synthetic_run(tmp_path / "run", cards=2, targets=2, dims=2, seed=1, bootstrap=0)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_the_staging_folder_of_a_killed_export_is_removed_by_the_next_one(tmp_path: Path) -> None:
    """kill -9 during an export left a `.partial` folder that no later export removed. The next
    export to the same folder removes it (it holds the staging marker of a process that is gone),
    never a folder a person made, whatever its name."""
    rank, out = _run(tmp_path), tmp_path / "ds"
    script = f"""
import sys, time
sys.path.insert(0, {str(REPO_ROOT)!r})
from datasets import Dataset
real = Dataset.save_to_disk
def slow(self, *args, **kwargs):
    real(self, *args, **kwargs)
    print("staged", flush=True)
    time.sleep(600)
Dataset.save_to_disk = slow
from esc.cli import main
main(["export", {str(rank)!r}, "--out", {str(out)!r}])
"""
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        assert child.stdout is not None and child.stdout.readline() == "staged\n"
    finally:
        child.kill()
        child.wait()
    [left] = hidden(tmp_path)
    assert left.startswith(".ds.") and (tmp_path / left / "dialogues.parquet").is_file()
    host = socket.gethostname().replace("-", "_")
    mine = [tmp_path / f".ds.staging-{host}-{child.pid}-mine", tmp_path / "ds.partial"]
    for folder in mine:  # named like a staging folder, made by a person: no marker
        folder.mkdir()
        (folder / "notes.txt").write_text("keep")
    assert main(["export", str(rank), "--out", str(out)]) == 0
    assert hidden(tmp_path) == [mine[0].name] and all((f / "notes.txt").is_file() for f in mine)


def test_a_report_through_a_link_writes_the_folder_it_names(tmp_path: Path) -> None:
    """`esc report --out LINK` replaced the link with a folder."""
    rank, site = _run(tmp_path), tmp_path / "site"
    assert main(["report", str(rank), "--out", str(site)]) == 0
    link = tmp_path / "link"
    link.symlink_to(site, target_is_directory=True)
    (site / "index.html").write_text("an old page")
    assert main(["report", str(rank), "--out", str(link)]) == 0
    assert link.is_symlink() and "an old page" not in (site / "index.html").read_text()
    assert not hidden(tmp_path)


def _latest_run(rank: Path, status: str, run_log: bool) -> None:
    """As if a later rank.py run had started in `rank` and is now `status`; its run log gone where
    `run_log` is false (the folder's first run)."""
    manifest = json.loads((rank / "manifest.json").read_text())
    manifest.update(status=status, start_time="2999-01-01T00:00:00+00:00", end_time=None)
    (rank / "manifest.json").write_text(json.dumps(manifest))
    if not run_log:
        (rank / "run.json").unlink(missing_ok=True)


@pytest.mark.parametrize("tool", ["export", "report"])
def test_a_folder_whose_first_run_is_still_going_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture, tool: str
) -> None:
    """`esc export` and `esc report` of a folder whose first run is still going said "run esc runs
    upgrade"; a run killed before its log is told apart."""
    rank = _run(tmp_path)
    _latest_run(rank, "running", run_log=False)
    lock = acquire_folder(rank, "rank.score")  # this process is the run
    try:
        with pytest.raises(SystemExit) as exit_:
            main([tool, str(rank), "--out", str(tmp_path / "out")])
    finally:
        (rank / ".lock.owner").unlink()
        lock.release()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "upgrade" not in err
    assert err.startswith(f"error: {rank}: its run is still going") and "no run log yet" in err
    for status in ("running", "interrupted"):  # killed (no process holds the folder), or stopped
        _latest_run(rank, status, run_log=False)
        with pytest.raises(SystemExit):
            main([tool, str(rank), "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert err.startswith(f"error: {rank}: its run ") and "before it wrote its run log" in err
        assert "upgrade" not in err and ("killed" if status == "running" else "interrupted") in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tool", ["export", "report"])
def test_a_folder_whose_latest_run_was_killed_is_read_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture, tool: str
) -> None:
    """An export of a folder whose latest run was killed read the older run.json without a word."""
    rank = _run(tmp_path)
    _latest_run(rank, "running", run_log=True)
    assert main([tool, str(rank), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {rank}: its latest run (started 2999-01-01T00:00:00+00:00) was killed")
    assert "the run log of an earlier run" in err


# --- issue 62: the other outputs that replaced a person's files ---------------------------------------


def test_annotate_agreement_never_overwrites_a_persons_files(tmp_path: Path, capsys) -> None:
    """Item 11: `esc annotate agreement LABELS --out X` silently overwrote a person's X.md, X.csv, X.json."""
    from esc.annotate.tasks import Label, write_labels

    labels = tmp_path / "labels.jsonl"
    write_labels([Label(f"t{i}", "dialogue", who, "fluency", str((i + k) % 5))
                  for i in range(6) for k, who in enumerate(("ana", "ben"))], labels)  # fmt: skip
    out = tmp_path / "agree"
    for suffix in (".md", ".csv", ".json"):
        out.with_suffix(suffix).write_text(f"mine {suffix}")
        err = refused(capsys, ["annotate", "agreement", str(labels), "--out", str(out), "--bootstrap", "0"])
        assert f"{out.with_suffix(suffix)}: --out exists" in err and "--force" in err
        assert out.with_suffix(suffix).read_text() == f"mine {suffix}"
        out.with_suffix(suffix).unlink()
    named = tmp_path / "lab.json"  # OUT.json would be the labels file itself: refused even with --force
    named.write_bytes(labels.read_bytes())
    err = refused(capsys, ["annotate", "agreement", str(named), "--out", str(tmp_path / "lab"), "--force"])
    assert f"{named}: --out is one of this command's inputs" in err
    assert named.read_bytes() == labels.read_bytes()
    out.with_suffix(".md").write_text("mine")
    assert main(["annotate", "agreement", str(labels), "--out", str(out), "--bootstrap", "0", "--force"]) == 0
    assert "fluency" in out.with_suffix(".md").read_text() and json.loads(
        out.with_suffix(".json").read_text()
    )


CONVERT_FIXTURE = Path(__file__).parent / "fixtures" / "internlm2_tiny"


def test_convert_internlm2_never_deletes_what_a_person_added_to_its_output(tmp_path: Path, capsys) -> None:
    """Item 12: rerunning `esc models convert-internlm2 SRC OUT` deleted NOTES.txt, my_finetune/ and
    README.md a person had added to OUT. They are named and refused; with --force they stay beside
    the new conversion."""
    src, out = CONVERT_FIXTURE / "base", tmp_path / "llama"
    argv = ["models", "convert-internlm2", str(src), str(out)]
    assert main(argv) == 0
    assert main(argv) == 0  # its own output, nothing else in it: a rerun replaces it
    (out / "NOTES.txt").write_text("mine")
    (out / "my_finetune").mkdir()
    (out / "my_finetune" / "adapter_model.safetensors").write_bytes(b"mine too")
    (out / "README.md").write_text("# my model")
    mine = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.parent.name == "my_finetune"
            or p.name in ("NOTES.txt", "README.md")}  # fmt: skip
    err = refused(capsys, argv)
    assert f"{out}: holds NOTES.txt and 2 more" in err and "--force" in err
    assert all(p.read_bytes() == data for p, data in mine.items())
    assert main([*argv, "--force"]) == 0
    assert all(p.read_bytes() == data for p, data in mine.items())
    assert json.loads((out / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_convert_internlm2_into_a_folder_it_did_not_write_only_with_force(tmp_path: Path, capsys) -> None:
    out = tmp_path / "models"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    argv = ["models", "convert-internlm2", str(CONVERT_FIXTURE / "base"), str(out)]
    err = refused(capsys, argv)
    assert "not written by this converter" in err and "--force" in err
    assert main([*argv, "--force"]) == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "model.safetensors").is_file()


def test_convert_internlm2_of_a_missing_source_says_not_found(tmp_path: Path, capsys) -> None:
    """A missing SRC was "not an InternLM2 checkpoint"."""
    err = refused(capsys, ["models", "convert-internlm2", str(tmp_path / "nowhere"), str(tmp_path / "out")])
    assert err.startswith(f"error: {tmp_path / 'nowhere'}: not found") and not (tmp_path / "out").exists()
