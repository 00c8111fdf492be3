"""The ESC-RANK recipe: one answer-token rule for training and judging, the answer digit alone
learned, class-balanced sampling and the weighted loss. Offline, CPU, small tokenizers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from esc.chat.answer_tokens import answer_probabilities, answer_tokens
from esc.errors import ConfigError
from esc.esc_role_samples.tokenize import encode_chat
from esc.scoring.judge import DIGITS

CHATML = (
    "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tokenizer(tmp_path: Path, kind: str, template: str = CHATML):
    """A small fast tokenizer: `bytelevel` (GPT-2 style, like SmolLM2's), `metaspace` (a word-start
    marker before every piece, as sentencepiece tokenizers add one), or `split_digits` (no digit
    is a token of its own after the prompt: every answer is two tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<|im_start|>", "<|im_end|>"]
    corpus = ["Score? user assistant system 0 1 2 3 4 00 11 22 33 44 hello world"] * 5
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    if kind == "bytelevel":
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        bpe.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
        bpe.decoder = decoders.Metaspace(prepend_scheme="always")
        alphabet = []
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=specials, initial_alphabet=alphabet, show_progress=False
        ),
    )
    if kind == "split_digits":  # "n" alone is ▁ + n: no single-token answer at all
        vocab = {t: i for t, i in bpe.get_vocab().items() if not (t.startswith("▁") and t[1:].isdigit())}
        merges = []
        model = models.BPE(vocab=vocab, merges=merges, unk_token="<unk>")
        bpe.model = model
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="<unk>", pad_token="<unk>", eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"], chat_template=template,
    )  # fmt: skip


def test_answer_tokens_merge_what_training_learns_and_what_follows_the_prompt(tmp_path: Path) -> None:
    tok = tokenizer(tmp_path, "metaspace")
    answers = answer_tokens(tok, DIGITS)
    for answer, ids, learned in zip(DIGITS, answers.ids, answers.learned, strict=True):
        # training encodes the answer as its own piece: the word-start marker comes with it
        chat = [{"role": "user", "content": "Score?"}, {"role": "assistant", "content": answer}]
        encoded = encode_chat(tok, chat, 10_000, learn_end_of_turn=False)
        assert [t for t in encoded["labels"] if t != -100] == [learned]
        assert tok.convert_ids_to_tokens(learned) == "▁" + answer
        # the judge reads the position after the generation prompt, where the whole string's encoding
        # has the bare digit: without the merge it would read one id while training taught another
        assert tok.convert_ids_to_tokens(ids[0]) == answer and learned in ids
    flat = answers.flat()
    assert len(flat) == len(set(flat))  # no id spells two answers
    probs = torch.zeros((1, len(tok)))
    probs[0, answers.ids[3][0]] = 0.25
    probs[0, answers.ids[3][-1]] += 0.5
    assert answer_probabilities(probs, answers)[0].tolist() == pytest.approx([0, 0, 0, 0.75, 0])


def test_answer_tokens_of_a_bytelevel_tokenizer_include_the_spaced_digit(tmp_path: Path) -> None:
    tok = tokenizer(tmp_path, "bytelevel")
    answers = answer_tokens(tok, DIGITS)
    for answer, ids, learned in zip(DIGITS, answers.ids, answers.learned, strict=True):
        assert tok.convert_ids_to_tokens(learned) == answer  # no marker: training learns the digit itself
        assert any(tok.convert_ids_to_tokens(i) == "Ġ" + answer for i in ids)  # " 3" merged in


def test_a_tokenizer_without_single_token_answers_stops_with_one_line(tmp_path: Path) -> None:
    tok = tokenizer(tmp_path, "split_digits")
    with pytest.raises(ConfigError, match=r"judge.model.*the answer '0' is .* after the generation prompt"):
        answer_tokens(tok, DIGITS)


def test_only_the_answer_digit_is_learned(tmp_path: Path) -> None:
    tok = tokenizer(tmp_path, "bytelevel")
    chat = [{"role": "user", "content": "Score?"}, {"role": "assistant", "content": "3"}]
    both = [t for t in encode_chat(tok, chat, 10_000)["labels"] if t != -100]
    digit = [t for t in encode_chat(tok, chat, 10_000, learn_end_of_turn=False)["labels"] if t != -100]
    assert tok.convert_ids_to_tokens(both) == ["3", "<|im_end|>"]
    assert tok.convert_ids_to_tokens(digit) == ["3"]
    # the unlearned end-of-turn still closes the turn: truncation keeps or drops the turn whole
    full = encode_chat(tok, chat, 10_000, learn_end_of_turn=False)
    assert tok.convert_ids_to_tokens(full["input_ids"][-2:]) == ["<|im_end|>", "Ċ"]


