"""ESC-Role training data: prompts, readers, mixture and chat tokenization (offline, fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esc.corpora.esconv import esconv_path
from esc.corpora.roleplay import CHARACTEREVAL_DATA, CHARACTEREVAL_PROFILES, ROLEBENCH_FILES
from esc.corpora.smile import smile_dir
from esc.errors import ConfigError, UserError
from esc.esc_role_samples.esconv import read_esconv, read_esconv_splits
from esc.esc_role_samples.mixture import build_samples
from esc.esc_role_samples.roleplay import (
    charactereval_samples,
    rolebench_samples,
)
from esc.esc_role_samples.sample import Sample
from esc.esc_role_samples.smile import read_smile, read_smile_file
from esc.esc_role_samples.tokenize import IGNORE_INDEX, collate, encode_chat, encode_dataset, pack
from esc.paths import data_dir
from esc.prompts import (
    prompt_version,
    role_player_system_prompt,
    supporter_opener,
    training_prompt_id,
    training_texts_version,
)
from tests.helpers import conf_node

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Qwen1.5-Chat (adds a default system turn when none is given) and InternLM2-Chat (bos first).
QWEN15 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
INTERNLM2 = (
    "{{ bos_token }}{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

MESSAGES = [
    {"role": "system", "content": "You play a worried person. Card: lost job."},
    {"role": "user", "content": "Hello, I'm your personal assistant."},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "What is wrong today?"},
    {"role": "assistant", "content": "I lost my job.\nI feel bad."},
    {"role": "user", "content": "I am sorry to hear that."},
    {"role": "assistant", "content": "thank you, 谢谢"},
]


@pytest.fixture(scope="module")
def tokenizer():
    """A tiny byte-level BPE tokenizer with the Qwen ChatML chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = [m["content"] for m in MESSAGES] * 3 + [
        "system user assistant hello world",
        "我很难过。谢谢你。",
    ]
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token="<s>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHATML,
    )


