"""The evaluation engine: turn-synchronous batches, flipped views, resume, failures, shards, formats."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tests.scripted_backend  # noqa: F401  (registers backend kind "scripted")
from esc.config_schema import validate
from esc.dialogues.store import read_dialogues
from esc.errors import UserError
from esc.evaluate.run import evaluate
from tests.helpers import REPO_ROOT, evaluate_config, requires_data, run_entry, run_job
from tests.scripted_backend import ScriptedBackend

pytestmark = requires_data
VOLATILE = {"latency_s", "cached"}


def scripted_cfg(out: Path, *overrides: str, rp: dict | None = None, target: dict | None = None):
    return evaluate_config(
        out,
        *overrides,
        roleplayer_backend={"kind": "scripted", "label": "seeker", **(rp or {})},
        target_backend={"kind": "scripted", "label": "helper", **(target or {})},
    )


def stable(path: Path) -> list[dict]:
    """Dialogues without the fields that differ between runs (timings, cache hits)."""
    rows = []
    for dialogue in read_dialogues(path):
        row = dialogue.to_dict()
        row["turns"] = [{k: v for k, v in t.items() if k not in VOLATILE} for t in row["turns"]]
        rows.append(row)
    return rows


def test_dialogues_advance_in_turn_synchronous_batches_with_flipped_views(tmp_path: Path) -> None:
    ScriptedBackend.instances.clear()
    result = run_job("evaluate", scripted_cfg(tmp_path, "dialogue.turns=5"))
    assert result.counts == {"selected": 6, "skipped": 0, "completed": 6, "failed": 0}
    seeker, helper = ScriptedBackend.instances[-2:]
    assert [len(batch) for batch in seeker.calls] == [6] * 5  # one batch per turn, all dialogues in it
    assert [len(batch) for batch in helper.calls] == [6] * 5

    first_rp = seeker.calls[0][0]
    assert [m["role"] for m in first_rp] == ["system", "user"]  # role card prompt, then the opener
    last_rp = seeker.calls[-1][0]
    assert [m["role"] for m in last_rp[2:]] == ["assistant", "user"] * 4  # it is the assistant
    last_target = helper.calls[-1][0]
    assert last_target[0] == {"role": "system", "content": "You are a helpful assistant!"}
    assert [m["role"] for m in last_target[1:]] == ["user", "assistant"] * 4 + ["user"]
    assert first_rp[1]["content"] not in [
        m["content"] for m in last_target
    ]  # the target never sees the opener

    for language in ("en", "zh"):
        dialogues = list(read_dialogues(tmp_path / "dialogues" / f"tiny__tiny__{language}.jsonl"))
        assert len(dialogues) == 3 and all(d.status == "complete" for d in dialogues)
        assert all([t.speaker for t in d.turns] == ["roleplayer", "target"] * 5 for d in dialogues)
        assert dialogues[0].meta["prompt"]["version"] >= 1
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["usage"]["roleplayer"]["requests"] == 30 and manifest["counts"]["completed"] == 6


def test_progress_counts_messages_as_they_come_and_ends_at_the_total(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 37: the dialogue bar moved only when a whole dialogue ended (27 minutes at 0/2 under
    load) and drew nothing readable in a log file. Off a terminal it is plain lines; the count is of
    messages (each side's reply, every turn), with dialogues, failures and tokens/s beside it."""
    from esc.cards import load_cards

    caplog.set_level(logging.INFO, logger="esc.progress")
    card = load_cards(language="en", limit=3)[1]
    cfg = scripted_cfg(
        tmp_path, "engine.progress=true", "dialogue.turns=2", rp={"fail_on": card.problem[:40]}
    )
    evaluate(cfg, validate(cfg, "evaluate"))
    lines = [r.getMessage() for r in caplog.records if r.name == "esc.progress"]
    assert lines[0] == "tiny × tiny: 0/24 messages"  # 6 dialogues x 2 exchanges x 2 sides
    assert lines[-1].startswith("tiny × tiny: 24/24 messages (100%)")  # the failed one's count too
    assert "dialogues=6/6" in lines[-1] and "failed=1" in lines[-1] and "tok_s=" in lines[-1]


