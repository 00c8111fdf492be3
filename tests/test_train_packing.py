"""Packing keeps samples apart: positions restart and no token attends to another sample."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from esc.errors import ConfigError
from esc.esc_role_samples.tokenize import IGNORE_INDEX, collate_packed, encode_chat, pack, packed_samples
from esc.train.module import check_packing_support
from tests.helpers import FAST_TRAIN, compose, requires_data, run_entry

CHATS = [
    [
        {"role": "system", "content": "You are a student worried about exams."},
        {"role": "user", "content": "Hello, how are you feeling today?"},
        {"role": "assistant", "content": "Not great, I have three exams next week."},
        {"role": "user", "content": "That sounds like a lot."},
        {"role": "assistant", "content": "It is, and I cannot sleep."},
    ],
    [
        {"role": "system", "content": "You are a nurse after a long shift."},
        {"role": "user", "content": "What is on your mind?"},
        {"role": "assistant", "content": "My manager keeps adding night shifts."},
    ],
    [
        {"role": "system", "content": "You miss your family abroad."},
        {"role": "user", "content": "Tell me more."},
        {"role": "assistant", "content": "I have not seen them for two years and I feel alone."},
    ],
]


@pytest.fixture(scope="module")
def tiny():
    from esc.models.loading import ModelSettings, load_tokenizer, resolve_model_path

    cfg = compose(["model=tiny"]).model
    return resolve_model_path(model := ModelSettings.of(cfg)), load_tokenizer(model)


@pytest.fixture(scope="module")
def encoded(tiny):
    import datasets

    _, tokenizer = tiny
    rows = [encode_chat(tokenizer, chat, max_length=512) for chat in CHATS]
    assert all(rows)
    return datasets.Dataset.from_list(rows)


def summed_loss(model, **inputs) -> float:
    """Sum of the per-token losses (HF's loss is their mean over the predicted label tokens)."""
    out = model(**inputs)
    predicted = (inputs["labels"][:, 1:] != IGNORE_INDEX).sum()
    return float(out.loss) * int(predicted)


def test_pack_restarts_positions_at_every_sample(encoded) -> None:
    packed = pack(encoded, max_length=4096)
    assert len(packed) == 1
    row = packed[0]
    lengths = [len(ex["input_ids"]) for ex in encoded]
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    assert [i for i, p in enumerate(row["position_ids"]) if p == 0] == starts
    assert all(row["labels"][s] == IGNORE_INDEX for s in starts)
    assert [s["input_ids"] for s in packed_samples(row)] == [ex["input_ids"] for ex in encoded]
    # a row never exceeds max_length (unless one sample alone does)
    small = pack(encoded, max_length=max(lengths))
    assert len(small) == 3 and all(len(r["input_ids"]) <= max(lengths) for r in small)


def test_collate_packed_flattens_a_batch_into_one_sequence(encoded) -> None:
    rows = list(pack(encoded, max_length=max(len(ex["input_ids"]) for ex in encoded)))
    batch = collate_packed(rows)
    total = sum(len(ex["input_ids"]) for ex in encoded)
    assert set(batch) == {"input_ids", "labels", "position_ids"}  # no attention mask: packed format
    assert batch["input_ids"].shape == batch["position_ids"].shape == (1, total)
    assert int((batch["position_ids"] == 0).sum()) == 3


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_loss_equals_the_samples_losses_apart(tiny, encoded, attention: str) -> None:
    from transformers import AutoModelForCausalLM

    path, _ = tiny
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attention).eval()
    check_packing_support(model)
    with torch.no_grad():
        apart = 0.0
        for ex in encoded:
            ids = torch.tensor([ex["input_ids"]])
            labels = torch.tensor([[IGNORE_INDEX, *ex["labels"][1:]]])
            apart += summed_loss(model, input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
        batch = collate_packed(list(pack(encoded, max_length=4096)))
        packed = summed_loss(model, **batch, use_cache=False)
        # the same row without the restarts: samples attend across boundaries and the sum changes
        leaking = summed_loss(
            model,
            input_ids=batch["input_ids"],
            attention_mask=torch.ones_like(batch["input_ids"]),
            labels=batch["labels"],
        )
    assert packed == pytest.approx(apart, rel=1e-5)
    # a random tiny model barely uses context, but enough to tell the two apart at this tolerance
    assert abs(leaking - apart) > 1e-4 * abs(apart), "the control should differ: is the test blind?"


def test_the_training_step_keeps_packed_samples_apart(tiny, encoded) -> None:
    """LoRACausalLM's own step on a packed batch: the loss of the samples trained one by one."""
    from esc.train.module import LoRACausalLM

    model_cfg = compose(["model=tiny"]).model
    module = LoRACausalLM(
        model=model_cfg,
        peft={"r": 4, "lora_alpha": 8, "lora_dropout": 0.0},
        optimizer=lambda params: torch.optim.AdamW(params),
    )
    module.configure_model()
    module.eval()
    with torch.no_grad():
        apart = 0.0
        for ex in encoded:
            batch = {key: torch.tensor([ex[key]]) for key in ("input_ids", "attention_mask", "labels")}
            batch["labels"][0, 0] = IGNORE_INDEX
            apart += float(module._step(batch)) * int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
        packed_batch = collate_packed(list(pack(encoded, max_length=4096)))
        packed = float(module._step(packed_batch)) * int(
            (packed_batch["labels"][:, 1:] != IGNORE_INDEX).sum()
        )
    assert packed == pytest.approx(apart, rel=1e-4)


def test_packing_is_refused_for_models_with_their_own_code(tiny) -> None:
    from transformers import AutoModelForCausalLM

    path, _ = tiny
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa")
    remote = type(
        "InternLM2ForCausalLM", (torch.nn.Module,), {"__module__": "transformers_modules.internlm2"}
    )()
    remote.config = SimpleNamespace(_attn_implementation="eager")
    with pytest.raises(ConfigError, match="`datamodule.packing`.*datamodule.packing=false"):
        check_packing_support(remote)
    model.config._attn_implementation = "paged|sdpa"
    with pytest.raises(ConfigError, match="not known to keep packed samples apart"):
        check_packing_support(model)


@requires_data
def test_packed_training_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_entry(
        "train.py",
        [
            "+exp=train/esc_role",
            *FAST_TRAIN,
            "datamodule.packing=true",
            "trainer.max_steps=2",
            f"hydra.run.dir={out}",
        ],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "packing=True" in result.stdout + result.stderr
    assert json.loads((out / "manifest.json").read_text())["global_step"] == 2