def _labelled_runs(labels: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    prev = False
    for lab in labels:
        if lab != IGNORE_INDEX:
            if not prev:
                runs.append([])
            runs[-1].append(lab)
        prev = lab != IGNORE_INDEX
    return runs


# --- prompts ---------------------------------------------------------------------------------


def test_prompts_are_versioned_and_follow_figure_11():
    assert training_texts_version() == 1 and prompt_version(training_prompt_id()) == 2
    en = role_player_system_prompt("Age: Not mentioned\nProblem: X", "en")
    assert en.startswith(
        "I hope you can role-play as a person with worries and communicate with an AI assistant."
    )
    assert "Here is your character card:\nAge: Not mentioned\nProblem: X\nPlease simulate" in en
    assert en.endswith("Gradually reveal your worries throughout our multiple conversations.")
    zh = role_player_system_prompt("年龄：未提及", "zh")
    assert "年龄：未提及" in zh and "烦恼" in zh
    assert supporter_opener("en").startswith("Hello, I'm your personal assistant.")
    with pytest.raises(UserError):
        role_player_system_prompt("x", "fr")


# --- tokenization ----------------------------------------------------------------------------


def test_labels_cover_exactly_assistant_contents_and_end_of_turn(tokenizer):
    enc = encode_chat(tokenizer, MESSAGES, max_length=4096)
    assert enc is not None
    assert len(enc["input_ids"]) == len(enc["labels"]) == len(enc["attention_mask"])
    runs = _labelled_runs(enc["labels"])
    decoded = [tokenizer.decode(run) for run in runs]
    expected = [m["content"] + "<|im_end|>" for m in MESSAGES if m["role"] == "assistant"]
    assert decoded == expected
    # labelled positions carry their own input ids; nothing else is labelled
    for tid, lab in zip(enc["input_ids"], enc["labels"], strict=True):
        assert lab in (IGNORE_INDEX, tid)
    n_assistant_tokens = sum(len(tokenizer(e, add_special_tokens=False)["input_ids"]) for e in expected)
    assert sum(lab != IGNORE_INDEX for lab in enc["labels"]) == n_assistant_tokens


def test_input_ids_equal_tokenizing_the_rendered_template(tokenizer):
    enc = encode_chat(tokenizer, MESSAGES, max_length=4096)
    full = tokenizer.apply_chat_template(MESSAGES, tokenize=False)
    assert enc["input_ids"] == tokenizer(full, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("template", [QWEN15, INTERNLM2], ids=["qwen1.5", "internlm2"])
@pytest.mark.parametrize("with_system", [True, False])
def test_real_chat_templates(tokenizer, template: str, with_system: bool):
    import copy

    tok = copy.copy(tokenizer)
    tok.chat_template = template
    messages = MESSAGES if with_system else MESSAGES[1:]
    enc = encode_chat(tok, messages, max_length=4096)
    full = tok.apply_chat_template(messages, tokenize=False)
    assert enc["input_ids"] == tok(full, add_special_tokens=False)["input_ids"]
    decoded = [tok.decode(run) for run in _labelled_runs(enc["labels"])]
    assert decoded == [m["content"] + "<|im_end|>" for m in messages if m["role"] == "assistant"]


def test_truncation_keeps_whole_turns(tokenizer):
    full = encode_chat(tokenizer, MESSAGES, max_length=4096)
    two_turns = tokenizer.apply_chat_template(MESSAGES[:5], tokenize=False)
    n_two = len(tokenizer(two_turns, add_special_tokens=False)["input_ids"])
    for max_length in (n_two, n_two + 1, len(full["input_ids"]) - 1):
        enc = encode_chat(tokenizer, MESSAGES, max_length=max_length)
        assert enc is not None and len(enc["input_ids"]) <= max_length
        assert enc["input_ids"] == full["input_ids"][:n_two]  # ends after the 2nd assistant turn
        assert len(_labelled_runs(enc["labels"])) == 2
    one_turn = tokenizer.apply_chat_template(MESSAGES[:3], tokenize=False)
    n_one = len(tokenizer(one_turn, add_special_tokens=False)["input_ids"])
    enc = encode_chat(tokenizer, MESSAGES, max_length=n_one)
    assert enc is not None and len(_labelled_runs(enc["labels"])) == 1
    assert encode_chat(tokenizer, MESSAGES, max_length=n_one - 2) is None
    assert encode_chat(tokenizer, MESSAGES[:2], max_length=4096) is None  # no assistant turn


def test_non_prefix_stable_template_is_rejected(tokenizer):
    import copy

    bad = copy.copy(tokenizer)
    bad.chat_template = (
        "{% for m in messages|reverse %}{{ m['role'] + ':' + m['content'] + '\n' }}{% endfor %}"
    )
    with pytest.raises(UserError, match="prefix-stable"):
        encode_chat(bad, MESSAGES, max_length=4096)


def test_encode_dataset_collate_and_pack(tokenizer):
    samples = [
        Sample("t/0", "test", "en", None, MESSAGES),
        Sample("t/1", "test", "en", "train", MESSAGES[:3]),
        Sample("t/2", "test", "en", None, MESSAGES[:2]),  # no assistant turn: dropped
    ]
    ds = encode_dataset(samples, tokenizer, max_length=4096)
    assert len(ds) == 2
    assert {"id", "source", "language", "input_ids", "attention_mask", "labels"} <= set(ds.column_names)
    assert ds[0]["id"] == "t/0"
    batch = collate([ds[0], ds[1]], pad_token_id=tokenizer.pad_token_id)
    n0, n1 = len(ds[0]["input_ids"]), len(ds[1]["input_ids"])
    assert tuple(batch["input_ids"].shape) == (2, max(n0, n1))
    short = 1 if n1 < n0 else 0
    assert batch["labels"][short, -1].item() == IGNORE_INDEX
    assert batch["attention_mask"][short, -1].item() == 0
    assert batch["input_ids"][short, -1].item() == tokenizer.pad_token_id
    packed = pack(ds, max_length=n0 + n1)
    assert len(packed) == 1 and packed[0]["labels"] == ds[0]["labels"] + ds[1]["labels"]
    assert len(pack(ds, max_length=max(n0, n1))) == 2


# --- readers on the real data ----------------------------------------------------------------

ROOT = data_dir()
needs_esconv = pytest.mark.skipif(not esconv_path(ROOT, "train").is_file(), reason="ESConv not present")
needs_smile = pytest.mark.skipif(not smile_dir(ROOT).is_dir(), reason="Smile not present")
needs_roleplay = pytest.mark.skipif(
    not (ROOT / CHARACTEREVAL_DATA).is_file() or not (ROOT / ROLEBENCH_FILES["en"][0]).is_file(),
    reason="role-play data not present",
)
needs_all = pytest.mark.skipif(
    not (
        esconv_path(ROOT, "train").is_file()
        and smile_dir(ROOT).is_dir()
        and (ROOT / CHARACTEREVAL_DATA).is_file()
    ),
    reason="data not present",
)


def _check_shape(sample: Sample) -> None:
    roles = [m["role"] for m in sample.messages]
    assert roles[0] == "system" and roles[1] == "user", sample.id
    assert roles[-1] == "assistant", sample.id
    assert all(r == ("user" if k % 2 == 0 else "assistant") for k, r in enumerate(roles[1:])), sample.id
    assert all(m["content"].strip() for m in sample.messages), sample.id


@needs_esconv
def test_esconv_reader():
    samples = read_esconv_splits(ROOT)
    assert len(samples) == 1300
    assert len({s.id for s in samples}) == 1300
    assert {s.split_hint for s in samples} == {"train", "valid", "test"}
    for s in samples:
        _check_shape(s)
        assert s.language == "en" and s.source == "esconv"
        assert "Here is your character card:\nAge: Not mentioned" in s.messages[0]["content"]
    assert samples[0].id == "esconv/train/0"
    assert samples[0].messages[1]["content"] == supporter_opener("en")


@needs_smile
def test_smile_reader():
    samples = read_smile(smile_dir(ROOT))
    assert len(samples) > 100
    for s in samples:
        _check_shape(s)
        assert s.language == "zh" and s.id.startswith("smile/")
        assert "问题：" in s.messages[0]["content"]


@needs_roleplay
def test_roleplay_readers():
    rb = rolebench_samples(ROOT / ROLEBENCH_FILES["en"][0], "en")
    assert len(rb) > 1000
    ce = charactereval_samples(ROOT / CHARACTEREVAL_DATA, ROOT / CHARACTEREVAL_PROFILES)
    assert 1000 < len(ce) < 3000  # 4,564 examples, many contained in longer ones
    for s in rb[:200] + ce:
        _check_shape(s)
    assert len(rb[0].messages) == 3
    assert all(s.group and s.group.startswith("charactereval/scene/") for s in ce)
    # no kept example is a prefix of another kept example of the same character
    by_role: dict[str, list[str]] = {}
    for s in ce:
        role = s.messages[0]["content"].split("，", 1)[0]
        by_role.setdefault(role, []).append("\n".join(m["content"] for m in s.messages[1:]))
    for texts in by_role.values():
        texts.sort()
        assert not any(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))


def mixture(*changes: dict) -> dict:
    """The real `data` node (conf/data/esc_role.yaml) with every source off, then `changes`: a key a
    test leaves out has the config's value, and a source it does not turn on stays off."""
    off = {"sources": {name: {"enabled": False} for name in ("esconv", "smile", "roleplay")}}
    return conf_node("data", off, *changes)


@needs_all
def test_mixture_deterministic_disjoint_and_ratio():
    cfg = mixture(
        {
            "sources": {
                "esconv": {"enabled": True, "max_samples": 300},
                "smile": {"enabled": True, "max_samples": 200},
                "roleplay": {"enabled": True},
            },
            "roleplay_ratio": 0.3,
            "languages": ["en", "zh"],
            "val_fraction": 0.1,
            "seed": 42,
        }
    )
    train, val = build_samples(cfg)
    train2, val2 = build_samples(dict(cfg))
    assert [s.id for s in train] == [s.id for s in train2] and [s.id for s in val] == [s.id for s in val2]
    assert train == train2
    assert not {s.id for s in train} & {s.id for s in val}
    assert not {s.split_key for s in train} & {s.split_key for s in val}  # CharacterEval scenes
    every = train + val
    n_esc = sum(s.source in ("esconv", "smile") for s in every)
    n_rp = sum(s.source in ("rolebench", "charactereval") for s in every)
    assert 480 < n_esc <= 500  # Smile dialogues whose only client turn recites the card are left out
    assert n_rp == round(0.3 * n_esc)
    assert len(val) == pytest.approx(0.1 * len(every), abs=3)
    other_seed, _ = build_samples({**cfg, "seed": 7})
    assert {s.id for s in other_seed} != {s.id for s in train}


@needs_esconv
def test_mixture_language_filter_and_omegaconf():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        mixture(
            {
                "sources": {"esconv": {"enabled": True, "max_samples": 50}, "smile": {"enabled": True}},
                "roleplay_ratio": 0,
                "languages": ["en"],
                "val_fraction": 0.0,
                "seed": 1,
            }
        )
    )
    train, val = build_samples(cfg)
    assert len(train) == 50 and not val and {s.source for s in train} == {"esconv"}