def test_a_plain_progress_line_says_what_it_counts_and_the_time_left() -> None:
    from esc.progress import Progress, duration

    with Progress(40, "message", "a × b", tty=False, every_s=3600) as bar:
        bar._start -= 10  # 10 s in
        bar.update(10, failed=0)
        line = bar.line()
    assert line.startswith("a × b: 10/40 messages (25%), 1 messages/s, about 30 s left, 10 s so far")
    assert line.endswith("failed=0")
    assert [duration(s) for s in (42, 185, 4320)] == ["42 s", "3 min 5 s", "1 h 12 min"]


def test_rerun_writes_nothing_new(tmp_path: Path) -> None:
    run_job("evaluate", scripted_cfg(tmp_path))
    files = {p: p.read_bytes() for p in (tmp_path / "dialogues").glob("*")}
    ScriptedBackend.instances.clear()
    result = run_job("evaluate", scripted_cfg(tmp_path))
    assert result.counts["skipped"] == 6 and result.counts["completed"] == 0
    assert all(not backend.calls for backend in ScriptedBackend.instances)
    assert {p: p.read_bytes() for p in (tmp_path / "dialogues").glob("*")} == files


def test_failed_dialogue_is_recorded_and_only_it_is_retried(tmp_path: Path) -> None:
    from esc.cards import load_cards

    card = load_cards(language="en", limit=3)[1]
    marker = card.problem[:40]
    result = run_job("evaluate", scripted_cfg(tmp_path, "cards.languages=[en]", rp={"fail_on": marker}))
    assert result.counts["failed"] == 1 and result.counts["completed"] == 2
    failed = list(read_dialogues(tmp_path / "dialogues" / "tiny__tiny__en.failed.jsonl"))
    assert [d.card_id for d in failed] == [card.id] and "planned failure" in failed[0].error

    ScriptedBackend.instances.clear()
    result = run_job("evaluate", scripted_cfg(tmp_path, "cards.languages=[en]"))
    assert result.counts == {"selected": 3, "skipped": 2, "completed": 1, "failed": 0}
    assert [len(b) for b in ScriptedBackend.instances[-2].calls] == [1] * 5
    assert not (tmp_path / "dialogues" / "tiny__tiny__en.failed.jsonl").exists()
    assert len(list(read_dialogues(tmp_path / "dialogues" / "tiny__tiny__en.jsonl"))) == 3


def test_a_reply_without_text_fails_its_dialogue_and_is_never_a_turn(tmp_path: Path) -> None:
    """Issue 36 (5): a blank reply that the backend called a success was a turn; the dialogue was
    'complete' and a judge scored it."""
    from esc.cards import load_cards

    card = load_cards(language="en", limit=3)[1]
    # the role-player reads the card, so its reply is the blank one (the target's would fail the same way)
    result = run_job(
        "evaluate", scripted_cfg(tmp_path, "cards.languages=[en]", rp={"empty_on": card.problem[:40]})
    )
    assert result.counts["failed"] == 1 and result.counts["completed"] == 2
    assert result.incomplete()  # exit code 3: a rerun plays it again
    [failed] = read_dialogues(tmp_path / "dialogues" / "tiny__tiny__en.failed.jsonl")
    assert failed.card_id == card.id and failed.error == "roleplayer tiny: empty reply (finish_reason stop)"
    complete = list(read_dialogues(tmp_path / "dialogues" / "tiny__tiny__en.jsonl"))
    assert card.id not in [d.card_id for d in complete]
    assert all(t.text.strip() for d in complete for t in d.turns)


