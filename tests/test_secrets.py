"""No key in any file under a run folder, whatever road it came by (esc.masking)."""

from __future__ import annotations

import io
import logging
import os
import sys
from pathlib import Path

import pytest

from esc.masking import (
    MASK,
    RedactLogFilter,
    _MaskedStream,
    argv_redacted,
    console_masked,
    redact,
    redact_command,
    scrub_file,
    secret_values,
)
from tests.helpers import FAST_TRAIN, requires_data, run_entry

ENV_KEY = "sk-PLANTED-env-0123456789abcdef"
CLI_TOKEN = "hf_PLANTED_cli_9876543210"
HEADER_KEY = "PLANTED-header-key-55555"
PLANTED = (ENV_KEY, CLI_TOKEN, HEADER_KEY)


def test_redact_masks_by_key_name_and_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESC_TEST_API_KEY", ENV_KEY)
    config = {
        "backend": {
            "api_key_env": "ESC_TEST_API_KEY",
            "max_new_tokens": 8,
            "extra_body": {"Authorization": "x" * 9},
        },
        "hf_token": CLI_TOKEN,
        "note": f"the key is {ENV_KEY}",
        "eos_token": "</s>",
    }
    clean = redact(config)
    assert clean["backend"] == {
        "api_key_env": "ESC_TEST_API_KEY",
        "max_new_tokens": 8,
        "extra_body": {"Authorization": MASK},
    }
    assert (
        clean["hf_token"] == MASK and clean["note"] == f"the key is {MASK}" and clean["eos_token"] == "</s>"
    )
    values = secret_values(config, argv=[f"+hf_token={CLI_TOKEN}"])
    assert ENV_KEY in values and CLI_TOKEN in values
    assert redact_command(["train.py", f"+hf_token={CLI_TOKEN}", "model=tiny", f"x={ENV_KEY}"], values) == [
        "train.py",
        f"+hf_token={MASK}",
        "model=tiny",
        f"x={MASK}",
    ]


def test_argv_is_masked_only_inside_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["train.py", f"+hf_token={CLI_TOKEN}"])
    with argv_redacted():
        assert sys.argv == ["train.py", f"+hf_token={MASK}"]
    assert sys.argv == ["train.py", f"+hf_token={CLI_TOKEN}"]


def test_scrub_file_masks_hydra_yaml_even_when_folded(tmp_path: Path) -> None:
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text(f"- +hf_token={CLI_TOKEN}\n- model=tiny\n")
    assert scrub_file(overrides, [CLI_TOKEN])
    assert overrides.read_text() == f"- +hf_token={MASK}\n- model=tiny\n"
    hydra = tmp_path / "hydra.yaml"  # YAML folds a long value over lines: a text search misses it
    hydra.write_text(
        f"job:\n  override_dirname: +x={{headers:{{Authorization:'Bearer\n    {HEADER_KEY}'}}}},model=tiny\n"
        "api_key: abcdefghijk\napi_key_env: OPENAI_API_KEY\n"
    )
    assert scrub_file(hydra, [f"Bearer {HEADER_KEY}", HEADER_KEY])
    text = hydra.read_text()
    assert HEADER_KEY not in text and "abcdefghijk" not in text and "api_key_env: OPENAI_API_KEY" in text
    assert not scrub_file(hydra, [HEADER_KEY])  # nothing left to mask


def test_logs_and_the_console_are_masked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """What Hydra echoes of a sweep (by logging, and by writing to stderr itself) shows no token: a
    credential-like override by its key, however short, and a known secret value anywhere."""
    monkeypatch.setattr(sys, "argv", ["rank.py", "-m", f"+hf_token={CLI_TOKEN}", "+foo_token=short"])
    record = logging.LogRecord(
        "hydra", logging.INFO, __file__, 1, "\t#0 : %s", (" ".join(sys.argv[2:]),), None
    )
    assert RedactLogFilter().filter(record)
    assert record.getMessage() == f"\t#0 : +hf_token={MASK} +foo_token={MASK}"
    with console_masked():
        print(
            f"Error executing job with overrides: ['+hf_token={CLI_TOKEN}', 'max_new_tokens=8']",
            file=sys.stderr,
        )
        print(f"the token is {CLI_TOKEN}")
    captured = capsys.readouterr()
    assert captured.err == f"Error executing job with overrides: ['+hf_token={MASK}', 'max_new_tokens=8']\n"
    assert captured.out == f"the token is {MASK}\n"


