"""Which values the secret filter masks, and the forms it finds them in (issue 50, secrets).

A placeholder in a credential-like variable (`DUMMY_TOKEN=complete`) is no secret: masking it wrote
`"status": "***"` into dialogues and `***d` into the manifest. A key that a server echoes
transformed (upper-cased, base64, inside a `Basic` echo, %-encoded, split by spaces) reached the
dialogue file as-is. Both through the real path: evaluate.py, an API target on the fake OpenAI
server that echoes its key in each form, the tiny role-player.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote

import pytest

from esc.secrets.redaction import (
    MASK,
    looks_like_credential,
    redact,
    scrub_strings,
    scrub_text,
    secret_values,
    unmasked_variables,
)
from tests import fake_openai_server
from tests.fake_openai_server import FakeOpenAIServer
from tests.helpers import requires_data, run_entry

KEY = "sk-FORMS+0123456789/abcdefXYZ"  # `+` and `/`: %-encoding changes them
FORMS = {
    "upper": KEY.upper(),
    "lower": KEY.lower(),
    "base64": base64.b64encode(KEY.encode()).decode(),
    "urlsafe base64": base64.urlsafe_b64encode(b"k=" + KEY.encode()).decode(),
    "basic": base64.b64encode(f"someone:{KEY}".encode()).decode(),
    "percent": quote(KEY, safe=""),
    "percent lower": quote(KEY, safe="").lower(),
    "halves": f"{KEY[:13]} {KEY[13:]}",
    "spaced": " ".join(KEY),
    "wrapped": f"{KEY[:10]}\r\n{KEY[10:]}",
}
#: a key %-encoded byte by byte, letters and digits too (issue 62, 9), or only in part: any mix of
#: encoded and literal bytes, either hex case
PERCENT_FORMS = {
    "every byte": "".join(f"%{b:02X}" for b in KEY.encode()),
    "every byte, lower hex": "".join(f"%{b:02x}" for b in KEY.encode()),
    "only its dash": KEY.replace("-", "%2D"),
    "only its dash, lower hex": KEY.replace("-", "%2d"),
    "every other byte": "".join(f"%{ord(c):02X}" if i % 2 else c for i, c in enumerate(KEY)),
    "every byte, upper-cased": "".join(f"%{b:02x}" for b in KEY.upper().encode()),
}


def _echo_forms(payload: dict, token: str) -> None:
    """A server that echoes its bearer token in every form of FORMS."""
    forms = {
        "upper": token.upper(),
        "lower": token.lower(),
        "base64": base64.b64encode(token.encode()).decode(),
        "urlsafe base64": base64.urlsafe_b64encode(b"k=" + token.encode()).decode(),
        "basic": "Basic " + base64.b64encode(f"someone:{token}".encode()).decode(),
        "percent": quote(token, safe=""),
        "percent lower": quote(token, safe="").lower(),
        "halves": f"{token[:13]} {token[13:]}",
        "spaced": " ".join(token),
        "wrapped": f"{token[:10]}\r\n{token[10:]}",
    }
    payload["choices"][0]["message"]["content"] = "I hear you. " + "; ".join(
        f"{name}: {form}" for name, form in forms.items()
    )


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ("complete", False),  # a word
        ("EMPTY", False),  # vLLM's placeholder key
        ("sk-no-key-required", False),  # words joined by `-`
        ("getAccessTokenFromEnv", False),  # camelCase words
        ("12345678901234", False),  # a number: masking it would rewrite counts and ids
        ("sk-12ab", False),  # too short
        ("has a space 123", False),
        ("hunter2hunter", True),
        (KEY, True),
        ("AbXqTzLmNoPqRsTu", True),  # letters, not word-shaped: random
        ("correcthorsebatterystaple", True),  # 24 letters or more: no word is so long
    ],
)
def test_only_values_that_look_like_credentials_are_secrets(value: str, secret: bool) -> None:
    assert looks_like_credential(value) is secret


def test_a_placeholder_token_masks_nothing_and_records_keep_their_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DUMMY_TOKEN", "complete")
    monkeypatch.setenv("ESC_FORMS_API_KEY", KEY)
    assert "complete" not in secret_values(argv=[]) and KEY in secret_values(argv=[])
    record = {"status": "complete", "text": f"complete, key {KEY}", "complete": 1}
    assert scrub_strings(record) == {"status": "complete", "text": f"complete, key {MASK}", "complete": 1}
    assert redact({"status": "completed", "api_key": "complete"}) == {"status": "completed", "api_key": MASK}
    assert "DUMMY_TOKEN" in unmasked_variables() and "ESC_FORMS_API_KEY" not in unmasked_variables()


@pytest.mark.parametrize("name", sorted(FORMS))
def test_each_form_of_a_key_is_masked(name: str) -> None:
    text = f"said: {FORMS[name]} (end)"
    assert scrub_text(text, [KEY]) == f"said: {MASK} (end)"
    assert scrub_text(f"{text}\n" * 2000, [KEY]) == f"said: {MASK} (end)\n" * 2000  # searched by blocks


@pytest.mark.parametrize("name", sorted(PERCENT_FORMS))
def test_a_key_percent_encoded_in_any_mix_of_bytes_is_masked(name: str) -> None:
    text = f"said: {PERCENT_FORMS[name]} (end)"
    assert scrub_text(text, [KEY]) == f"said: {MASK} (end)"
    assert scrub_text(f"{text}\n" * 2000, [KEY]) == f"said: {MASK} (end)\n" * 2000  # searched by blocks


def test_percent_forms_of_a_key_reach_neither_a_dialogue_page_nor_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writers that showed them (issue 62, 9): the report's dialogue pages and `esc export`'s
    Parquet, from a run whose model echoed its key %-encoded."""
    import pyarrow.parquet as pq

    from esc.cli import main
    from tests.synthetic_run import inject_text, synthetic_run

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    rank = synthetic_run(tmp_path / "run", cards=2, targets=1, dims=1, seed=2, bootstrap=10)
    forms = " ".join(f"{name}: {form};" for name, form in PERCENT_FORMS.items())
    inject_text(rank, f"my key is {forms}")
    assert main(["report", str(rank), "--out", str(tmp_path / "site")]) == 0
    assert main(["export", str(rank), "--out", str(tmp_path / "ds")]) == 0
    pages = [p.read_text(encoding="utf-8") for p in (tmp_path / "site" / "dialogues").rglob("*.html")]
    [page] = [p for p in pages if "my key is" in p]
    table = json.dumps(pq.read_table(tmp_path / "ds" / "dialogues.parquet").to_pylist(), ensure_ascii=False)
    assert "my key is" in table
    for where, text in (("dialogue page", page), ("export parquet", table)):
        shown = {name: form for name, form in PERCENT_FORMS.items() if form in text}
        assert shown == {}, f"{where} shows the key as {sorted(shown)}"
        assert f"every byte: {MASK};" in text, where


