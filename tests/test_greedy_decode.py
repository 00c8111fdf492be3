"""`greedy_decode` (issue 25) gives `generate`'s greedy tokens while rows leave the batch, and the
keys and values it hands back for the prefix cache are those of a fresh prefill."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from esc.chat.backends.greedy_decode import greedy_decode, processors_for, unsupported_fields
from esc.chat.backends.hf import HFBackend
from esc.chat.base import GenerationSettings
from tests.helpers import compose
from tests.test_chat_backends import CONVERSATIONS

MAX_NEW = 24


@pytest.fixture(scope="module")
def tiny():
    backend = HFBackend.of(model=compose(["model=tiny"]).model, batch_size=8, device="cpu", prefix_cache_gb=0)
    backend.load()
    yield backend
    backend.close()


def batch(backend: HFBackend) -> tuple[torch.Tensor, torch.Tensor]:
    prompts = [backend.prompt_ids(c) for c in CONVERSATIONS]
    width = max(len(p) for p in prompts)
    pad = backend.tokenizer.pad_token_id
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    return ids, mask


def reference(backend: HFBackend, ids, mask, eos: set[int], gen_fields: dict) -> list[list[int]]:
    """`generate`'s greedy tokens per row, cut after the first end-of-sequence token."""
    gen = backend._generation_config(GenerationSettings(max_new_tokens=MAX_NEW, temperature=0.0))
    for key, value in gen_fields.items():
        setattr(gen, key, value)
    gen.eos_token_id = sorted(eos) or None
    with torch.inference_mode():
        out = backend._model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
    rows = []
    for new in out[:, ids.shape[1] :].tolist():
        stop = next((j for j, t in enumerate(new) if t in eos), None)
        rows.append(new if stop is None else new[: stop + 1])
    return rows


def frequent_tokens(backend: HFBackend, ids, mask) -> set[int]:
    """Tokens that show up in some replies and not others, so that as end-of-sequence tokens they
    end rows at different steps (the random tiny model never ends a reply on its own)."""
    plain = reference(backend, ids, mask, set(), {})
    early = {t for row in plain for t in row[:3]}
    counts = Counter(t for row in plain for t in set(row) - early)
    shared = [t for t, n in counts.most_common() if 1 < n < len(plain)]
    return set(shared[:2])


@pytest.mark.parametrize("fields", [{}, {"no_repeat_ngram_size": 3}, {"repetition_penalty": 1.3}])
def test_greedy_decode_gives_generates_tokens_as_rows_end_and_leave(tiny, fields):
    ids, mask = batch(tiny)
    eos = frequent_tokens(tiny, ids, mask)
    expected = reference(tiny, ids, mask, eos, fields)
    lengths = sorted(len(r) for r in expected)
    assert lengths[0] < lengths[-1], lengths  # rows really end at different steps
    gen = tiny._generation_config(GenerationSettings(max_new_tokens=MAX_NEW, temperature=0.0))
    for key, value in fields.items():
        setattr(gen, key, value)
    decoded = greedy_decode(
        tiny._model, ids, mask, None, 0, MAX_NEW, eos, tiny.tokenizer.pad_token_id, processors_for(gen)
    )
    assert [row.tokens for row in decoded] == expected


