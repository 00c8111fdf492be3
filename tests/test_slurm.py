"""The repo's sbatch scripts under a real SLURM (issue 54, item 1): `make slurm` starts a one-node
cluster on this machine (slurm/local/start.sh); these tests submit the scripts unchanged, with their
GPU lines overridden on the sbatch command line. Marker `slurm`: `make test-slurm`; skipped, saying
why, where no SLURM controller answers."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT, run_entry

pytestmark = pytest.mark.slurm

EVAL_ARGS = ["roleplayer=tiny", "target=tiny", "cards.limit=4", "cards.languages=[en]", "dialogue.turns=2",
             "cache.enabled=false", "engine.progress=false"]  # fmt: skip
NO_GPU = ["--gpus-per-task=0", "--cpus-per-task=1", "--mem=3G"]  # the #SBATCH lines a CPU node cannot meet


def _slurm_up() -> str | None:
    if shutil.which("sbatch") is None:
        return "no sbatch on this machine: run `make slurm` (Debian's slurm-wlm and munge, as root)"
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        return f"no SLURM controller answers ({done.stderr.strip()[:200]}): run `make slurm`"
    return None


@pytest.fixture(scope="module", autouse=True)
def slurm() -> None:
    why = _slurm_up()
    if why:
        pytest.skip(why)


def _sbatch(args: list[str], env: dict[str, str]) -> str:
    import os

    done = subprocess.run(
        ["sbatch", "--parsable", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _state(job: str) -> str:
    """A job's (or array task's) state from scontrol ("" once SLURM has forgotten it)."""
    done = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
    for word in done.stdout.split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    return ""


def _wait(jobs: list[str], timeout: float = 600) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = {j: _state(j) for j in jobs}
        if all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "") for s in states.values()):
            return states
        time.sleep(1)
    raise AssertionError(f"jobs still running after {timeout} s: {states}")


def _dialogues(folder: Path) -> dict[int, list[str]]:
    out = {}
    for path in sorted(folder.glob("dialogues/*.jsonl")):
        if path.name.endswith(".failed.jsonl"):
            continue
        for line in path.read_text().splitlines():
            d = json.loads(line)
            out[d["card_id"]] = [t["text"] for t in d["turns"]]
    return out


def _accounting() -> bool:
    """Whether this cluster keeps accounting (`sacct` answers): `make slurm` sets it up."""
    done = subprocess.run(["sacct", "-n", "-X", "-S", "now-1minutes"], capture_output=True, text=True)
    return done.returncode == 0 and "disabled" not in done.stderr


def _sacct(jobs: list[str]) -> dict[str, str]:
    """{job id: state} as accounting recorded them (array tasks as JOB_TASK)."""
    done = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(jobs)], capture_output=True, text=True
    )
    return dict(line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)


def _until(ready, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not ready():
        time.sleep(0.2)


def test_an_evaluate_array_with_a_cancelled_and_requeued_task_merges_to_the_unsharded_run(
    tmp_path: Path,
) -> None:
    # one dialogue at a time, 6 per shard: the task is cancelled with dialogues still to play
    args = [*EVAL_ARGS, "cards.limit=12", "engine.wave_size=1"]
    whole = run_entry("evaluate.py", [*args, f"hydra.run.dir={tmp_path / 'whole'}"], process=True)
    assert whole.returncode == 0, whole.stderr[-2000:]
    root = tmp_path / "array"
    job = _sbatch(
        [
            "--array=0-1",
            *NO_GPU,
            f"--output={tmp_path}/slurm-%A_%a.out",
            "slurm/evaluate_array.sbatch",
            *args,
        ],
        {"ESC_RUN_ROOT": str(root)},
    )
    first = root / "shard-0" / "dialogues" / "tiny__tiny__en.jsonl"
    _until(lambda: first.is_file() and first.read_text().count("\n") >= 1)
    # killed with scancel (SIGTERM, as a time limit or a user does), then put back in the queue
    cancelled = subprocess.run(["scancel", f"{job}_0"], capture_output=True, text=True)
    assert cancelled.returncode == 0, cancelled.stderr
    _until(lambda: _state(f"{job}_0") in ("CANCELLED", "COMPLETED"), 60)
    assert _state(f"{job}_0") == "CANCELLED"
    played = first.read_text().count("\n")
    assert 1 <= played < 6, played  # stopped part-way
    requeued = subprocess.run(["scontrol", "requeue", f"{job}_0"], capture_output=True, text=True)
    assert requeued.returncode == 0, requeued.stderr
    states = _wait([f"{job}_0", f"{job}_1"])
    assert set(states.values()) <= {"COMPLETED", ""}, states
    merged = tmp_path / "merged"
    esc = str(REPO_ROOT / ".venv" / "bin" / "esc")
    shards = [str(root / "shard-0"), str(root / "shard-1")]
    done = subprocess.run(
        [esc, "dialogues", "merge", *shards, "--out", str(merged)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert _dialogues(merged) == _dialogues(tmp_path / "whole") and len(_dialogues(merged)) == 12
    manifest = json.loads((root / "shard-0" / "manifest.json").read_text())
    assert manifest["status"] == "completed"  # the requeued run resumed: it played only what was left
    assert [a["status"] for a in manifest["previous_attempts"]] == ["interrupted"]
    assert first.read_text().count("\n") == 6  # no dialogue played twice


def test_train_1node_runs_a_few_cpu_steps_as_a_slurm_job(tmp_path: Path) -> None:
    from tests.helpers import FAST_TRAIN

    run_dir = tmp_path / "train"
    job = _sbatch(
        ["--gpus-per-node=0", "--ntasks-per-node=1", "--cpus-per-task=2", "--mem=6G",
         f"--output={tmp_path}/slurm-train-%j.out", "slurm/train_1node.sbatch", "+exp=train/esc_role",
         *FAST_TRAIN, "trainer.max_steps=2"],
        {"ESC_RUN_DIR": str(run_dir)},
    )  # fmt: skip
    assert _wait([job]) in ({job: "COMPLETED"}, {job: ""}), (tmp_path / f"slurm-train-{job}.out").read_text()[
        -2000:
    ]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["global_step"] == 2
    assert str(manifest["slurm_job_id"]) == job  # the run knows the job that made it


def test_a_rank_py_sweep_through_submitit_and_its_folder_read_whole(tmp_path: Path) -> None:
    """`rank.py -m hydra/launcher=slurm`: two jobs through submitit (it polls `sacct`: with `make
    slurm`'s accounting it reads their states there, without it it warns and reads the jobs' results);
    then the sweep's folder is what `scores=` takes for both runs (issue 54, item 5)."""
    dialogues = tmp_path / "eval"
    made = run_entry("evaluate.py", [*EVAL_ARGS, f"hydra.run.dir={dialogues}"], process=True)
    assert made.returncode == 0, made.stderr[-2000:]
    sweep = tmp_path / "sweep"
    done = run_entry(
        "rank.py",
        ["-m", "hydra/launcher=slurm", "judge=tiny", f"dialogues={dialogues}", "dimensions=[empathy]",
         "scoring.progress=false", "leaderboard.bootstrap=10,20", "hydra.launcher.gpus_per_node=0",
         "hydra.launcher.tasks_per_node=1", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=3",
         "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}"],
        timeout=600, process=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    if _accounting():
        assert "Bypassing sacct error" not in done.stderr + done.stdout
    for run in ("0", "1"):
        manifest = json.loads((sweep / run / "manifest.json").read_text())
        assert manifest["status"] == "completed" and manifest["slurm_job_id"], manifest.get("status")
    board = run_entry(
        "rank.py",
        ["mode=leaderboard", f"scores={sweep}", f"hydra.run.dir={tmp_path / 'board'}"],
        process=True,
    )
    assert board.returncode == 0, board.stderr[-2000:]
    assert (tmp_path / "board" / "leaderboard.md").is_file()


def test_the_grid_end_to_end_evaluate_array_merge_and_rank_jobs_chained(tmp_path: Path) -> None:
    """docs/cluster.md section 12, small: an evaluate array (its request cache per task on local
    disk, merged into each shard's folder), a merge job and a judging job (slurm/rank.sbatch), each
    starting when the one before succeeded (`--dependency=afterok`)."""
    root, merged, ranked = tmp_path / "array", tmp_path / "merged", tmp_path / "rank"
    args = [a for a in EVAL_ARGS if not a.startswith("cache.")]  # the jobs' own caches
    array = _sbatch(
        [
            "--array=0-1",
            *NO_GPU,
            f"--output={tmp_path}/slurm-%A_%a.out",
            "slurm/evaluate_array.sbatch",
            *args,
        ],
        {"ESC_RUN_ROOT": str(root)},
    )
    esc = REPO_ROOT / ".venv" / "bin" / "esc"
    merge = _sbatch(
        [f"--dependency=afterok:{array}", "--cpus-per-task=1", "--mem=1G",
         f"--output={tmp_path}/merge-%j.out",
         f"--wrap={esc} dialogues merge {root}/shard-0 {root}/shard-1 --out {merged}"],
        {},
    )  # fmt: skip
    rank = _sbatch(
        [f"--dependency=afterok:{merge}", *NO_GPU, f"--output={tmp_path}/rank-%j.out", "slurm/rank.sbatch",
         "judge=tiny", f"dialogues={merged}", "dimensions=[empathy]", "scoring.progress=false"],
        {"ESC_RUN_DIR": str(ranked)},
    )  # fmt: skip
    queue = subprocess.run(
        ["squeue", "-h", "-o", "%i %T %r", "-j", f"{merge},{rank}"], capture_output=True, text=True
    )
    assert "Dependency" in queue.stdout, queue.stdout  # waiting on the jobs before them
    states = _wait([f"{array}_0", f"{array}_1", merge, rank])
    assert set(states.values()) <= {"COMPLETED", ""}, (
        states,
        (tmp_path / f"rank-{rank}.out").read_text()[-2000:],
    )
    assert len(_dialogues(merged)) == 4
    for shard in ("shard-0", "shard-1"):  # each task's cache came back from local disk
        with sqlite3.connect(root / shard / "requests.sqlite") as db:
            assert db.execute("SELECT COUNT(*) FROM replies").fetchone()[0] > 0
    assert not list(Path("/tmp").glob(f"esc-requests-{array}*"))  # and left nothing behind
    manifest = json.loads((ranked / "manifest.json").read_text())
    assert manifest["status"] == "completed" and str(manifest["slurm_job_id"]) == rank
    assert "tiny" in (ranked / "leaderboard.md").read_text()
    if _accounting():  # sacct holds every job of the chain, as a cluster's users read it afterwards
        recorded = _sacct([array, merge, rank])
        for job in (f"{array}_0", f"{array}_1", merge, rank):
            assert recorded.get(job) == "COMPLETED", recorded
