"""Processes that end early tell the truth and take nothing with them: a run stopped by SIGTERM (a
`timeout`, `scancel`, SLURM's time limit) records why it stopped and releases its folder as Ctrl-C
does; a report site's rebuild replaces only what the site wrote; a benchmark's child dies with its
parent (issue 50)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from esc.paths import REPO_ROOT
from tests.test_bad_inputs import HAS_DATA, fx

__all__ = ["fx"]  # the fixture of the bad-input table: its card files


def test_a_second_sigterm_during_the_cleanup_does_not_cut_it_short(tmp_path: Path) -> None:
    """SLURM and `srun` may signal a job more than once before the SIGKILL: the first SIGTERM stops the
    run, later ones wait for the manifest and the lock to be written and released."""
    script = f"""
import os, signal, sys, time
sys.path.insert(0, {str(REPO_ROOT)!r})
from esc.lifecycle import JobResult, job_run
try:
    with job_run({str(tmp_path / "out")!r}, "probe", None, {{}}, seed=0) as job:
        job.on_stop(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(0.2), {{"stage": "stop"}})[2])
        (job.folder.folder / "work.txt").write_text("an output: the run did work, its records stay")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
except KeyboardInterrupt as err:
    print("stopped:", type(err).__name__, err)
print("handler restored:", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "stopped: Terminated SIGTERM" in done.stdout, done.stderr[-1500:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["status"], manifest["stage"]) == ("interrupted", "stop")
    assert not (tmp_path / "out" / ".lock.owner").exists()
    assert "handler restored: True" in done.stdout  # after the run, SIGTERM ends the process again


def test_a_site_rebuild_never_deletes_what_the_site_did_not_write(tmp_path: Path) -> None:
    """`esc report R --out S` over an earlier site S that someone added to (notes, a copied run
    folder): the rebuild refuses, naming a file the site did not write, and S stays as it was; a
    page of the old site that the new one lacks is still replaced."""
    from esc.cli import main
    from tests.synthetic_run import synthetic_run

    rank = synthetic_run(tmp_path / "run", cards=2, targets=["alpha", "beta"], dims=7, seed=2, bootstrap=10)
    site = tmp_path / "site"
    argv = ["report", str(rank), "--out", str(site)]
    assert main(argv) == 0
    (site / "notes.md").write_text("my notes")
    (site / "copied-run" / "scores").mkdir(parents=True)
    (site / "copied-run" / "scores" / "x.jsonl").write_text("{}\n")
    (site / "targets" / "mine.txt").write_text("in a folder of the site, yet mine")
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    for path, data in before.items():
        assert path.read_bytes() == data, f"{path} changed"
    assert not list(tmp_path.glob(".site.*")), "a refused build left its temporary folder"
    (site / "notes.md").unlink()
    shutil.rmtree(site / "copied-run")
    with pytest.raises(SystemExit):  # a file of mine inside one of the site's folders: mine too
        main(argv)
    assert (site / "targets" / "mine.txt").is_file()
    (site / "targets" / "mine.txt").unlink()
    assert main(argv) == 0  # only what the site wrote: replaced

    fewer = synthetic_run(tmp_path / "fewer", cards=2, targets=["alpha"], dims=7, seed=2, bootstrap=10)
    assert main(["report", str(fewer), "--out", str(site)]) == 0
    assert not (site / "targets" / "beta.html").exists() and (site / "targets" / "alpha.html").is_file()


@pytest.mark.skipif(not HAS_DATA, reason="the tiny model needs the third-party data: run `make data`")
def test_a_benchmark_child_dies_with_its_parent_killed_with_sigkill(tmp_path: Path) -> None:
    """`bench_evaluate.py` runs each run of ours in a child; kill -9 of the benchmark while the child
    computes ends the child too (within seconds), instead of leaving it to run for the whole run."""
    import psutil

    command = [
        *(sys.executable, str(REPO_ROOT / "benchmarks" / "bench_evaluate.py"), "--model", "tiny"),
        *("--cards", "64", "--max-new-tokens", "32", "--skip-official", "--keep", str(tmp_path / "keep")),
    ]
    log = tmp_path / "stderr.txt"
    with log.open("wb") as stderr:
        parent = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and parent.poll() is None:
            children = psutil.Process(parent.pid).children(recursive=True)
            if children and sum(children[0].cpu_times()[:2]) > 4:  # past its imports: computing
                break
            time.sleep(0.2)
        assert children and parent.poll() is None, log.read_text()[-1500:]
        parent.kill()
        parent.wait()
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"still running after their parent's SIGKILL: {alive}"
    finally:
        for proc in children:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if parent.poll() is None:
            parent.kill()
        parent.wait()


def test_a_benchmark_child_takes_the_processes_it_started_with_it(tmp_path: Path) -> None:
    """What a child of `bench_evaluate.py` starts (vLLM's engine core; here a `sleep`) ends with it
    when the benchmark is killed with SIGKILL: the child is its own process group, and goes whole."""
    import psutil

    pids = tmp_path / "pids"
    read_end, write_end = os.pipe()  # as bench_evaluate.run_in_child starts a child
    child_code = (
        f"import subprocess, sys, time; sys.argv = ['child', '--parent-pipe', '{read_end}']; "
        f"sys.path.insert(0, {str(REPO_ROOT)!r}); import benchmarks.bench_evaluate; "
        "grandchild = subprocess.Popen(['sleep', '120']); "
        f"open({str(pids)!r}, 'w').write(str(grandchild.pid)); "
        "time.sleep(120)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", child_code], pass_fds=(read_end,), start_new_session=True, cwd=REPO_ROOT
    )
    os.close(read_end)
    procs = [psutil.Process(child.pid)]
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        procs.append(psutil.Process(int(pids.read_text())))
        os.close(write_end)  # what the kernel does when the parent dies, however it dies
        write_end = -1
        _, alive = psutil.wait_procs(procs, timeout=10)
        assert not alive, f"still running after their parent ended: {alive}"
    finally:
        if write_end >= 0:
            os.close(write_end)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        child.wait()
