"""The embedded tiny model (esc/models/tiny.py): architecture, tokenizer, determinism, cache, generation.

Offline and on CPU. Everything that builds or loads the model needs the dialogue data of `make data`
(the tokenizer is trained on it) and is skipped without it. The fresh build for the determinism
check takes about 20 s on 2 cores; the other tests reuse the cached build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from esc.config_rules import load_section
from esc.errors import ConfigError, UserError
from esc.models import tiny
from esc.models.loading import TopModelSettings
from esc.models.tiny import TinySpec, ensure_tiny_model
from tests.helpers import compose, requires_data

SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny_cfg():
    return compose(["model=tiny"]).model


@pytest.fixture(scope="module")
def tiny_path(tiny_cfg) -> Path:
    """The cached build of the spec in conf/model/tiny.yaml (built here on first use)."""
    from esc.models.loading import ModelSettings, resolve_model_path

    return Path(resolve_model_path(ModelSettings.of(tiny_cfg)))


@pytest.fixture(scope="module")
def tokenizer(tiny_path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_path)


@pytest.fixture(scope="module")
def model(tiny_path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_path).eval()


@pytest.fixture(scope="module")
def fresh_build(tiny_cfg, tmp_path_factory) -> Path:
    """The same spec built from scratch into an empty directory (not the cache)."""
    root = tmp_path_factory.mktemp("tiny-fresh")
    return ensure_tiny_model(TinySpec(**dict(tiny_cfg.tiny)), root=root)


# --- architecture ----------------------------------------------------------------------------


@requires_data
def test_model_is_qwen2_with_head_size_64_and_gqa(model, tokenizer, tiny_cfg):
    from transformers import Qwen2ForCausalLM

    config = model.config
    assert isinstance(model, Qwen2ForCausalLM)
    assert config.hidden_size // config.num_attention_heads == 64
    assert config.num_key_value_heads < config.num_attention_heads
    assert config.vocab_size == len(tokenizer)
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    assert config.hidden_size == tiny_cfg.tiny.hidden_size
    assert config.num_hidden_layers == tiny_cfg.tiny.num_hidden_layers


def test_spec_key_depends_on_every_field():
    base = TinySpec()
    assert base.key() == TinySpec().key()
    assert TinySpec(seed=base.seed + 1).key() != base.key()
    assert TinySpec(vocab_size=4096).key() != base.key()
    node = OmegaConf.to_container(compose(["model=tiny"]).model)
    odd = {**node, "tiny": {**node["tiny"], "hidden_size": 130, "num_attention_heads": 4}}
    with pytest.raises(
        ConfigError, match=r"config `model.tiny.hidden_size`: must be a multiple of num_attention_heads"
    ):
        load_section("model", TopModelSettings, odd)  # the settings refuse it before any build


# --- tokenizer -------------------------------------------------------------------------------


@requires_data
def test_chatml_special_tokens_eos_and_pad(tokenizer):
    for token in SPECIALS:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, token
        assert tokenizer.convert_ids_to_tokens(ids) == [token]
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    # special tokens are never merged with the text around them
    ids = tokenizer("<|im_start|>user\nhi<|im_end|>\n", add_special_tokens=False)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in ids


@requires_data
def test_chat_template_renders_qwen15_format(tokenizer):
    no_system = [{"role": "user", "content": "Hi there"}]
    assert tokenizer.apply_chat_template(no_system, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    dialogue = [
        {"role": "system", "content": "You play a worried person."},
        {"role": "user", "content": "Hello, I'm your personal assistant."},
        {"role": "assistant", "content": "I lost my job.\nI feel bad."},
        {"role": "user", "content": "我很抱歉。"},
    ]
    expected = (
        "<|im_start|>system\nYou play a worried person.<|im_end|>\n"
        "<|im_start|>user\nHello, I'm your personal assistant.<|im_end|>\n"
        "<|im_start|>assistant\nI lost my job.\nI feel bad.<|im_end|>\n"
        "<|im_start|>user\n我很抱歉。<|im_end|>\n"
    )
    assert tokenizer.apply_chat_template(dialogue, tokenize=False) == expected
    assert (
        tokenizer.apply_chat_template(dialogue, tokenize=False, add_generation_prompt=True)
        == expected + "<|im_start|>assistant\n"
    )
    assert tokenizer.chat_template == tiny.CHATML_TEMPLATE


@requires_data
@pytest.mark.parametrize(
    "text",
    [
        "Hello , world . I'm  fine!\n\tIt's been a hard week at work, honestly...  ",
        "我最近很焦虑，晚上睡不着。你能帮帮我吗？😊",
        "mixed 中文 and English: 工作压力大 (work stress) 100%.",
    ],
    ids=["en", "zh", "mixed"],
)
def test_text_round_trips(tokenizer, text: str):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8"))  # merges were learned, not raw bytes only


# --- determinism and cache -------------------------------------------------------------------


@requires_data
def test_fresh_build_is_byte_identical_to_the_cached_one(fresh_build: Path, tiny_path: Path):
    assert fresh_build != tiny_path and fresh_build.name == tiny_path.name
    for name in ("model.safetensors", "tokenizer.json"):
        assert sha256(fresh_build / name) == sha256(tiny_path / name), name


@requires_data
def test_other_seed_gives_other_weights_and_directory(tiny_cfg, tiny_path: Path, tmp_path, monkeypatch):
    spec = TinySpec(**dict(tiny_cfg.tiny))
    other = dataclasses.replace(spec, seed=spec.seed + 1)

    def copy_tokenizer(_spec: TinySpec, out: Path) -> None:
        # the tokenizer does not depend on the seed: reuse the cached one, train nothing (fast)
        for path in tiny_path.iterdir():
            if path.name.startswith(("tokenizer", "special_tokens", "chat_template")):
                shutil.copy(path, out / path.name)

    monkeypatch.setattr(tiny, "_train_tokenizer", copy_tokenizer)
    built = ensure_tiny_model(other, root=tmp_path)
    assert built.name != tiny_path.name
    assert built.name == f"qwen2-tiny-{other.key()}"
    assert sha256(built / "tokenizer.json") == sha256(tiny_path / "tokenizer.json")
    assert sha256(built / "model.safetensors") != sha256(tiny_path / "model.safetensors")


@requires_data
def test_second_call_reuses_the_build(fresh_build: Path, tiny_cfg, monkeypatch):
    def must_not_run(*_args, **_kwargs):
        raise AssertionError("the tiny model was rebuilt although it is cached")

    monkeypatch.setattr(tiny, "_train_tokenizer", must_not_run)
    monkeypatch.setattr(tiny, "_init_model", must_not_run)
    stamp = (fresh_build / "build.json").stat().st_mtime_ns
    again = ensure_tiny_model(TinySpec(**dict(tiny_cfg.tiny)), root=fresh_build.parent)
    assert again == fresh_build
    assert (fresh_build / "build.json").stat().st_mtime_ns == stamp
    assert not [p for p in fresh_build.parent.iterdir() if p.is_dir() and p != fresh_build]  # no temp dir


def test_missing_data_says_make_data(tmp_path: Path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("ESC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ESC_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(UserError, match="make data"):
        ensure_tiny_model()
    # a failed build leaves no half-built model that a later call would take for a finished one
    assert not list((tmp_path / "cache" / "tiny").glob("qwen2-tiny-*"))


# --- generation ------------------------------------------------------------------------------


def _prompt(tokenizer, text: str) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


@requires_data
def test_greedy_generation_is_deterministic_and_bounded(model, tokenizer):
    import torch

    prompt = _prompt(tokenizer, "I feel lonely lately.")
    enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        first = model.generate(**enc, max_new_tokens=12, do_sample=False)
        second = model.generate(**enc, max_new_tokens=12, do_sample=False)
    assert torch.equal(first, second)
    new = first[0, enc["input_ids"].shape[1] :].tolist()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert 1 <= len(new) <= 12
    assert len(new) == 12 or new[-1] == im_end
    assert im_end not in new[:-1]


@requires_data
def test_generation_stops_at_im_end(model, tokenizer):
    """The model's own generation config ends a turn at <|im_end|> (forced here at step 3)."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    class ForceEndAt(LogitsProcessor):
        def __init__(self, prompt_len: int, step: int) -> None:
            self.at = prompt_len + step

        def __call__(self, input_ids, scores):
            if input_ids.shape[1] == self.at:
                scores = torch.full_like(scores, -float("inf"))
                scores[:, im_end] = 0.0
            return scores

    enc = tokenizer(_prompt(tokenizer, "Hello"), return_tensors="pt", add_special_tokens=False)
    n = enc["input_ids"].shape[1]
    with torch.no_grad():
        out = model.generate(
            **enc,
            max_new_tokens=20,
            logits_processor=LogitsProcessorList([ForceEndAt(n, 2)]),
        )
    new = out[0, n:].tolist()
    assert len(new) == 3 and new[-1] == im_end