# --- bad input -------------------------------------------------------------------------------


def test_malformed_esconv_line_names_file_and_line(tmp_path: Path):
    good = {
        "situation": "s",
        "problem_type": "p",
        "emotion_type": "e",
        "dialog": [{"text": "hi", "speaker": "usr"}],
    }
    path = tmp_path / "train_rl.txt"
    path.write_text(json.dumps(good) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"train_rl\.txt \[record line 2\]: not valid JSON"):
        read_esconv(path)
    path.write_text(json.dumps({**good, "dialog": "oops"}) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"\[record line 1\]: `dialog` should be list"):
        read_esconv(path)
    del good["situation"]
    path.write_text(json.dumps(good) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="missing key `situation`"):
        read_esconv(path)


def test_missing_file_says_make_data(tmp_path: Path):
    with pytest.raises(UserError, match="make data"):
        read_esconv(tmp_path / "nope_rl.txt")
    with pytest.raises(UserError, match="make data"):
        read_smile(tmp_path / "no_smile_dir")


def test_smile_file_shapes(tmp_path: Path):
    path = tmp_path / "5.json"
    path.write_text(
        json.dumps(
            [
                {"role": "client", "content": "我最近很焦虑。"},
                {"role": "client", "content": "睡不着。"},
                {"role": "counselor", "content": "能说说发生了什么吗？"},
                {"role": "client", "content": "工作压力大。"},
                {"role": "counselor", "content": "我理解。"},
            ],
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    sample = read_smile_file(path)
    assert sample is not None and sample.id == "smile/5"
    roles = [m["role"] for m in sample.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert sample.messages[1]["content"] == supporter_opener("zh")
    assert sample.messages[2]["content"] == "我最近很焦虑。\n睡不着。"
    assert "问题：我最近很焦虑。" in sample.messages[0]["content"]
    path.write_text(json.dumps([{"role": "therapist", "content": "x"}]), encoding="utf-8")
    with pytest.raises(UserError, match=r"5\.json \[record 0\]: role should be client/counselor"):
        read_smile_file(path)


def test_empty_mixture_names_the_key(tmp_path: Path):
    cfg = mixture(
        {
            "root": str(tmp_path),
            "sources": {"roleplay": {"enabled": True}},
            "roleplay_ratio": 0.3,
            "languages": ["en", "zh"],
            "val_fraction": 0.05,
            "seed": 42,
        }
    )
    with pytest.raises(ConfigError, match=r"config `data\.sources`"):
        build_samples(cfg)
    with pytest.raises(ConfigError, match=r"config `data\.languages`"):
        build_samples({**cfg, "languages": ["fr"]})
    with pytest.raises(ConfigError, match=r"config `data\.roleplay_ratio`"):
        build_samples({**cfg, "roleplay_ratio": -1})
    # a key left out is named, never given a value here (conf/data/esc_role.yaml has them all)
    with pytest.raises(ConfigError, match=r"config `data\.hold_out_card_echo`: is not set"):
        build_samples({k: v for k, v in cfg.items() if k != "hold_out_card_echo"})
    no_switch = {**cfg, "sources": {**cfg["sources"], "smile": {"max_samples": None, "cards": None}}}
    with pytest.raises(ConfigError, match=r"config `data\.sources\.smile\.enabled`: is not set"):
        build_samples(no_switch)
