"""Several servers behind one backend (issue 54, item 3): `base_url` a list; requests spread over the
servers, one killed mid-run is set aside and its requests go to the other, every reply completes with
the same text as a one-server run, and the replies and dialogue files say which server answered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esc.chat.backends.openai_compat import OpenAIBackend
from esc.chat.base import GenerationSettings
from esc.dialogues.record import Turn
from esc.errors import UserError
from tests.fake_openai_server import FakeOpenAIServer, tiny_backend
from tests.helpers import run_entry, run_job

SETTINGS = GenerationSettings(max_new_tokens=6, temperature=0.0)
CONVERSATIONS = [[{"role": "user", "content": f"Hello, this is message {i}."}] for i in range(8)]


@pytest.fixture()
def servers():
    a, b = FakeOpenAIServer(tiny_backend()).start(), FakeOpenAIServer(tiny_backend()).start()
    yield a, b
    a.stop()
    b.stop()


def _backend(urls, **kwargs) -> OpenAIBackend:
    return OpenAIBackend.of(
        model="tiny", base_url=urls, api_key_env=None, timeout_s=20.0, max_retries=1, **kwargs
    )


def test_a_server_killed_mid_run_loses_no_reply(servers) -> None:
    a, b = servers
    one = _backend(a.url)
    expected = one.generate(CONVERSATIONS, SETTINGS)
    one.close()
    both = _backend([a.url, b.url], set_aside_s=60.0, max_concurrency=2)
    both.check_ready()
    first = both.generate(CONVERSATIONS[:4], SETTINGS)
    assert {r.server for r in first} == {a.url, b.url}  # spread over both
    a.stop()  # killed mid-run
    rest = both.generate(CONVERSATIONS[4:], SETTINGS)
    both.close()
    assert all(r.ok for r in [*first, *rest])
    assert {r.server for r in rest} == {b.url}  # the dead one set aside
    assert [r.text for r in [*first, *rest]] == [r.text for r in expected]  # as one server answers
    turn = Turn.from_reply("target", rest[0])
    assert turn.server == b.url and "server" in json.loads(json.dumps(turn.__dict__))


def test_every_server_is_checked_before_any_work(servers, caplog) -> None:
    """One unreachable server of several is named and set aside (the others serve the run); every
    server unreachable, or one that does not serve the model, stops the run before any work."""
    a, _ = servers
    backend = _backend([a.url, "http://127.0.0.1:9/v1"])
    with caplog.at_level("WARNING"):
        backend.check_ready()
    assert "127.0.0.1:9" in caplog.text and "unreachable" in caplog.text and "set aside" in caplog.text
    assert {r.server for r in backend.generate(CONVERSATIONS[:4], SETTINGS)} == {a.url}
    backend.close()
    dead = _backend(["http://127.0.0.1:9/v1", "http://127.0.0.1:7/v1"])
    with pytest.raises(UserError) as err:
        dead.check_ready()
    dead.close()
    assert "127.0.0.1:9" in str(err.value) and "unreachable" in str(err.value)
    wrong = OpenAIBackend.of(
        model="no-such-model", base_url=[a.url, "http://127.0.0.1:9/v1"], api_key_env=None
    )
    with pytest.raises(UserError, match="not served"):
        wrong.check_ready()
    wrong.close()


def test_a_run_whose_server_died_resumes_with_the_same_list(servers, tmp_path: Path) -> None:
    """Issue 62: a run over base_url=[A, B] whose server B died resumes with B still listed (set
    aside, with a warning): the folder's settings name the same servers, and A plays the rest."""
    from tests.helpers import evaluate_config

    a, b = servers

    def config(limit: int):
        return evaluate_config(
            tmp_path, "target=openai_compatible", "target.name=pool", "target.backend.model=tiny",
            f"target.backend.base_url=[{a.url},{b.url}]", "cards.languages=[en]", f"cards.limit={limit}",
            "dialogue.turns=2",
        )  # fmt: skip

    first = run_job("evaluate", config(1))
    assert first.counts["completed"] == 1
    b.stop()  # server B dies between the runs
    again = run_job("evaluate", config(2))
    assert again.counts == {**again.counts, "completed": 1, "failed": 0, "skipped": 1}
    lines = (tmp_path / "dialogues" / "pool__tiny__en.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    assert {t["server"] for t in last["turns"] if t.get("server")} == {a.url}


def test_a_credential_in_a_url_never_reaches_the_reply(servers) -> None:
    a, b = servers
    secret = "p4ssw0rd-" + "z" * 20
    with_password = a.url.replace("http://", f"http://user:{secret}@")
    backend = _backend([with_password, b.url])
    replies = backend.generate(CONVERSATIONS[:2], SETTINGS)
    backend.close()
    assert all(r.ok and secret not in (r.server or "") for r in replies)
    assert secret not in json.dumps(backend.identity())


def test_evaluate_py_takes_a_list_of_servers_and_its_dialogues_name_them(servers, tmp_path: Path) -> None:
    a, b = servers
    done = run_entry(
        "evaluate.py",
        ["roleplayer=tiny", "target=openai_compatible", "target.name=pool", "target.backend.model=tiny",
         f"target.backend.base_url=[{a.url},{b.url}]", "cards.limit=2", "cards.languages=[en]",
         "dialogue.turns=2", "cache.enabled=false", "engine.progress=false", f"hydra.run.dir={tmp_path}"],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    records = [
        json.loads(x) for x in (tmp_path / "dialogues" / "pool__tiny__en.jsonl").read_text().splitlines()
    ]
    served = {t.get("server") for r in records for t in r["turns"] if t["speaker"] == "target"}
    assert served and served <= {a.url, b.url}
    assert all("server" not in t for r in records for t in r["turns"] if t["speaker"] == "roleplayer")