@requires_data
def test_batched_left_padded_generation_equals_single(model, tokenizer):
    """Batched greedy decoding (left padding, as the evaluation engine will use) matches one-by-one.

    Exactly equal in float32 on CPU with sdpa attention (checked with transformers 5.x, torch 2.13):
    the padded positions are masked, and with a random tiny model the greedy argmax has wide margins.
    """
    import copy

    import torch

    texts = [
        "I have been feeling very anxious about my exams and I cannot sleep at night, what should I do?",
        "你好",
    ]
    prompts = [_prompt(tokenizer, t) for t in texts]
    left = copy.copy(tokenizer)
    left.padding_side = "left"
    batch = left(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert batch["attention_mask"][1, 0] == 0  # the short prompt is really padded
    width = batch["input_ids"].shape[1]
    max_new = 24
    with torch.no_grad():
        batched = model.generate(**batch, max_new_tokens=max_new, do_sample=False)
        for i, prompt in enumerate(prompts):
            enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
            alone = model.generate(**enc, max_new_tokens=max_new, do_sample=False)
            alone_new = alone[0, enc["input_ids"].shape[1] :].tolist()
            batched_new = batched[i, width:].tolist()[: len(alone_new)]
            assert batched_new == alone_new, f"prompt {i}"


# --- label masking with the real tokenizer ---------------------------------------------------


@requires_data
def test_labels_on_a_real_esconv_sample(tokenizer):
    from esc.esc_role_samples.esconv import read_esconv_splits
    from esc.esc_role_samples.tokenize import IGNORE_INDEX, encode_chat
    from esc.paths import data_dir

    sample = read_esconv_splits(data_dir())[0]
    messages = sample.messages
    assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
    enc = encode_chat(tokenizer, messages, max_length=10**6)
    assert enc is not None
    ids, labels = enc["input_ids"], enc["labels"]
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    assert ids == tokenizer(full, add_special_tokens=False)["input_ids"]

    learned = [tid for tid, lab in zip(ids, labels, strict=True) if lab != IGNORE_INDEX]
    assert all(lab in (IGNORE_INDEX, tid) for tid, lab in zip(ids, labels, strict=True))
    assistant = [m["content"] + "<|im_end|>" for m in messages if m["role"] == "assistant"]
    assert tokenizer.decode(learned) == "".join(assistant)

    # everything else -- system prompt, supporter turns, role headers -- is unlabelled, intact
    masked = [tid for tid, lab in zip(ids, labels, strict=True) if lab == IGNORE_INDEX]
    rest, cursor = full, 0
    for span in assistant:  # cut each assistant turn's content + <|im_end|> where its header is
        header = "<|im_start|>assistant\n"
        at = rest.index(header + span, cursor) + len(header)
        rest, cursor = rest[:at] + rest[at + len(span) :], at
    assert tokenizer.decode(masked) == rest
    assert messages[0]["content"] in rest
    assert all(m["content"] in rest for m in messages if m["role"] == "user")
