"""The repo's sbatch scripts under a real SLURM (issue 54, item 1): `make slurm` starts a one-node
cluster on this machine (slurm/local/start.sh); these tests submit the scripts unchanged, with their
GPU lines overridden on the sbatch command line. Marker `slurm`: `make test-slurm`; skipped, saying
why, where no SLURM controller answers."""

from __future__ import annotations

import json
import shutil
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


def test_an_evaluate_array_with_a_requeued_task_merges_to_the_unsharded_run(tmp_path: Path) -> None:
    whole = run_entry("evaluate.py", [*EVAL_ARGS, f"hydra.run.dir={tmp_path / 'whole'}"])
    assert whole.returncode == 0, whole.stderr[-2000:]
    root = tmp_path / "array"
    job = _sbatch(
        [
            "--array=0-1",
            *NO_GPU,
            f"--output={tmp_path}/slurm-%A_%a.out",
            "slurm/evaluate_array.sbatch",
            *EVAL_ARGS,
        ],
        {"ESC_RUN_ROOT": str(root)},
    )
    first = root / "shard-0" / "dialogues" / "tiny__tiny__en.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (first.is_file() and first.read_text().count("\n") >= 1):
        time.sleep(0.2)
    requeued = subprocess.run(["scontrol", "requeue", f"{job}_0"], capture_output=True, text=True)
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
    assert _dialogues(merged) == _dialogues(tmp_path / "whole") and len(_dialogues(merged)) == 4
    if requeued.returncode == 0:  # the task was still running when requeued: its second run resumed
        manifest = json.loads((root / "shard-0" / "manifest.json").read_text())
        assert manifest.get("previous_attempts"), manifest.keys()


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
    """`rank.py -m hydra/launcher=slurm`: two jobs through submitit (it polls `sacct`, which this
    cluster has no database for: it warns and reads the jobs' results instead); then the sweep's
    folder is what `scores=` takes for both runs (issue 54, item 5)."""
    dialogues = tmp_path / "eval"
    made = run_entry("evaluate.py", [*EVAL_ARGS, f"hydra.run.dir={dialogues}"])
    assert made.returncode == 0, made.stderr[-2000:]
    sweep = tmp_path / "sweep"
    done = run_entry(
        "rank.py",
        ["-m", "hydra/launcher=slurm", "judge=tiny", f"dialogues={dialogues}", "dimensions=[empathy]",
         "scoring.progress=false", "leaderboard.bootstrap=10,20", "hydra.launcher.gpus_per_node=0",
         "hydra.launcher.tasks_per_node=1", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=3",
         "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}"],
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for run in ("0", "1"):
        manifest = json.loads((sweep / run / "manifest.json").read_text())
        assert manifest["status"] == "completed" and manifest["slurm_job_id"], manifest.get("status")
    board = run_entry(
        "rank.py", ["mode=leaderboard", f"scores={sweep}", f"hydra.run.dir={tmp_path / 'board'}"]
    )
    assert board.returncode == 0, board.stderr[-2000:]
    assert (tmp_path / "board" / "leaderboard.md").is_file()