def test_a_base64_echo_is_masked_whole_and_plain_text_is_left() -> None:
    basic = base64.b64encode(f"someone:{KEY}".encode()).decode()
    assert scrub_text(f"Authorization: Basic {basic}", [KEY]) == f"Authorization: Basic {MASK}"
    text = "An ordinary reply, 100% about feelings: nothing here is a key."
    assert scrub_text(text, [KEY]) == text


def _leaks(root: Path) -> list[str]:
    """Each file under `root` that holds any form of KEY: 'file: form'."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [
                f"{path.relative_to(root)}: {n}"
                for n, f in {"raw": KEY, **FORMS}.items()
                if f.encode() in data
            ]
    return found


@requires_data
def test_a_key_echoed_in_any_form_reaches_no_file_and_a_placeholder_rewrites_no_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(fake_openai_server.ANSWER_FAULTS, "echo_key_forms", _echo_forms)
    env = {"OPENAI_API_KEY": KEY, "DUMMY_TOKEN": "complete"}
    with FakeOpenAIServer(fault_every="echo_key_forms") as server:
        run = run_entry(
            "evaluate.py",
            [
                "roleplayer=tiny",
                "target=gpt4",
                f"target.backend.base_url={server.url}",
                "target.backend.model=tiny",
                "target.backend.price=null",
                "cards.languages=[en]",
                "cards.limit=1",
                "dialogue.turns=2",
                f"cache.path={tmp_path / 'cache' / 'requests.sqlite'}",  # the request cache too
                f"hydra.run.dir={tmp_path / 'evaluate'}",
            ],
            env=env,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert server.requests > 0
    [dialogues] = (tmp_path / "evaluate" / "dialogues").glob("gpt4__*.jsonl")
    [dialogue] = [json.loads(line) for line in dialogues.read_text().splitlines()]
    replies = [t["text"] for t in dialogue["turns"] if t["speaker"] == "target"]
    assert replies and all(f"{name}: {MASK}" in text for text in replies for name in FORMS if name != "basic")
    assert all(f"basic: Basic {MASK}" in text for text in replies)
    assert dialogue["status"] == "complete"  # DUMMY_TOKEN=complete is not a secret
    manifest = json.loads((tmp_path / "evaluate" / "manifest.json").read_text())
    assert manifest["status"] == "completed" and "***d" not in json.dumps(manifest)
    assert (tmp_path / "cache" / "requests.sqlite").is_file()
    assert _leaks(tmp_path) == []
    assert "completed" in run.stdout + run.stderr and "***d" not in run.stdout + run.stderr
    told = "not masked, not the shape of a credential (a word, a number, under 8 characters): the value of"
    [line] = [line for line in (run.stdout + run.stderr).splitlines() if told in line]  # said once
    assert "DUMMY_TOKEN" in line.split(told)[1].replace(",", " ").split()  # the name, never a value
    for form in (KEY, *FORMS.values()):
        assert form not in run.stdout + run.stderr


def test_a_key_with_html_characters_is_masked_in_a_rendered_page() -> None:
    """Pages are masked after Jinja renders them (autoescape), so a key holding `&`, `<` or a quote
    is found as the page spells it (`&amp;`, `&#39;`, `&#x27;`, ...), not only as written."""
    import html

    import jinja2

    key = "p&ss'w0rd<\"9Zk4Qm7Tx2"
    page = jinja2.Environment(autoescape=True).from_string("<p>{{ text }}</p>")
    for rendered in (page.render(text=f"the model said {key}"), html.escape(f"the model said {key}")):
        assert key not in rendered  # escaped: the key as written is not there
        masked = scrub_text(rendered, [key])
        assert "the model said ***" in masked and "9Zk4Qm7Tx2" not in masked, masked