def test_context_overflow_drops_oldest_exchanges(tmp_path: Path) -> None:
    ScriptedBackend.instances.clear()
    args = ["cards.languages=[en]", "cards.limit=1", "roleplayer.generation.max_new_tokens=8"]
    run_job("evaluate", scripted_cfg(tmp_path / "probe", *args))
    head = ScriptedBackend.instances[-2].count_tokens(ScriptedBackend.instances[-2].calls[0][0])
    window = head + 8 + 12  # room for the system prompt, the opener and two short exchanges

    ScriptedBackend.instances.clear()
    run_job("evaluate", scripted_cfg(tmp_path / "run", *args, rp={"context_window": window}))
    seeker = ScriptedBackend.instances[-2]
    assert all(seeker.count_tokens(batch[0]) + 8 <= window for batch in seeker.calls)
    dialogue = next(read_dialogues(tmp_path / "run" / "dialogues" / "tiny__tiny__en.jsonl"))
    assert len(dialogue.turns) == 10 and dialogue.status == "complete"
    assert [t.context_dropped > 0 for t in dialogue.turns if t.speaker == "roleplayer"][-1]
    last = seeker.calls[-1][0]
    assert [m["role"] for m in last[:3]] == ["system", "user", "assistant"]  # card prompt and opener stay


def test_shards_merge_into_the_unsharded_run(tmp_path: Path) -> None:
    from esc.dialogues.merge import merge_runs

    run_job("evaluate", scripted_cfg(tmp_path / "whole", "cards.limit=5"))
    for index in range(3):
        run_job(
            "evaluate",
            scripted_cfg(
                tmp_path / f"shard{index}", "cards.limit=5", f"shard.index={index}", "shard.count=3"
            ),
        )
    report = merge_runs([tmp_path / f"shard{i}" for i in range(3)], tmp_path / "merged")
    for name in ("tiny__tiny__en.jsonl", "tiny__tiny__zh.jsonl"):
        assert stable(tmp_path / "merged" / "dialogues" / name) == stable(
            tmp_path / "whole" / "dialogues" / name
        )
        assert report["files"][name] == {"dialogues": 5, "missing": [], "duplicated": []}

    shutil.copytree(tmp_path / "shard1", tmp_path / "shard1-again")  # overlapping shards (the same folder
    partial = merge_runs(  # named twice is refused: test_bad_inputs.py, merge-same-folder-twice)
        [tmp_path / "shard0", tmp_path / "shard1", tmp_path / "shard1-again"], tmp_path / "partial"
    )
    assert partial["missing_shards"] == [2]
    info = partial["files"]["tiny__tiny__en.jsonl"]
    assert len(info["missing"]) == 1 and len(info["duplicated"]) == 2

    for i in range(3):  # shards run before `cards.subset` existed (issue 22) merge the same
        manifest = tmp_path / f"shard{i}" / "manifest.json"
        data = json.loads(manifest.read_text())
        del data["config"]["cards"]["subset"]
        manifest.write_text(json.dumps(data))
    older = merge_runs([tmp_path / f"shard{i}" for i in range(3)], tmp_path / "older")
    assert older["files"] == report["files"]


def test_unknown_card_ids_are_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"unknown card ids \[99999999\]"):
        run_job("evaluate", scripted_cfg(tmp_path, "cards.ids=[32025,99999999]"))


def test_official_format_round_trip(tmp_path: Path) -> None:
    from esc.paths import data_dir

    cards = data_dir() / "esc_eval" / "test_en.json"
    official = data_dir() / "esc_eval" / "example_dialogues" / "llama3_en.json"
    cli = [sys.executable, "-m", "esc", "dialogues"]
    run = subprocess.run(
        [
            *cli,
            "import",
            str(official),
            "--language",
            "en",
            "--target",
            "llama3",
            "--out",
            str(tmp_path / "run"),
            "--cards",
            str(cards),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    run = subprocess.run(
        [*cli, "export", str(tmp_path / "run"), "--out", str(tmp_path / "result"), "--cards", str(cards)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "result" / "llama3__esc_role_en.json").read_text()) == json.loads(
        official.read_text()
    )


def test_malformed_official_file_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"0": ["AI assistant：hi", "Someone：hello"]}))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "esc",
            "dialogues",
            "import",
            str(bad),
            "--language",
            "en",
            "--target",
            "x",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.count("\n") == 1 and "bad.json [record 0, line 1]" in run.stderr


def test_tiny_models_write_complete_dialogues_and_a_manifest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["roleplayer=tiny", "target=tiny", "cards.limit=8", f"hydra.run.dir={out}", "cache.enabled=false"]
    result = run_entry("evaluate.py", args)
    assert result.returncode == 0, result.stderr[-3000:]
    for language in ("en", "zh"):
        dialogues = list(read_dialogues(out / "dialogues" / f"tiny__tiny__{language}.jsonl"))
        assert len(dialogues) == 8 and all(len(d.turns) == 10 for d in dialogues)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["git"]["commit"]
    assert manifest["models"]["target"]["kind"] == "hf"


