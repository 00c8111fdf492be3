"""Batch judging (`judge.batch=true`, `esc/chat/batch/`) on the fake server's OpenAI Batch API and
Anthropic Message Batches: the same judgments as per-request judging; expired, failed and partly
failed batches give failed judgments, never scores, and a rerun submits only those again; a run
killed between submit and download polls the same batch when run again; the batch price is what
the estimate and `max_cost` use. Issue 62: a batch the provider does not know, a server unreachable
while polling and a malformed result line are warnings and failed judgments, never a traceback;
two runs on one ledger are refused; the offline recipe of docs/scoring.md runs as written."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply
from esc.dialogues.record import Dialogue, Turn
from esc.errors import ConfigError, UserError
from esc.scoring.judge import FAILED, INVALID, VALID, ScoreItem
from esc.scoring.judges import build_judge, judge_settings
from esc.scoring.judging import estimate_items, judge_items
from esc.scoring.store import ScoreStore
from tests.fake_openai_server import FakeOpenAIServer
from tests.helpers import REPO_ROOT, kill_entry_when, run_entry

KEY = "sk-batch-test-0123456789"
ENV = "ESC_TEST_BATCH_KEY"
DIMS = ("empathy", "fluency", "humanoid")
NAME = "bot__seeker__en__gpt4.jsonl"  # rank.py's score file of the dialogues below


class ScriptedJudge(ChatBackend):
    """Answers a judge prompt with a score fixed by the dialogue's text (one in seven: "2 or 3",
    which strict parsing calls invalid), as a deterministic model would."""

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        replies = []
        for messages in batch:
            h = int(hashlib.sha256(messages[-1]["content"].encode()).hexdigest(), 16)
            text = "I'd say 2 or 3" if h % 7 == 0 else f"Score: {h % 5}"
            replies.append(Reply(text=text, finish_reason="stop", prompt_tokens=50, completion_tokens=3))
        return replies

    def identity(self) -> dict[str, Any]:
        return {"kind": "scripted"}


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(ScriptedJudge(), api_key=KEY, served_models=["tiny", "gpt-4-0613"]) as srv:
        yield srv


@pytest.fixture(autouse=True)
def key(monkeypatch, server):
    monkeypatch.setenv(ENV, KEY)
    server.reset()
    server.batch_polls_to_end, server.batch_outcome = 1, "completed"


def _items(n: int = 6) -> list[ScoreItem]:
    items = []
    for d in range(n):
        lines = (("user", f"I lost my job, day {d}."), ("assistant", f"That sounds hard ({d})."))
        items += [ScoreItem(f"f/{d}", dim, "en", lines) for dim in DIMS]
    return items


def _judge(server: FakeOpenAIServer, provider: str, folder: Path | None = None, **extra: Any):
    backend = (
        {"kind": "openai", "model": "tiny", "base_url": server.url}
        if provider == "openai"
        else {"kind": "anthropic", "model": "tiny", "base_url": server.root}
    )
    node = {
        "kind": "api",
        "name": f"{provider}_judge",
        "prompt": "paper",
        "backend": {**backend, "api_key_env": ENV, "max_retries": 0, **extra.pop("backend", {})},
        "top_logprobs": 0,
        **({"batch": True, "batch_folder": str(folder), "batch_poll_s": 0.02} if folder else {}),
        **extra,
    }
    judge = build_judge(judge_settings(node))
    judge.check_ready()
    return judge


def _records(path: Path) -> dict[tuple[str, str], tuple[str, int | None, str | None]]:
    return {
        (r.dialogue_id, r.dimension): (r.status, r.score, r.raw) for r in ScoreStore(path).records.values()
    }


def _judged(judge, items, path: Path):
    try:
        judge_items(judge, items, ScoreStore(path), chunk=5, progress=False)
    finally:
        judge.close()
    return _records(path)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_judges_as_single_requests_do(server, tmp_path, provider):
    items = _items()
    single = _judged(_judge(server, provider), items, tmp_path / "single.jsonl")
    sent = server.requests
    batched = _judged(_judge(server, provider, tmp_path / "batches"), items, tmp_path / "batch.jsonl")
    assert batched == single
    statuses = {status for status, _, _ in single.values()}
    assert statuses == {VALID, INVALID}  # both kinds went through the same strict parsing
    assert server.requests == sent  # no single request: every judgment came from the batch
    assert len(server.batches.created) == 1  # all chunks submitted at once, as one batch
    assert len(server.batches.created[0].lines) == len(items)
    ledger_file = tmp_path / "batches" / f"{provider}_judge" / "batches.jsonl"  # one ledger per judge
    ledger = [json.loads(x) for x in ledger_file.read_text().splitlines()]
    assert [e["event"] for e in ledger] == ["submitting", "submitted", "ended"]
    assert ledger[1]["batch_id"] == server.batches.created[0].id


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("outcome", ["expired", "failed", "partial"])
def test_bad_batches_are_failed_judgments_and_a_rerun_submits_only_those(server, tmp_path, provider, outcome):
    items = _items()
    single = _judged(_judge(server, provider), items, tmp_path / "single.jsonl")
    server.reset()
    if outcome == "partial":
        server.inject(["500", "429"], match="day 4")  # two lines of one dialogue fail
    else:
        server.batch_outcome = outcome
    store = tmp_path / "batch.jsonl"
    first = _judged(_judge(server, provider, tmp_path / "batches"), items, store)
    failed = {k for k, (status, _, _) in first.items() if status == FAILED}
    expected = {"expired": len(items) // 2, "failed": len(items), "partial": 2}[outcome]
    assert len(failed) == expected
    assert all(score is None for status, score, _ in first.values() if status == FAILED)  # never a score
    judged = {k: v for k, v in first.items() if k not in failed}
    assert judged == {k: single[k] for k in judged}
    errors = [r.error for r in ScoreStore(store).records.values() if r.status == FAILED]
    assert all("batch" in e for e in errors), errors[:2]

    server.batch_outcome = "completed"  # the rerun: only the failed requests go out again
    again = _judged(_judge(server, provider, tmp_path / "batches"), items, store)
    assert again == single
    assert len(server.batches.created) == 2
    assert len(server.batches.created[1].lines) == expected


def test_a_key_a_batch_line_echoes_is_masked(server, tmp_path):
    server.fault_every = "echo_key"
    try:
        _judged(_judge(server, "openai", tmp_path / "batches"), _items(2), tmp_path / "batch.jsonl")
    finally:
        server.fault_every = None
    assert KEY in json.dumps(server.batches.created[0].results)  # the lines did echo it
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [p for p in written if KEY in p.read_text()]


def test_the_estimate_and_max_cost_use_the_batch_price(server, tmp_path):
    price = {"model": "gpt-4-0613", "prompt": 0.03, "completion": 0.06}
    price |= {"batch_prompt": 0.015, "batch_completion": 0.03}
    items = _items()
    plain = _judge(server, "openai", backend={"model": "gpt-4-0613", "price": price})
    batch = _judge(server, "openai", tmp_path / "b", backend={"model": "gpt-4-0613", "price": price})
    full, half = estimate_items(plain, items), estimate_items(batch, items)
    assert full.prompt_tokens == half.prompt_tokens and full.requests == half.requests == len(items)
    assert half.usd == pytest.approx(full.usd / 2)
    assert "gpt-4-0613's batch price" in half.summary() and "gpt-4-0613's price" in full.summary()


def test_a_backend_without_a_batch_api_is_refused(tmp_path):
    node = {"kind": "api", "name": "x", "backend": {"kind": "canned", "replies": ["3"]}}
    with pytest.raises(ConfigError, match="judge.batch.*no batch API"):
        build_judge(judge_settings({**node, "batch": True, "batch_folder": str(tmp_path)}))
    with pytest.raises(ConfigError, match="batch_folder"):
        build_judge(judge_settings({**node, "batch": True, "batch_folder": None}))


@pytest.mark.parametrize("key", ["batch_poll_s", "batch_wait_s"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_batch_timings_refuse_nan_inf_and_negatives(server, tmp_path, key, value):
    with pytest.raises(ConfigError, match=key):
        _judge(server, "openai", tmp_path / "b", **{key: value})


def _requests(judge, items):
    """The prompts, settings and request keys (the batch lines' custom_id) of `items` to `judge`."""
    prompts = [it.prompt(judge.style, None) for it in items]
    settings = judge._call(None, items[0].choices)
    return prompts, settings, judge._batched._keys(prompts, settings)


def _events(tmp_path: Path, provider: str) -> list[dict[str, Any]]:
    path = tmp_path / "batches" / f"{provider}_judge" / "batches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _submit_unrecorded(server, provider, tmp_path):
    """A run killed between the provider's answer to create and the ledger's `submitted` line: the
    `submitting` event is on disk, the batch exists, its id is nowhere."""
    judge = _judge(server, provider, tmp_path / "batches")
    batched = judge._batched
    items = _items(2)
    prompts, settings, keys = _requests(judge, items)
    batched.ledger.submitting("tok-killed", provider, keys)
    lines = [(k, batched.api.request(p, settings)) for k, p in zip(keys, prompts, strict=True)]
    batched.api.create(lines, "tok-killed")
    judge.close()
    return items


def test_a_batch_created_by_a_run_killed_before_recording_it_is_found_again_by_its_token(server, tmp_path):
    items = _submit_unrecorded(server, "openai", tmp_path)
    judged = _judged(_judge(server, "openai", tmp_path / "batches"), items, tmp_path / "b.jsonl")
    assert len(server.batches.created) == 1  # adopted, not submitted again
    assert {status for status, _, _ in judged.values()} <= {VALID, INVALID}


def test_an_anthropic_batch_lost_that_way_is_named_and_its_requests_submitted_again(server, tmp_path, caplog):
    items = _submit_unrecorded(server, "anthropic", tmp_path)
    with caplog.at_level("WARNING"):
        judged = _judged(_judge(server, "anthropic", tmp_path / "batches"), items, tmp_path / "b.jsonl")
    assert "killed while submitting a batch of 6 requests" in caplog.text
    assert "anthropic batches keep no token" in caplog.text
    assert re.search(r"at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", caplog.text), caplog.text  # not an epoch
    assert len(server.batches.created) == 2  # Message Batches keep no token: paid twice, and said so
    assert {status for status, _, _ in judged.values()} <= {VALID, INVALID}
    ledger = (tmp_path / "batches" / "anthropic_judge" / "batches.jsonl").read_text()
    assert '"lost"' in ledger  # said once: the next run does not warn again


def test_a_run_that_stops_waiting_leaves_its_batch_to_the_next(server, tmp_path, caplog):
    items = _items(2)
    server.batch_polls_to_end = 10**9
    first = _judged(
        _judge(server, "openai", tmp_path / "batches", batch_wait_s=0), items, tmp_path / "b.jsonl"
    )
    assert {status for status, _, _ in first.values()} == {FAILED}
    errors = {r.error for r in ScoreStore(tmp_path / "b.jsonl").records.values()}
    assert all("rerun to collect it" in e for e in errors), errors
    server.batch_polls_to_end = 0
    with caplog.at_level("INFO"):
        again = _judged(_judge(server, "openai", tmp_path / "batches"), items, tmp_path / "b.jsonl")
    assert len(server.batches.created) == 1 and FAILED not in {s for s, _, _ in again.values()}
    # the resumed run says which batch it polls, from which ledger, submitted when (issue 62)
    ledger = tmp_path / "batches" / "openai_judge" / "batches.jsonl"
    said = f"polling openai batch {server.batches.created[0].id} from ledger {ledger}, submitted at "
    assert said in caplog.text, caplog.text
    assert re.search(re.escape(said) + r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", caplog.text)


# --- issue 62: the ways out of a ledger, a server or a result file gone wrong --------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_the_provider_does_not_know_is_lost_and_its_requests_submitted_again(
    server, tmp_path, provider, caplog
):
    """A ledger naming a batch the provider does not know (deleted, made with another project's key)
    was an SDK NotFoundError traceback on every rerun: now one warning naming the batch and the
    ledger, the loss recorded in the ledger, and its requests submitted again."""
    items = _items(2)
    single = _judged(_judge(server, provider), items, tmp_path / "single.jsonl")
    server.reset()
    judge = _judge(server, provider, tmp_path / "batches")
    judge._batched.ledger.submitted(
        "tok-elsewhere", provider, "batch_unknown_here", _requests(judge, items)[2]
    )
    judge.close()
    with caplog.at_level("INFO"):
        judged = _judged(_judge(server, provider, tmp_path / "batches"), items, tmp_path / "b.jsonl")
    assert judged == single
    assert len(server.batches.created) == 1 and len(server.batches.created[0].lines) == len(items)
    ledger = tmp_path / "batches" / f"{provider}_judge" / "batches.jsonl"
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "batch_unknown_here" in warning and str(ledger) in warning and "submitted again" in warning
    lost = [e for e in _events(tmp_path, provider) if e["event"] == "lost"]
    assert [e.get("batch_id") for e in lost] == ["batch_unknown_here"] and "404" in lost[0]["why"]
    caplog.clear()
    with caplog.at_level("WARNING"):  # the ledger remembers: no warning, nothing submitted again
        again = _judged(_judge(server, provider, tmp_path / "batches"), items, tmp_path / "b.jsonl")
    assert again == single and len(server.batches.created) == 1 and not caplog.records


def test_a_batch_lost_while_the_run_waits_fails_its_judgments_and_the_next_run_submits_them(
    server, tmp_path, caplog
):
    items = _items(2)
    single = _judged(_judge(server, "openai"), items, tmp_path / "single.jsonl")
    server.reset()
    judge = _judge(server, "openai", tmp_path / "batches")
    judge.submit(items)  # the batch is created and recorded; then it is deleted before the first poll
    [gone] = server.batches.created
    del server.batches.batches[gone.id]
    store = tmp_path / "b.jsonl"
    with caplog.at_level("WARNING"):
        first = _judged(judge, items, store)
    assert {status for status, _, _ in first.values()} == {FAILED} and not server.batches.created
    errors = {r.error for r in ScoreStore(store).records.values()}
    assert errors == {f"batch {gone.id} is not known to the provider (deleted, or another key or project): "
                      "rerun to submit it again"}  # fmt: skip
    assert gone.id in caplog.text and "the next run submits them again" in caplog.text
    again = _judged(_judge(server, "openai", tmp_path / "batches"), items, store)
    assert again == single and len(server.batches.created) == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_server_unreachable_while_polling_is_polled_again(server, tmp_path, provider, caplog):
    items = _items(2)
    single = _judged(_judge(server, provider), items, tmp_path / "single.jsonl")
    server.reset()
    server.batch_drop_polls = 3  # three reads of the batch get no answer: the connection is closed
    with caplog.at_level("WARNING"):
        judged = _judged(_judge(server, provider, tmp_path / "batches"), items, tmp_path / "b.jsonl")
    assert judged == single and server.batch_drop_polls == 0
    unreachable = [r.getMessage() for r in caplog.records if "could not poll" in r.getMessage()]
    assert len(unreachable) == 3 and server.batches.created[0].id in unreachable[0], caplog.text


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_server_unreachable_until_the_wait_ends_gives_failed_judgments(server, tmp_path, provider):
    items = _items(2)
    single = _judged(_judge(server, provider), items, tmp_path / "single.jsonl")
    server.reset()
    server.batch_drop_polls = 10**9
    store = tmp_path / "b.jsonl"
    first = _judged(_judge(server, provider, tmp_path / "batches", batch_wait_s=0.3), items, store)
    assert {status for status, _, _ in first.values()} == {FAILED}
    errors = {r.error for r in ScoreStore(store).records.values()}
    assert all("could not be reached" in e and "rerun to collect it" in e for e in errors), errors
    server.batch_drop_polls = 0  # back: the rerun collects the same batch
    again = _judged(_judge(server, provider, tmp_path / "batches"), items, store)
    assert again == single and len(server.batches.created) == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("kind", ["no_custom_id", "cut", "not_a_result"])
def test_a_malformed_result_line_is_a_failed_judgment_never_a_crash(server, tmp_path, provider, kind, caplog):
    items = _items()
    single = _judged(_judge(server, provider), items, tmp_path / "single.jsonl")
    server.reset()
    server.batch_malformed = {"day 4": kind}  # the 3 lines of dialogue f/4
    store = tmp_path / "b.jsonl"
    with caplog.at_level("WARNING"):
        first = _judged(_judge(server, provider, tmp_path / "batches"), items, store)
    failed = {k for k, (status, _, _) in first.items() if status == FAILED}
    assert failed == {k for k in first if k[0] == "f/4"}
    assert {k: v for k, v in first.items() if k not in failed} == {
        k: single[k] for k in first if k not in failed
    }
    batch_id = server.batches.created[0].id
    errors = [r.error for r in ScoreStore(store).records.values() if r.status == FAILED]
    assert all(batch_id in e for e in errors), errors
    if kind == "no_custom_id":  # whose line it was cannot be read: said, and its request has no result
        assert "no custom_id" in caplog.text and batch_id in caplog.text
        assert all("without a result for this request" in e for e in errors), errors
    else:
        assert all("malformed" in e for e in errors), errors
    server.batch_malformed = {}
    again = _judged(_judge(server, provider, tmp_path / "batches"), items, store)  # those submitted again
    assert again == single
    assert len(server.batches.created) == 2 and len(server.batches.created[1].lines) == len(DIMS)


def test_two_runs_sharing_a_batch_folder_are_not_both_let_in(server, tmp_path):
    """Two runs on one ledger at once submitted the same requests twice: the second is refused,
    in one line naming the folder and the run holding it, until the first lets go."""
    first = _judge(server, "openai", tmp_path / "batches")
    with pytest.raises(UserError) as refused:
        _judge(server, "openai", tmp_path / "batches")
    message = str(refused.value)
    assert "\n" not in message and "in use by another run" in message
    assert str(tmp_path / "batches" / "openai_judge") in message and "judge.batch_folder" in message
    first.close()
    again = _judged(_judge(server, "openai", tmp_path / "batches"), _items(1), tmp_path / "b.jsonl")
    assert len(again) == len(DIMS) and len(server.batches.created) == 1


def test_rank_on_a_batch_folder_another_run_holds_is_one_error_line(server, tmp_path, monkeypatch, capsys):
    from esc.rundir import acquire_folder
    from tests.test_bad_inputs import run_in_process

    shared = tmp_path / "shared"
    (shared / "gpt4").mkdir(parents=True)
    held = acquire_folder(shared / "gpt4", "rank.score")  # the other run, judging into the same ledger
    try:
        args = [*_rank_args(server, _dialogues(tmp_path / "dialogues"), tmp_path / "out", True)]
        code, stderr, _ = run_in_process(
            ["rank.py", *args, f"judge.batch_folder={shared}"], monkeypatch, capsys
        )
    finally:
        held.release()
    [line] = [x for x in stderr.splitlines() if x.startswith("error:")]
    assert code == 2 and "Traceback" not in stderr, stderr[-2000:]
    assert (
        f"{shared / 'gpt4'} is in use by another run (rank.score: pid " in line
        and "judge.batch_folder" in line
    )
    assert not server.batches.created and server.requests == 0  # nothing submitted twice


def test_a_submission_openai_has_no_batch_for_is_named_with_a_readable_time(server, tmp_path, caplog):
    """A `submitting` line whose batch OpenAI does not hold: the warning said the provider keeps no
    token (OpenAI does; it was searched by it) and printed an epoch."""
    judge = _judge(server, "openai", tmp_path / "batches")
    items = _items(2)
    keys = _requests(judge, items)[2]
    at = 1767225600.0  # 2026-01-01 00:00:00 UTC
    event = {"token": "tok-never", "provider": "openai", "requests": len(keys), "keys": keys, "at": at}
    judge._batched.ledger._append({"event": "submitting", **event})
    judge.close()
    with caplog.at_level("WARNING"):
        judged = _judged(_judge(server, "openai", tmp_path / "batches"), items, tmp_path / "b.jsonl")
    assert {status for status, _, _ in judged.values()} <= {VALID, INVALID}
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "at 2026-01-01 00:00:00 UTC" in warning and "1767225600" not in warning
    assert "keeps no token" not in warning and "no openai batch created since then holds its token" in warning


def test_a_ledger_line_cut_short_by_a_kill_loses_only_itself(tmp_path):
    from esc.chat.batch.ledger import BatchLedger

    ledger = BatchLedger(tmp_path)
    ledger.submitted("t1", "openai", "batch_a", ["k1"])
    with ledger.path.open("a") as f:
        f.write('{"event": "submitted", "token": "t2", "provider": "openai", "batch_id": "batch_b", "ke')
    BatchLedger(tmp_path).submitted("t3", "openai", "batch_c", ["k3"])
    again = BatchLedger(tmp_path)
    assert set(again.batches) == {"batch_a", "batch_c"} and again.live("k3") == "batch_c"


# --- rank.py, killed between submit and download ------------------------------------------------


def _dialogues(folder: Path) -> Path:
    dialogues = []
    for card in range(3):
        turns = [
            Turn("roleplayer", f"I cannot sleep since the move ({card}).", "stop"),
            Turn("target", "That sounds exhausting. What keeps you awake?", "stop"),
        ]
        dialogues.append(Dialogue(card, "en", "seeker", "bot", "sys", "Hello.", None, turns, "complete"))
    path = folder / "bot__seeker__en.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in dialogues))
    return path


def _rank_args(server: FakeOpenAIServer, dialogues: Path, out: Path, batch: bool) -> list[str]:
    return [
        "judge=gpt4",
        f"judge.backend.base_url={server.url}",
        "judge.backend.model=tiny",
        f"judge.backend.api_key_env={ENV}",
        "judge.backend.price=null",
        "judge.top_logprobs=0",
        f"judge.batch={str(batch).lower()}",
        "judge.batch_poll_s=0.05",
        "cache=off",
        "dimensions=[empathy,fluency]",
        f"dialogues={dialogues}",
        f"hydra.run.dir={out}",
    ]


def test_rank_killed_after_submitting_polls_the_same_batch(server, tmp_path):
    dialogues = _dialogues(tmp_path / "dialogues")
    single = run_entry("rank.py", _rank_args(server, dialogues, tmp_path / "single", False))
    assert single.returncode == 0, single.stderr[-2000:]
    server.reset()
    server.batch_polls_to_end = 10**9  # the batch stays in progress: the run waits, and is killed
    out = tmp_path / "batch"
    ledger = out / "batches" / "gpt4" / "batches.jsonl"
    kill_entry_when(
        "rank.py",
        _rank_args(server, dialogues, out, True),
        lambda: ledger.is_file() and '"submitted"' in ledger.read_text() and server.batches.created[0].polls,
    )  # the key reaches it through the environment (the `key` fixture)
    assert len(server.batches.created) == 1
    assert not list((out / "scores").glob("*.jsonl")) or not (out / "scores" / NAME).read_text().strip()
    server.batch_polls_to_end = 0  # the provider finishes the batch while nobody watches
    rerun = run_entry("rank.py", _rank_args(server, dialogues, out, True))
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert len(server.batches.created) == 1  # polled again, never submitted twice
    assert server.requests == 0  # and no single request either
    batches = json.loads((out / "manifest.json").read_text())["usage"]["gpt4"]["batches"]
    assert batches["submitted"] == 0 and batches["collected"] == [server.batches.created[0].id]
    assert _records(out / "scores" / NAME) == _records(tmp_path / "single" / "scores" / NAME)


def test_max_cost_is_checked_at_the_batch_price(server, tmp_path):
    dialogues = _dialogues(tmp_path / "dialogues")
    refused = {}
    for batch in (False, True):
        args = _rank_args(server, dialogues, tmp_path / f"out_{batch}", batch)
        args = [a for a in args if not a.startswith(("judge.backend.price=", "judge.backend.model="))]
        result = run_entry("rank.py", [*args, "judge.backend.model=gpt-4-0613", "max_cost=0.000001"])
        assert result.returncode == 2, result.stderr[-2000:]
        line = [x for x in result.stderr.splitlines() if x.startswith("error:")]
        assert len(line) == 1 and "max_cost" in line[0], result.stderr[-2000:]
        refused[batch] = float(re.search(r"cost up to \$([0-9.]+)", line[0]).group(1))
        assert ("batch price" in result.stdout) == batch
    assert refused[True] == pytest.approx(refused[False] / 2, rel=0.01)
    assert not server.batches.created and server.requests == 0  # refused before any request


# --- docs/scoring.md "Batch judging offline", as written ---------------------------------------------


def _offline_recipe() -> tuple[list[str], dict[str, str], list[str]]:
    """The documented block: the server's arguments, the exported variables, rank.py's arguments."""
    text = (REPO_ROOT / "docs" / "scoring.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- batch-offline -->\n```bash\n(.*?)```\n<!-- /batch-offline -->", text, re.S)
    assert found, "docs/scoring.md: the 'Batch judging offline' block is gone"
    server, env, rank = None, {}, None
    for command in found.group(1).replace("\\\n", " ").splitlines():
        words = shlex.split(command, comments=True)
        if words[:3] == ["python", "-m", "tests.fake_openai_server"]:
            server = [w for w in words[3:] if w != "&"]
        elif words[:1] == ["export"]:
            env.update(w.split("=", 1) for w in words[1:])
        elif words[:2] == ["python", "rank.py"]:
            rank = words[2:]
    assert server is not None and rank is not None, found.group(1)
    return server, env, rank


def test_the_documented_offline_recipe_runs_and_the_cache_comes_first(tmp_path, monkeypatch, capsys):
    """docs/scoring.md's offline batch recipe, run as written (in this process; only the port, the
    dialogues and the output folder differ), gives valid judgments through one batch; without its
    `cache=off`, a second run on the same dialogues is answered by the request cache and sends no
    batch, as the section says."""
    from tests.fake_openai_server import serve
    from tests.test_bad_inputs import run_in_process

    server_args, env, rank_args = _offline_recipe()
    assert "8011" in " ".join(server_args) and any("8011" in a for a in rank_args)
    dialogues = _dialogues(tmp_path / "eval-tiny").parent
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ESC_CACHE_DIR", str(tmp_path / "cache"))
    offline = serve([a.replace("8011", "0") for a in server_args])
    port = str(offline.port)
    try:

        def run(args: list[str], out: str) -> dict[str, Any]:
            argv = [
                a.replace("8011", port)
                .replace("outputs/eval-tiny", str(dialogues))
                .replace("outputs/rank-batch-offline", str(tmp_path / out))
                for a in args
            ]
            code, stderr, _ = run_in_process(["rank.py", *argv], monkeypatch, capsys)
            assert code == 0, stderr[-3000:]
            return json.loads((tmp_path / out / "manifest.json").read_text())["usage"]["gpt4"]

        usage = run(rank_args, "recipe")
        assert len(offline.batches.created) == 1 and offline.requests == 0  # all through one batch
        [batch] = offline.batches.created
        assert len(batch.lines) == 3 * 7 and usage["batches"]["collected"] == [batch.id]
        records = [
            json.loads(line) for p in (tmp_path / "recipe" / "scores").glob("*.jsonl") for line in p.open()
        ]
        assert len(records) == 21 and {r["status"] for r in records} == {VALID}  # "Score: N" replies

        cached = [a for a in rank_args if a != "cache=off"]
        assert len(cached) == len(rank_args) - 1
        run(cached, "cache-first")  # the cache is on: this run's batch fills it
        assert len(offline.batches.created) == 2
        usage = run(cached, "cache-second")  # the same requests: answered by the cache, no batch
        assert len(offline.batches.created) == 2
        assert usage["cached"] == usage["requests"] == 21 and usage["batches"]["submitted"] == 0
        assert not (tmp_path / "cache-second" / "batches" / "gpt4" / "batches.jsonl").exists()
    finally:
        offline.stop()
