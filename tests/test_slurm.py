"""The SLURM scripts (slurm/) and the submitit launcher config, checked offline without SLURM.

The sbatch scripts are run with bash in a fake job environment (SLURM_* variables) with a stub `srun`
first on PATH that prints the command line it was given; the Hydra launcher config is composed with
the real hydra-submitit-launcher plugin.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers import CONF_DIR, FAST_TRAIN, REPO_ROOT, requires_data

SLURM_DIR = REPO_ROOT / "slurm"
SBATCH = {"1node": SLURM_DIR / "train_1node.sbatch", "multinode": SLURM_DIR / "train_multinode.sbatch"}
SCRIPTS = [*SBATCH.values(), SLURM_DIR / "_common.sh"]

STUB_SRUN = """#!/bin/sh
for a in "$@"; do printf 'ARG:%s\\n' "$a"; done
printf 'ENV:ESC_TEST_ACTIVATED=%s\\n' "${ESC_TEST_ACTIVATED:-}"
printf 'ENV:SRUN_CPUS_PER_TASK=%s\\n' "${SRUN_CPUS_PER_TASK:-}"
exit "${STUB_SRUN_RC:-0}"
"""


def sbatch_directives(path: Path) -> list[str]:
    """The `#SBATCH` options sbatch reads: those before the first command line of the script."""
    options = []
    for line in path.read_text().splitlines()[1:]:
        if line.startswith("#SBATCH"):
            options.append(line.removeprefix("#SBATCH").strip())
        elif line.strip() and not line.startswith("#"):
            break
    return options


def fake_repo(tmp_path: Path, with_venv: bool = False) -> Path:
    """A copy of slurm/ next to an empty train.py: the scripts never see the real checkout."""
    repo = tmp_path / "repo"
    shutil.copytree(SLURM_DIR, repo / "slurm", ignore=shutil.ignore_patterns("logs"))
    (repo / "train.py").write_text("raise SystemExit('the stub srun never runs this')\n")
    if with_venv:
        python = repo / ".venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\n")
        python.chmod(0o755)
    return repo


def job_env(tmp_path: Path, nodes: int = 1, **extra: str) -> dict[str, str]:
    """The variables SLURM sets in a batch job of `nodes` nodes x 8 GPUs, with the stub srun on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text(STUB_SRUN)
    srun.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "ESC_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        SLURM_JOB_ID="4242",
        SLURM_JOB_NAME="esc-train",
        SLURM_JOB_NODELIST="gpu[01-02]" if nodes > 1 else "gpu01",
        SLURM_NNODES=str(nodes),
        SLURM_NTASKS_PER_NODE="8",
        SLURM_GPUS_ON_NODE="8",
        SLURM_CPUS_PER_TASK="8",
    )
    env.update(extra)
    return env


