"""ESC-Role as released (haidequanbu/ESC-Role: full Qwen2ForCausalLM weights, ChatML): a tiny random
checkpoint with the release's config keys and a Qwen1.5-Chat generation_config.json that samples
plays dialogues through `roleplayer=esc_role`, greedily, and says what it overrode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from esc.dialogues.store import read_dialogues
from tests.helpers import requires_data, run_entry

# Qwen1.5-Chat's generation_config.json (the base ESC-Role was fine-tuned from); the values are those
# third-party configs restate for Qwen1.5-Chat (e.g. zlai-llm/zlai): the release's own file could
# not be read here
SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_release(tmp_path_factory.mktemp("hub") / "ESC-Role")


def write_release(folder: Path) -> Path:
    """The tiny model's weights and tokenizer in a folder laid out as the ESC-Role release."""
    from transformers import AutoTokenizer

    from esc.models.tiny import ensure_tiny_model

    shutil.copytree(ensure_tiny_model(), folder)
    (folder / "build.json").unlink()  # a plain checkpoint folder, not the tiny model's cache entry
    tok = AutoTokenizer.from_pretrained(folder)
    end_of_text, im_end = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    config = json.loads((folder / "config.json").read_text())
    config.update(  # Qwen1.5-14B-Chat's keys, at the tiny model's size
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", bos_token_id=end_of_text, eos_token_id=im_end,
        attention_dropout=0.0, rms_norm_eps=1e-6, rope_theta=1000000.0, sliding_window=32768,
        use_sliding_window=False, max_window_layers=35, tie_word_embeddings=False, torch_dtype="bfloat16",
        use_cache=True,
    )  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    ids = {"bos_token_id": end_of_text, "pad_token_id": end_of_text, "eos_token_id": [im_end, end_of_text]}
    generation = {**ids, **SAMPLING}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))
    return folder


def play(release: Path, out: Path):
    args = ["roleplayer=esc_role", f"roleplayer.backend.model.name_or_path={release}",
            "roleplayer.backend.model.dtype=float32", "roleplayer.generation.max_new_tokens=24",
            "target=tiny", "cards.languages=[en]", "cards.limit=2", "cache.enabled=false",
            "engine.progress=false", f"hydra.run.dir={out}"]  # fmt: skip
    result = run_entry("evaluate.py", args)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, [d.turns for d in read_dialogues(out / "dialogues" / "tiny__esc_role__en.jsonl")]


@requires_data
def test_released_esc_role_plays_greedily_and_says_what_it_overrode(release: Path, tmp_path: Path) -> None:
    first, turns = play(release, tmp_path / "a")
    _, again = play(release, tmp_path / "b")
    assert len(turns) == 2 and all(len(t) == 10 for t in turns)
    assert [[t.text for t in d] for d in turns] == [[t.text for t in d] for d in again]  # greedy: the same
    log = first.stdout + first.stderr
    assert "generation_config samples (do_sample=True, temperature=0.7, top_p=0.8, top_k=20)" in log
    assert "decoding greedily" in log and "kept from it: repetition_penalty=1.05" in log
    assert log.count("generation_config samples") == 1  # once for the run's role-player