def test_greedy_decode_hands_back_the_kv_of_a_fresh_prefill(tiny):
    """After rows left the batch and padding columns were cut, each row's keys and values are those
    of its prompt and reply (all but the last token) prefilled alone."""
    ids, mask = batch(tiny)
    eos = frequent_tokens(tiny, ids, mask)
    gen = tiny._generation_config(GenerationSettings(max_new_tokens=MAX_NEW, temperature=0.0))
    decoded = greedy_decode(
        tiny._model, ids, mask, None, 0, MAX_NEW, eos, tiny.tokenizer.pad_token_id, processors_for(gen),
        keep_kv=True,
    )  # fmt: skip
    for row, out in enumerate(decoded):
        prompt = ids[row][mask[row] == 1].tolist()
        read = [*prompt, *out.tokens[:-1]]
        with torch.inference_mode():
            alone = tiny._model(input_ids=torch.tensor([read]), use_cache=True).past_key_values
        assert len(out.layers) == len(alone.layers)
        for (keys, values), layer in zip(out.layers, alone.layers, strict=True):
            assert keys.shape == layer.keys[0].shape
            torch.testing.assert_close(keys, layer.keys[0], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(values, layer.values[0], rtol=1e-4, atol=1e-5)


def test_fields_the_loop_does_not_honour_send_the_call_to_generate(tiny):
    """A processor the loop does not build is never skipped: the call goes to `generate`."""
    settings = GenerationSettings(max_new_tokens=MAX_NEW, temperature=0.0)
    gen = tiny._generation_config(settings)
    assert unsupported_fields(gen) == []
    assert tiny._fast_greedy(settings, gen)
    gen.min_new_tokens = 5
    assert unsupported_fields(gen) == ["min_new_tokens"]
    assert not tiny._fast_greedy(settings, gen)
    assert not tiny._fast_greedy(GenerationSettings(max_new_tokens=8, temperature=0.0, stop=["\n"]), gen)


@pytest.mark.parametrize(
    "fields", [{"no_repeat_ngram_size": 3}, {"no_repeat_ngram_size": 2, "repetition_penalty": 1.5}]
)
def test_kept_prefixes_and_greedy_decode_give_the_replies_of_batch_one_generate(fields):
    """Three turns of six conversations, batched with kept prefixes (a row is [pad][prefix][pad][new
    tokens], the processors must see it joined) against `generate` one conversation at a time on
    the whole prompt (the official loop's shape): the same replies."""
    cfg = compose(["model=tiny"]).model
    kept = HFBackend.of(model=cfg, batch_size=4, device="cpu", prefix_cache_gb=1, generation_config=fields)
    alone = HFBackend.of(
        model=cfg, batch_size=1, device="cpu", prefix_cache_gb=0, generation_config=fields, decode="generate"
    )
    settings = GenerationSettings(max_new_tokens=16, temperature=0.0)
    chats = [list(c) for c in CONVERSATIONS]
    try:
        for turn in range(3):
            a, b = kept.generate(chats, settings), alone.generate(chats, settings)
            assert [r.text for r in a] == [r.text for r in b], turn
            assert [r.completion_tokens for r in a] == [r.completion_tokens for r in b]
            for chat, reply in zip(chats, a, strict=True):
                chat += [
                    {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"so {turn}"},
                ]
        assert kept._prefix.hits >= 2 * len(chats)
        assert kept.identity()["decode"] == "auto" and alone.identity()["decode"] == "generate"
    finally:
        kept.close()
        alone.close()


def test_the_processors_see_a_rows_real_tokens_joined(tiny):
    """The contract behind the test above, checked directly: a row laid out with padding inside it
    (as a kept prefix leaves it) reaches the processors as its real tokens, joined, then its reply."""
    from transformers import LogitsProcessor, LogitsProcessorList

    seen: list[list[list[int]]] = []

    class Spy(LogitsProcessor):
        def __call__(self, input_ids, scores):
            seen.append(input_ids.tolist())
            return scores

    pad = tiny.tokenizer.pad_token_id
    ids = torch.tensor([[pad, 11, 12, pad, 13, 14], [21, 22, 23, 24, 25, 26]])
    mask = (ids != pad).long()
    decoded = greedy_decode(tiny._model, ids, mask, None, 0, 3, set(), pad, LogitsProcessorList([Spy()]))
    assert [call[0] for call in seen[:1]] == [[11, 12, 13, 14]]  # one row at a time, no padding inside
    assert seen[1] == [[21, 22, 23, 24, 25, 26]]
    assert seen[2][0] == [11, 12, 13, 14, decoded[0].tokens[0]]