def run_script(
    script: Path, args: list[str], env: dict[str, str], cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def srun_argv(result: subprocess.CompletedProcess) -> list[str]:
    return [line.removeprefix("ARG:") for line in result.stdout.splitlines() if line.startswith("ARG:")]


def stub_env(result: subprocess.CompletedProcess) -> dict[str, str]:
    pairs = [line.removeprefix("ENV:") for line in result.stdout.splitlines() if line.startswith("ENV:")]
    return dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_syntax(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_partition_or_account_in_scripts(script: Path) -> None:
    text = script.read_text()
    assert not re.search(r"--(partition|account)\b", text), "cluster specifics belong in SBATCH_* or the CLI"
    for option in sbatch_directives(script) if script.suffix == ".sbatch" else []:
        assert not re.match(r"-[pA](\s|=|$)", option), option


@pytest.mark.parametrize(("name", "nodes"), [("1node", "1"), ("multinode", "2")])
def test_sbatch_directives(name: str, nodes: str) -> None:
    options = sbatch_directives(SBATCH[name])
    for expected in (
        f"--nodes={nodes}",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--cpus-per-task=8",
        "--time=24:00:00",
        "--signal=SIGUSR1@120",  # no B: prefix: the signal goes to the ranks, where Lightning handles it
        "--requeue",
        "--job-name=esc-train",
        "--output=slurm/logs/%x-%j.out",
    ):
        assert expected in options, f"{expected} missing from {SBATCH[name].name}: {options}"
    assert (SLURM_DIR / "logs" / ".gitignore").read_text().split() == ["*", "!.gitignore"]


@pytest.mark.parametrize(("name", "nodes"), [("1node", 1), ("multinode", 2), ("multinode", 4)])
def test_srun_command_line(tmp_path: Path, name: str, nodes: int) -> None:
    repo = fake_repo(tmp_path, with_venv=True)
    script = repo / "slurm" / SBATCH[name].name
    result = run_script(script, ["+exp=train/esc_role", "peft.r=8"], job_env(tmp_path, nodes=nodes), cwd=repo)
    assert result.returncode == 0, result.stderr
    argv = srun_argv(result)
    assert argv[0] == "--kill-on-bad-exit=1"
    assert argv[1] == str(repo / ".venv" / "bin" / "python"), "the checkout's .venv is the default"
    assert argv[2:] == [
        "train.py",
        "+exp=train/esc_role",
        "peft.r=8",
        "hydra.run.dir=outputs/slurm/esc-train-4242",  # job name + id: the same after a requeue
        "trainer.devices=8",
        f"trainer.num_nodes={nodes}",
    ]
    assert stub_env(result)["SRUN_CPUS_PER_TASK"] == "8"
    assert "run dir outputs/slurm/esc-train-4242" in result.stdout


def test_env_activation_and_run_dir_from_environment(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path, with_venv=True)
    env = job_env(
        tmp_path,
        ESC_ENV_ACTIVATE="export ESC_TEST_ACTIVATED=yes",
        ESC_RUN_DIR="outputs/slurm/esc-train-1111",  # a new job continuing an old run
    )
    result = run_script(repo / "slurm" / "train_1node.sbatch", ["+exp=train/esc_role"], env, cwd=repo)
    assert result.returncode == 0, result.stderr
    argv = srun_argv(result)
    assert argv[1] == "python", "an activated environment provides `python` on PATH"
    assert "hydra.run.dir=outputs/slurm/esc-train-1111" in argv
    assert stub_env(result)["ESC_TEST_ACTIVATED"] == "yes"


def test_python_fallback_without_venv(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path, with_venv=False)
    result = run_script(repo / "slurm" / "train_1node.sbatch", [], job_env(tmp_path), cwd=repo)
    assert result.returncode == 0, result.stderr
    assert srun_argv(result)[1:3] == ["python", "train.py"]


def test_repo_from_esc_repo(tmp_path: Path) -> None:
    """sbatch runs a spool copy of the script: the repository comes from the job's directory or ESC_REPO."""
    repo = fake_repo(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = repo / "slurm" / "train_1node.sbatch"
    result = run_script(script, [], job_env(tmp_path, ESC_REPO=str(repo)), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert "train.py" in srun_argv(result)
    result = run_script(script, [], job_env(tmp_path), cwd=elsewhere)
    assert result.returncode == 2 and "repo root" in result.stderr


def test_srun_failure_is_the_job_status(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path)
    result = run_script(repo / "slurm" / "train_1node.sbatch", [], job_env(tmp_path, STUB_SRUN_RC="3"), repo)
    assert result.returncode == 3


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("hydra.run.dir=elsewhere", "ESC_RUN_DIR"),
        ("trainer.devices=4", "--ntasks-per-node"),
        ("trainer.num_nodes=3", "--nodes"),
        ("-m", "hydra/launcher=slurm"),
    ],
)
def test_overrides_owned_by_the_script_are_refused(tmp_path: Path, arg: str, message: str) -> None:
    repo = fake_repo(tmp_path)
    result = run_script(
        repo / "slurm" / "train_1node.sbatch", ["+exp=train/esc_role", arg], job_env(tmp_path), repo
    )
    assert result.returncode == 2 and message in result.stderr
    assert not srun_argv(result)


def test_refuses_to_run_outside_a_job_or_with_ntasks(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path)
    script = repo / "slurm" / "train_1node.sbatch"
    env = job_env(tmp_path)
    del env["SLURM_JOB_ID"]
    result = run_script(script, [], env, repo)
    assert result.returncode != 0 and "sbatch" in result.stderr and not srun_argv(result)
    env = job_env(tmp_path)
    del env["SLURM_NTASKS_PER_NODE"]  # what `--ntasks=16` without --ntasks-per-node gives
    result = run_script(script, [], env, repo)
    assert result.returncode == 2 and "--ntasks-per-node" in result.stderr


def test_emitted_overrides_compose(tmp_path: Path) -> None:
    """What the script appends to the user's overrides is valid for train.py's config."""
    from tests.helpers import compose

    repo = fake_repo(tmp_path)
    result = run_script(
        repo / "slurm" / "train_multinode.sbatch", ["+exp=train/esc_role"], job_env(tmp_path, nodes=2), repo
    )
    overrides = [a for a in srun_argv(result)[3:] if not a.startswith("hydra.")]
    cfg = compose(overrides)
    assert cfg.trainer.devices == 8 and cfg.trainer.num_nodes == 2
    assert cfg.model.name_or_path == "Qwen/Qwen1.5-14B-Chat"


def compose_with_hydra(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=True)


def test_submitit_launcher_config_composes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_PARTITION", "SLURM_ACCOUNT", "SLURM_QOS", "GPUS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    cfg = compose_with_hydra(["hydra/launcher=slurm", "+exp=train/esc_role"])
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher.partition is None and launcher.account is None and launcher.qos is None
    assert launcher.tasks_per_node == launcher.gpus_per_node == 8  # one task per GPU for Lightning
    assert launcher.signal_delay_s > 0 and launcher.max_num_timeout > 0
    OmegaConf.to_container(launcher, resolve=True)


def test_submitit_launcher_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_PARTITION", "gpu-a100")
    monkeypatch.setenv("SLURM_ACCOUNT", "my-project")
    monkeypatch.setenv("GPUS_PER_NODE", "4")
    cfg = compose_with_hydra(["hydra/launcher=slurm", "+exp=train/esc_role"])
    launcher = cfg.hydra.launcher
    assert (launcher.partition, launcher.account) == ("gpu-a100", "my-project")
    assert launcher.tasks_per_node == launcher.gpus_per_node == 4  # the env string becomes an int

    from hydra.utils import instantiate

    plugin = instantiate(launcher)
    assert type(plugin).__name__ == "SlurmLauncher" and plugin.params["tasks_per_node"] == 4


@pytest.mark.slow
@requires_data
def test_tiny_training_through_the_sbatch_script(tmp_path: Path) -> None:
    """The real train.py under the script, with an srun stub that runs one task as SLURM would."""
    bin_dir = tmp_path / "exec-bin"  # ahead of job_env's printing stub on PATH
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(
        "#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\n"
        'export SLURM_NTASKS=1 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0\nexec "$@"\n'
    )
    srun.chmod(0o755)
    out = tmp_path / "run"
    env = job_env(
        tmp_path,
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        SLURM_NTASKS_PER_NODE="1",
        SLURM_GPUS_ON_NODE="",
        SLURM_CPUS_PER_TASK="2",
        SLURM_JOB_NODELIST="localhost",
        ESC_RUN_DIR=str(out),
        WANDB_MODE="disabled",
    )
    result = run_script(
        SBATCH["1node"],
        ["+exp=train/esc_role", *FAST_TRAIN, "trainer.max_steps=3"],
        env,
        REPO_ROOT,
        timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "SLURM auto-requeueing enabled" in result.stdout + result.stderr  # Lightning saw SLURM
    assert (out / "adapter_model.safetensors").exists() and (out / "last.ckpt").exists()