@pytest.mark.parametrize("seeker", ["cooperative", "resistant"])  # a hard profile resumes the same way
def test_sigkill_mid_run_then_rerun_equals_an_uninterrupted_run(tmp_path: Path, seeker: str) -> None:
    common = [
        "roleplayer=tiny",
        "target=tiny",
        f"seeker={seeker}",
        "cards.limit=6",
        "cards.languages=[en]",
        "engine.wave_size=2",
        "engine.progress=false",
        "cache.enabled=false",
    ]
    whole = run_entry("evaluate.py", [*common, f"hydra.run.dir={tmp_path / 'whole'}"])
    assert whole.returncode == 0, whole.stderr[-3000:]

    out = tmp_path / "killed"
    path = out / "dialogues" / "tiny__tiny__en.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "evaluate.py", *common, f"hydra.run.dir={out}"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_bytes().count(b"\n") >= 2:  # bytes: a line may be half-written
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = path.read_bytes().count(b"\n")
    assert 2 <= written < 6, f"kill came at the wrong moment ({written} dialogues written)"
    again = run_entry("evaluate.py", [*common, f"hydra.run.dir={out}"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert stable(path) == stable(tmp_path / "whole" / "dialogues" / "tiny__tiny__en.jsonl")
    named = {(d.seeker or {}).get("name", "cooperative") for d in read_dialogues(path)}
    assert named == {seeker}


def test_missing_api_key_is_reported_before_any_work(tmp_path: Path) -> None:
    env_key = "ESC_TEST_MISSING_KEY"
    out = tmp_path / "out"
    result = run_entry(
        "evaluate.py",
        [
            "roleplayer=gpt4_zero_shot",
            "target=tiny",
            "cards.limit=1",
            f"roleplayer.backend.api_key_env={env_key}",
            f"hydra.run.dir={out}",
        ],
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert env_key in result.stderr
    assert not (out / "dialogues").exists()


def test_openai_target_through_a_flaky_server_matches_the_local_model(tmp_path: Path) -> None:
    """ESC-Role-style run whose target is served over the OpenAI API, with 429/500s and one hard failure."""
    from tests.fake_openai_server import FakeOpenAIServer

    def cfg_for(out: Path, target_backend: dict | None):
        return evaluate_config(out, "cards.languages=[en]", target_backend=target_backend)

    run_job("evaluate", cfg_for(tmp_path / "local", None))
    with FakeOpenAIServer() as server:
        api = {
            "kind": "openai",
            "model": "tiny",
            "base_url": server.url,
            "api_key_env": None,
            "max_retries": 1,
            "timeout_s": 30,
        }
        server.inject(["429", "500"])  # transient: the SDK retries them
        first = next(read_dialogues(tmp_path / "local" / "dialogues" / "tiny__tiny__en.jsonl"))
        server.inject(["500", "500"], match=first.turns[0].text)  # this dialogue fails after retries
        result = run_job("evaluate", cfg_for(tmp_path / "api", api))
        assert result.counts["failed"] == 1 and result.counts["completed"] == 2
        failed = next(read_dialogues(tmp_path / "api" / "dialogues" / "tiny__tiny__en.failed.jsonl"))
        assert failed.card_id == first.card_id and "500" in failed.error
        result = run_job("evaluate", cfg_for(tmp_path / "api", api))  # the rerun retries only the failure
        assert result.counts == {"selected": 3, "skipped": 2, "completed": 1, "failed": 0}
    local = {d["card_id"]: d for d in stable(tmp_path / "local" / "dialogues" / "tiny__tiny__en.jsonl")}
    served = {d["card_id"]: d for d in stable(tmp_path / "api" / "dialogues" / "tiny__tiny__en.jsonl")}
    assert local.keys() == served.keys()
    for card_id in local:
        assert [t["text"] for t in served[card_id]["turns"]] == [t["text"] for t in local[card_id]["turns"]]


def test_esc_role_local_plays_with_the_adapter_train_py_wrote(
    esc_role_run: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """train.py +exp=train/esc_role (tiny) → its adapter drives the role-player of evaluate.py."""
    from omegaconf import OmegaConf

    from tests.helpers import compose

    trained, _ = esc_role_run
    local = compose(["roleplayer=esc_role_local"], output_dir=tmp_path, config_name="evaluate").roleplayer
    backend = OmegaConf.to_container(local.backend, resolve=False)
    backend.update(
        model=OmegaConf.to_container(compose(["model=tiny"]).model, resolve=True), adapter=str(trained)
    )
    cfg = evaluate_config(
        tmp_path / "eval",
        "roleplayer=esc_role_local",
        "cards.limit=2",
        f"roleplayer.backend.adapter={trained}",
        "roleplayer.generation.max_new_tokens=32",  # the tiny model never ends a turn: as tiny's
        roleplayer_backend=backend,
    )
    assert evaluate(cfg, validate(cfg, "evaluate")).counts["completed"] == 4
    manifest = json.loads((tmp_path / "eval" / "manifest.json").read_text())
    assert manifest["models"]["roleplayer"]["adapter"] == str(trained)
    assert manifest["models"]["roleplayer"]["adapter_sha256"]
    dialogue = next(read_dialogues(tmp_path / "eval" / "dialogues" / "tiny__esc_role_local__en.jsonl"))
    assert dialogue.meta["prompt"]["id"] == "esc_role_figure11"


def test_api_sides_stream_each_dialogue_and_write_it_when_it_ends(tmp_path: Path) -> None:
    """With every side an API (max_concurrency), a slow dialogue holds up no other: each is played
    on its own, one request at a time, and written as it ends; the texts equal a turn-synchronous run."""
    waves = scripted_cfg(tmp_path / "waves", "cards.languages=[en]", "engine.mode=waves")
    evaluate(waves, validate(waves, "evaluate"))
    first = next(read_dialogues(tmp_path / "waves" / "dialogues" / "tiny__tiny__en.jsonl"))
    slow_card = first.system_prompt.split("Problem: ")[1][:40]  # only this dialogue's role-player sees it
    api = {"max_concurrency": 3, "slow_on": slow_card, "slow_s": 0.5}
    cfg = scripted_cfg(tmp_path / "stream", "cards.languages=[en]", rp=api, target={"max_concurrency": 3})
    ScriptedBackend.instances.clear()
    result = evaluate(cfg, validate(cfg, "evaluate"))
    assert result.counts["completed"] == 3 and result.counts["failed"] == 0
    written = list(read_dialogues(tmp_path / "stream" / "dialogues" / "tiny__tiny__en.jsonl"))
    assert written[-1].card_id == first.card_id  # played first, slowest, written last
    roleplayer, target = ScriptedBackend.instances[-2:]
    assert {len(call) for call in roleplayer.calls + target.calls} == {1}  # one conversation a request
    by_card = {d["card_id"]: d for d in stable(tmp_path / "waves" / "dialogues" / "tiny__tiny__en.jsonl")}
    for dialogue in stable(tmp_path / "stream" / "dialogues" / "tiny__tiny__en.jsonl"):
        assert dialogue["turns"] == by_card[dialogue["card_id"]]["turns"]


def test_streaming_records_failures_and_the_rerun_retries_them(tmp_path: Path) -> None:
    api = {"max_concurrency": 2}
    cfg = scripted_cfg(
        tmp_path, "cards.languages=[en]", rp=api, target={**api, "fail_on": "seeker #2"}
    )  # every target request at turn 1 sees "seeker #2": all fail
    result = evaluate(cfg, validate(cfg, "evaluate"))
    assert result.counts == {"selected": 3, "skipped": 0, "completed": 0, "failed": 3}
    cfg = scripted_cfg(tmp_path, "cards.languages=[en]", rp=api, target=api)
    assert evaluate(cfg, validate(cfg, "evaluate")).counts == {
        "selected": 3,
        "skipped": 0,
        "completed": 3,
        "failed": 0,
    }