# --- class balance -------------------------------------------------------------------------------------


def test_class_weights_balance_each_dimension() -> None:
    from esc.annotate.human_scores import Annotation
    from esc.judge_training.data import class_weights

    anns = [
        Annotation(f"d{i}", "en", (("user", "x"),), "empathy", s, "a")
        for i, s in enumerate([4] * 8 + [2] * 2)
    ]
    anns += [Annotation(f"e{i}", "en", (("user", "x"),), "overall", 3, "a") for i in range(5)]
    full = class_weights(anns, 1.0)
    assert full[("empathy", 4)] * 8 == pytest.approx(full[("empathy", 2)] * 2)  # each score drawn equally
    assert np.mean([full[(a.dimension, a.score)] for a in anns if a.dimension == "empathy"]) == pytest.approx(
        1
    )
    assert full[("overall", 3)] == pytest.approx(1)
    assert set(class_weights(anns, 0.0).values()) == {1.0}


def test_weighted_sampler_draws_in_proportion_and_resumes() -> None:
    from esc.train.datamodule import ResumableSampler

    data = list(range(4))
    weights = [1.0, 1.0, 1.0, 5.0]
    sampler = ResumableSampler(data, seed=3, weights=weights)
    counts = np.zeros(4)
    for epoch in range(400):
        sampler.set_epoch(epoch)
        for i in sampler:
            counts[i] += 1
    assert counts[3] / counts.sum() == pytest.approx(5 / 8, abs=0.03)
    sampler.set_epoch(7)
    whole = list(sampler)
    assert whole == list(sampler)  # the same epoch, the same draws
    sampler.skip = 2
    assert list(sampler) == whole[2:]  # a resumed epoch continues where it stopped
    two = [list(ResumableSampler(data, num_replicas=2, rank=r, seed=3, weights=weights)) for r in (0, 1)]
    assert len(two[0]) == len(two[1]) == 2


def test_weighted_loss_is_each_samples_loss_times_its_weight() -> None:
    from esc.train.module import LoRACausalLM

    module = LoRACausalLM(model={}, peft={}, optimizer=torch.optim.SGD, weighted_loss=True)
    logits = torch.randn(2, 4, 7)
    module.forward = lambda **_: SimpleNamespace(logits=logits)
    labels = torch.tensor([[-100, -100, 3, -100], [-100, 5, -100, -100]])
    batch = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "attention_mask": torch.ones(2, 4),
             "labels": labels, "weight": torch.tensor([1.0, 3.0])}  # fmt: skip
    first = torch.nn.functional.cross_entropy(logits[0, 1][None], torch.tensor([3]))
    second = torch.nn.functional.cross_entropy(logits[1, 0][None], torch.tensor([5]))
    assert module._weighted_step(batch).item() == pytest.approx(((first + 3 * second) / 4).item(), rel=1e-5)


def test_rank_samples_carry_weights_and_learn_the_digit_only(tmp_path: Path) -> None:
    from esc.judge_training.data import build_rank_samples

    rows = []
    for i in range(40):
        score = 4 if i % 5 else 1
        dialogue = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        rows.append({"dialogue_id": f"d{i}", "language": "en", "dimension": "empathy", "score": score,
                     "annotator": "a", "dialogue": dialogue})  # fmt: skip
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train, val = build_rank_samples(
        {
            "annotations": str(path),
            "prompt": "official",
            "balance_power": 1.0,
            "seed": 1,
            "split": [7, 1, 2],
            "dimensions": "all",
            "languages": ["en", "zh"],
            "chat_default_system": None,
        }  # fmt: skip
    )
    assert all(not s.learn_end_of_turn for s in train + val)
    by_score = {}
    for s in train:
        by_score.setdefault(s.messages[-1]["content"], set()).add(round(s.weight, 6))
    assert len(by_score["1"]) == len(by_score["4"]) == 1 and next(iter(by_score["1"])) > next(
        iter(by_score["4"])
    )
    assert all(s.weight == 1.0 for s in val)
