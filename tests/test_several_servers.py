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
from tests.helpers import run_entry

SETTINGS = GenerationSettings(max_new_tokens=6, temperature=0.0)
CONVERSATIONS = [[{"role": "user", "content": f"Hello, this is message {i}."}] for i in range(8)]


@pytest.fixture()
def servers():
    a, b = FakeOpenAIServer(tiny_backend()).start(), FakeOpenAIServer(tiny_backend()).start()
    yield a, b
    a.stop()
    b.stop()


def _backend(urls, **kwargs) -> OpenAIBackend:
    return OpenAIBackend(
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


def test_every_server_is_checked_before_any_work(servers) -> None:
    a, _ = servers
    backend = _backend([a.url, "http://127.0.0.1:9/v1"])
    with pytest.raises(UserError) as err:
        backend.check_ready()
    backend.close()
    assert "127.0.0.1:9" in str(err.value) and "unreachable" in str(err.value)


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
