"""Run records: manifests carry what reproduces a run, and never a secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esc.errors import DataError
from esc.masking import redact
from esc.runinfo import RunManifest, read_manifest


def test_redact_hides_credentials_but_keeps_env_var_names() -> None:
    config = {
        "backend": {"api_key": "sk-secret", "api_key_env": "OPENAI_API_KEY", "max_new_tokens": 64},
        "wandb": [{"token": "abc"}],
        "hf_token": "hf_xyz",
        "password": "",
    }
    clean = redact(config)
    text = json.dumps(clean)
    assert "sk-secret" not in text and "abc" not in text and "hf_xyz" not in text
    assert clean["backend"]["api_key_env"] == "OPENAI_API_KEY" and clean["backend"]["max_new_tokens"] == 64


def test_manifest_records_attempts_and_finishes(tmp_path: Path) -> None:
    first = RunManifest(tmp_path, {"seed": 1, "api_key": "sk-x"}, seed=1)
    assert json.loads(first.path.read_text())["status"] == "running"
    second = RunManifest(tmp_path, {"seed": 1}, seed=1)  # a rerun after a kill
    second.finish(global_step=7)
    data = json.loads(second.path.read_text())
    assert data["status"] == "completed" and data["global_step"] == 7 and data["end_time"]
    assert data["previous_attempts"][0]["status"] == "running"
    assert "sk-x" not in first.path.read_text()
    assert data["packages"]["torch"] and "python" in data and "hostname" in data


def test_a_manifest_reads_back_as_written_and_a_malformed_one_is_one_error(tmp_path: Path) -> None:
    """`read_manifest` reads what `RunManifest` wrote by attribute (a job's own keys kept); a field of
    the wrong type is one DataError naming the file and the field."""
    manifest = RunManifest(tmp_path, {"mode": "score"}, seed=3)
    manifest.update(judge={"name": "tiny"}, sources=["a.jsonl"], counts={"done": 2})
    manifest.finish()
    read = read_manifest(manifest.path)
    assert (read.status, read.seed, read.config, read.sources) == (
        "completed",
        3,
        {"mode": "score"},
        ["a.jsonl"],
    )
    assert (
        read.judges == [{"name": "tiny"}]
        and read.git is not None
        and read.model_extra["counts"] == {"done": 2}
    )
    assert read.previous_attempts == [] and read.models == {}
    data = json.loads(manifest.path.read_text())
    manifest.path.write_text(json.dumps({**data, "seed": "3"}))
    with pytest.raises(
        DataError, match=r"manifest.json: not a run manifest: seed: Input should be a valid integer"
    ):
        read_manifest(manifest.path)


def test_resume_picks_the_newest_checkpoint(tmp_path: Path) -> None:
    import os

    from esc.train.run import _resume_checkpoint

    auto = "auto"
    assert _resume_checkpoint(auto, tmp_path) is None
    (tmp_path / "last.ckpt").write_text("x")
    (tmp_path / "hpc_ckpt_1.ckpt").write_text("x")
    os.utime(tmp_path / "last.ckpt", (1_000, 1_000))
    assert _resume_checkpoint(auto, tmp_path) == str(tmp_path / "hpc_ckpt_1.ckpt")
    os.utime(tmp_path / "last.ckpt", None)
    os.utime(tmp_path / "hpc_ckpt_1.ckpt", (1_000, 1_000))
    assert _resume_checkpoint(auto, tmp_path) == str(tmp_path / "last.ckpt")
    assert _resume_checkpoint("never", tmp_path) is None