def test_a_url_password_is_a_secret_wherever_it_is_written() -> None:
    """Issue 36 (10): `base_url=http://user:SECRET@host/v1` reached `.hydra/`, the manifest, the log and
    the console. The password, and the HTTP Basic credentials the client makes of it, are secrets."""
    import base64

    url = "http://esc:URLPASS-1234@127.0.0.1:8000/v1"
    config = {"target": {"backend": {"base_url": url}}}
    basic = base64.b64encode(b"esc:URLPASS-1234").decode()
    assert {"URLPASS-1234", basic} <= set(secret_values(config, argv=[]))
    assert {"URLPASS-1234", basic} <= set(secret_values(None, argv=[f"target.backend.base_url={url}"]))
    assert redact(config)["target"]["backend"]["base_url"] == "http://***@127.0.0.1:8000/v1"
    assert redact_command([f"target.backend.base_url={url}"], secret_values(config, argv=[])) == [
        "target.backend.base_url=http://***@127.0.0.1:8000/v1"
    ]


def test_closing_the_masked_console_leaves_the_real_one_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """absl's log handler, made while the mask is on, closes its stream whenever logging is configured
    again (each Hydra run): that must not close the process's stdout or stderr under it."""
    monkeypatch.setenv("CONSOLE_TEST_TOKEN", CLI_TOKEN)
    real = io.StringIO()
    masked = _MaskedStream(real)
    masked.write(f"token {CLI_TOKEN}\n")
    masked.close()
    assert not real.closed
    assert real.getvalue() == f"token {MASK}\n"


def _files_with_secrets(root: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {key}" for key in PLANTED if key.encode() in data]
    return found


@requires_data
def test_planted_keys_reach_no_file_of_train_evaluate_or_rank(tmp_path: Path) -> None:
    """A key in the environment, one on the command line and one in a request header: after
    train (W&B offline), evaluate (an API target) and rank (an API judge, W&B offline), no file
    under any run folder holds any of them."""
    from tests.fake_openai_server import FakeOpenAIServer

    env = {"OPENAI_API_KEY": ENV_KEY, "WANDB_MODE": "offline", "ESC_CACHE_DIR": str(tmp_path / "cache")}
    cli = f"+hydra.job.env_set.HF_TOKEN={CLI_TOKEN}"  # a token on the command line
    header = f"+target.backend.extra_body={{headers:{{Authorization:'Bearer {HEADER_KEY}'}}}}"
    train = run_entry(
        "train.py",
        [
            "+exp=train/esc_role",
            *FAST_TRAIN,
            "logger=csv_wandb",
            "trainer.max_steps=1",
            cli,
            f"hydra.run.dir={tmp_path / 'train'}",
        ],
        env=env,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    with FakeOpenAIServer(api_key=ENV_KEY) as server:
        api = [
            f"target.backend.base_url={server.url}",
            "target.backend.model=tiny",
            "target.backend.price=null",
        ]
        evaluate = run_entry(
            "evaluate.py",
            [
                "roleplayer=tiny",
                "target=gpt4",
                *api,
                "cards.languages=[en]",
                "cards.limit=1",
                "dialogue.turns=1",
                cli,
                header,
                f"hydra.run.dir={tmp_path / 'evaluate'}",
            ],  # fmt: skip
            env=env,
        )
        assert evaluate.returncode == 0, evaluate.stderr[-3000:]
        assert server.requests > 0
        rank = run_entry(
            "rank.py",
            [
                "judge=gpt4",
                f"judge.backend.base_url={server.url}",
                "judge.backend.model=tiny",
                "judge.backend.price=null",  # gpt4.yaml's price is gpt-4-0613's: refused for another model
                "dimensions=[empathy]",
                f"dialogues={tmp_path / 'evaluate'}",
                "wandb.enabled=true",
                cli,
                f"hydra.run.dir={tmp_path / 'rank'}",
            ],  # fmt: skip
            env=env,
        )
        assert rank.returncode in (0, 1, 3), rank.stderr[-3000:]  # 1: no valid judgment (tiny's words)
    assert (tmp_path / "train" / "wandb").is_dir() and (tmp_path / "rank" / "wandb").is_dir()
    hydra = tmp_path / "evaluate" / ".hydra"
    assert (hydra / "overrides.yaml").read_text().count(MASK) == 1  # the header's key
    assert f"HF_TOKEN={MASK}" in (hydra / "hydra.yaml").read_text()  # the command line's, a Hydra override
    leaks = [
        f"{run}/{leak}"
        for run in ("train", "evaluate", "rank")
        for leak in _files_with_secrets(tmp_path / run)
    ]
    assert leaks == []
    for key in PLANTED:  # and not on the console either, where a SLURM log would keep them
        for result in (train, evaluate, rank):
            assert key not in result.stdout + result.stderr
    assert os.environ.get("OPENAI_API_KEY") != ENV_KEY
