"""One output folder, one run at a time, one set of settings (esc.rundir), and sweeps that need -m."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from esc.dialogues.merge import merge_runs
from esc.errors import UserError
from esc.rundir import LOCK_FILE, NOT_SET, OWNER_FILE, SETTINGS_FILE, RunFolder, first_difference
from tests.helpers import requires_data, run_entry, run_job

SETTINGS = {
    "target": {"name": "a", "generation": {"max_new_tokens": 8, "stop": []}},
    "dialogue": {"turns": 5},
}


def test_first_difference_follows_the_recorded_order() -> None:
    new = {"target": {"name": "a", "generation": {"max_new_tokens": 9, "stop": []}}, "dialogue": {"turns": 3}}
    assert first_difference(SETTINGS, new) == ("target.generation.max_new_tokens", 8, 9)
    assert first_difference(SETTINGS, SETTINGS) is None
    assert first_difference(SETTINGS, {**SETTINGS, "extra": 1}) == ("extra", NOT_SET, 1)


API = {"name": "bot", "model": {"kind": "openai", "base_url": "http://a/v1", "extra_body": None}}


def test_a_leaf_recorded_where_this_run_has_a_mapping_shows_the_mapping(tmp_path: Path) -> None:
    """Issue 62: `extra_body: null` recorded and `{top_k: 1}` now was "this run has <absent>"."""
    now = {"name": "bot", "model": {**API["model"], "extra_body": {"top_k": 1}}}
    assert first_difference(API, now) == ("model.extra_body", None, {"top_k": 1})
    assert first_difference(now, API) == ("model.extra_body", {"top_k": 1}, None)
    with RunFolder(tmp_path, "evaluate", {"target": API}):
        pass
    with pytest.raises(UserError) as err:
        with RunFolder(tmp_path, "evaluate", {"target": now}):
            pass
    expected = 'target.model.extra_body=null, this run has target.model.extra_body={"top_k": 1}:'
    assert expected in str(err.value)
    assert "<absent>" not in str(err.value)


def test_a_setting_names_the_config_key_the_user_sets(tmp_path: Path) -> None:
    """Issue 62: the fingerprint keeps a side's backend identity under `model`; the error names
    `target.backend.base_url`, what the user changes (and where settings.json has it)."""
    keys = {  # what evaluate.py passes (`esc.evaluate.run`), the longest prefix first
        "target.model": "target.backend",
        "target.model.name_or_path": "target.backend.model.name_or_path",
    }
    with RunFolder(tmp_path, "evaluate", {"target": API}, config_keys=keys):
        pass
    moved = {"target": {**API, "model": {**API["model"], "base_url": "http://b/v1"}}}
    with pytest.raises(UserError) as err:
        with RunFolder(tmp_path, "evaluate", moved, config_keys=keys):
            pass
    assert str(err.value).startswith(
        f'{tmp_path} was written with target.backend.base_url="http://a/v1", this run has '
        'target.backend.base_url="http://b/v1" (settings.json: target.model.base_url): start a new folder'
    ), str(err.value)

    def hf(name: str) -> dict:
        return {"target": {**API, "model": {"kind": "hf", "name_or_path": name}}}

    with pytest.raises(UserError, match=r"target\.backend\.kind=\"openai\""):  # the first difference
        with RunFolder(tmp_path, "evaluate", hf("a"), config_keys=keys):
            pass
    with RunFolder(tmp_path / "hf", "evaluate", hf("a"), config_keys=keys):
        pass
    with pytest.raises(UserError, match=r'target\.backend\.model\.name_or_path="a", this run has'):
        with RunFolder(tmp_path / "hf", "evaluate", hf("b"), config_keys=keys):
            pass
    assert json.loads((tmp_path / SETTINGS_FILE).read_text()) == {"evaluate": {"target": API}}


def test_evaluate_names_the_backend_key_the_user_changed(tmp_path: Path) -> None:
    """Issue 62: a target moved to another server was refused naming `target.model.base_url`, a key
    no config has; the user sets `target.backend.base_url`."""
    import tests.scripted_backend  # noqa: F401  (registers backend kind "scripted")
    from esc.chat.build import backend_settings, build_backend
    from tests.fake_openai_server import FakeOpenAIServer
    from tests.helpers import evaluate_config

    card = {"base": "Age: 30\nGender: Female\nOccupation: Teacher\nProblem: money.", "res": "家庭生活",
            "source": "ESconv", "language": "english"}  # fmt: skip
    cards = tmp_path / "cards.json"
    cards.write_text(json.dumps([{**card, "id": 32999}], ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "out"

    def config(server: FakeOpenAIServer):
        target = {"kind": "openai", "model": "tiny", "base_url": server.url, "api_key_env": None}
        return evaluate_config(
            out, f"cards.paths=[{cards}]", "cards.languages=[en]", "dialogue.turns=1",
            roleplayer_backend={"kind": "scripted"}, target_backend=target,
        )  # fmt: skip

    with (
        FakeOpenAIServer(build_backend(backend_settings({"kind": "scripted"}))) as first,
        FakeOpenAIServer(build_backend(backend_settings({"kind": "scripted"}))) as second,
    ):
        run_job("evaluate", config(first))
        with pytest.raises(UserError) as err:
            run_job("evaluate", config(second))
    assert str(err.value).startswith(
        f'{out} was written with target.backend.base_url="{first.url}", this run has '
        f'target.backend.base_url="{second.url}" (settings.json: target.model.base_url): '
    ), str(err.value)


def test_a_start_refused_in_the_block_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    """Issue 62: a start refused after the folder was accepted (rank.py's max_cost, checked once the
    mode has planned its score files) left `.lock` and an empty `scores/` behind."""

    def refused(folder: Path) -> None:
        with pytest.raises(UserError, match="refused"):
            with RunFolder(folder, "rank.score", SETTINGS):
                (folder / "scores" / "deeper").mkdir(parents=True)
                (folder / "scores" / "empty.jsonl").touch()
                raise UserError("refused")

    refused(tmp_path / "new" / "out")
    assert not (tmp_path / "new").exists()  # the folders it made are gone again
    mine = tmp_path / "mine"
    (mine / "old").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    refused(mine)
    assert sorted(str(p.relative_to(mine)) for p in mine.rglob("*")) == ["notes.txt", "old"]
    with RunFolder(mine, "rank.score", SETTINGS):  # the refused start pinned nothing
        (mine / "scores").mkdir()
        (mine / "scores" / "a.jsonl").write_text("{}\n")
    before = sorted(str(p.relative_to(mine)) for p in mine.rglob("*"))
    assert LOCK_FILE in before and "scores/a.jsonl" in before
    refused(mine)
    assert sorted(str(p.relative_to(mine)) for p in mine.rglob("*")) == before  # its lock stays too


def test_a_folder_keeps_one_set_of_settings_per_kind(tmp_path: Path) -> None:
    with RunFolder(tmp_path, "evaluate", SETTINGS):
        pass
    with RunFolder(tmp_path, "evaluate", json.loads(json.dumps(SETTINGS))):  # the same: resumes
        pass
    changed = {**SETTINGS, "dialogue": {"turns": 3}}
    with pytest.raises(
        UserError, match=r"dialogue\.turns=5, this run has dialogue\.turns=3.*hydra\.run\.dir"
    ):
        with RunFolder(tmp_path, "evaluate", changed):
            pass
    with RunFolder(tmp_path, "rank.score", {"judge": "x"}):  # another kind of job: its own entry
        pass
    recorded = json.loads((tmp_path / SETTINGS_FILE).read_text())
    assert recorded == {"evaluate": SETTINGS, "rank.score": {"judge": "x"}}
    assert not (tmp_path / OWNER_FILE).exists()  # released


def test_a_setting_left_out_on_resume_is_a_difference_too(tmp_path: Path) -> None:
    """Issue 36: a folder written with `trajectory.enabled=true` resumed with it off (exit 0, an unrated
    dialogue added to rated ones); a changed rater was refused, a dropped one was not."""
    rated = {**SETTINGS, "trajectory": {"rater": "roleplayer", "method": "distribution"}}
    with RunFolder(tmp_path, "evaluate", rated):
        pass
    dropped = (  # the whole entry the run leaves out (issue 62: was `trajectory.rater="<absent>"`)
        r'written with trajectory=\{"rater": "roleplayer", "method": "distribution"\}, this run has '
        "trajectory not set:"
    )
    with pytest.raises(UserError, match=dropped):
        with RunFolder(tmp_path, "evaluate", SETTINGS):
            pass
    with RunFolder(tmp_path, "evaluate", rated) as folder:  # the same settings resume; the second phase
        folder.check_resolved({"model": "x"})  # (`resolved`) is recorded later and not a difference
    with RunFolder(tmp_path, "evaluate", rated):
        pass


def test_a_second_process_is_refused_and_a_killed_one_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from esc.rundir import RunFolder\n"
            "with RunFolder(sys.argv[1], 'evaluate', None):\n"
            "    print('locked', flush=True); time.sleep(120)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(UserError, match=rf"in use by another run \(evaluate: pid {holder.pid} on "):
            with RunFolder(tmp_path, "evaluate", None):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (tmp_path / LOCK_FILE).exists()  # the file stays; the OS lock died with its process
    with RunFolder(tmp_path, "evaluate", None):
        pass


def _shard(folder: Path, settings: dict) -> Path:
    (folder / "dialogues").mkdir(parents=True)
    (folder / "manifest.json").write_text(
        json.dumps({"config": {"cards": {"languages": ["en"], "limit": 1}}})
    )
    (folder / SETTINGS_FILE).write_text(json.dumps({"evaluate": settings}))
    return folder


def test_merge_refuses_shards_run_with_different_settings(tmp_path: Path) -> None:
    a = _shard(tmp_path / "a", SETTINGS)
    b = _shard(tmp_path / "b", {**SETTINGS, "dialogue": {"turns": 4}})
    with pytest.raises(
        UserError, match=r"dialogue\.turns=5, this run has dialogue\.turns=4.*merge only shards"
    ):
        merge_runs([a, b], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


EVAL = ["roleplayer=tiny", "target=tiny", "cards.languages=[en]", "dialogue.turns=1", "cache.enabled=false"]


@requires_data
def test_concurrent_and_changed_reruns_are_refused_and_lose_nothing(tmp_path: Path) -> None:
    """Two runs on one folder: one refused, the other's output intact; then a rerun with other
    settings is refused with the first difference named, and the dialogue file is unchanged."""
    out = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, "evaluate.py", *EVAL, "cards.limit=3", f"hydra.run.dir={out}"],
        cwd=Path(__file__).parents[1],
        env={**os.environ, "WANDB_MODE": "disabled"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not (out / OWNER_FILE).exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    first.send_signal(signal.SIGSTOP)  # paused while it holds the folder: the second finds it in use
    try:
        second = run_entry("evaluate.py", [*EVAL, "cards.limit=3", f"hydra.run.dir={out}"])
    finally:
        first.send_signal(signal.SIGCONT)
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err[-2000:]
    assert second.returncode == 2, second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    assert (
        f"{out} is in use by another run (evaluate: pid {first.pid}" in second.stderr.strip().splitlines()[-1]
    )

    dialogues = out / "dialogues" / "tiny__tiny__en.jsonl"
    lines = dialogues.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["status"] == "complete" for line in lines)
    before = dialogues.read_bytes()
    changed = run_entry(
        "evaluate.py", [*EVAL[:-2], "dialogue.turns=2", "cards.limit=3", f"hydra.run.dir={out}"]
    )
    assert changed.returncode == 2
    assert changed.stderr.strip().splitlines()[-1] == (
        f"error: {out} was written with dialogue.turns=1, this run has dialogue.turns=2: start a new "
        "folder (hydra.run.dir=NEW_DIR), or rerun with the folder's settings to resume"
    )
    assert dialogues.read_bytes() == before
    assert json.loads((out / SETTINGS_FILE).read_text())["evaluate"]["dialogue"]["turns"] == 1


def test_a_sweep_experiment_needs_multirun(tmp_path: Path) -> None:
    result = run_entry("evaluate.py", ["+exp=evaluate/table2_en", f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: config `hydra.sweeper.params.target`: this experiment sweeps target over")
    assert "add -m" in last and "Traceback" not in result.stderr
    assert not (tmp_path / "dialogues").exists()


@requires_data
def test_a_run_that_leaves_failures_exits_3_and_a_rerun_completes_it(tmp_path: Path) -> None:
    from tests.fake_openai_server import FakeOpenAIServer

    out = tmp_path / "run"
    with FakeOpenAIServer() as server:
        args = [
            "roleplayer=tiny", "target=gpt4", f"target.backend.base_url={server.url}",
            "target.backend.model=tiny", "target.backend.price=null", "target.backend.api_key_env=null",
            "target.backend.max_retries=0",
            "cards.languages=[en]", "cards.limit=2", "dialogue.turns=1", "cache.enabled=false",
            f"hydra.run.dir={out}",
        ]  # fmt: skip
        server.inject(["500"] * 2)  # every target request of this run fails
        failed = run_entry("evaluate.py", args)
        assert failed.returncode == 3, failed.stderr[-2000:]
        assert "0 dialogues completed, 2 failed" in failed.stdout
        assert failed.stderr.strip().splitlines()[-1] == (
            f"error: 2 of 2 dialogues failed (reasons in {out}/dialogues/*.failed.jsonl); rerun the same "
            "command to retry them"
        )
        assert json.loads((out / "manifest.json").read_text())["status"] == "completed_with_failures"
        rerun = run_entry("evaluate.py", args)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "2 dialogues completed, 0 failed" in rerun.stdout


@requires_data
def test_export_refuses_a_folder_whose_dialogues_disagree_with_its_settings(tmp_path: Path) -> None:
    """A folder mixed by an older version (dialogues of 1 and 2 turns): export names the card."""
    from esc.cli import main as esc_main

    run = tmp_path / "run"
    assert run_entry("evaluate.py", [*EVAL, "cards.limit=1", f"hydra.run.dir={run}"]).returncode == 0
    assert (
        esc_main(["dialogues", "export", "--format", "official", str(run), "--out", str(tmp_path / "ok")])
        == 0
    )
    assert (tmp_path / "ok" / "tiny__tiny_en.json").is_file()
    path = run / "dialogues" / "tiny__tiny__en.jsonl"
    record = json.loads(path.read_text())
    record["meta"]["turns"] = 2
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        esc_main(["dialogues", "export", "--format", "official", str(run), "--out", str(tmp_path / "mixed")])
    assert exit_info.value.code == 2
    assert not (tmp_path / "mixed").exists()
