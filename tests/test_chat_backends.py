"""Chat backends (esc/chat/backends/) and the request cache (esc/chat/cache.py), offline on CPU.

The hf backend runs the embedded tiny model; the openai and baichuan_npc backends talk to
tests/fake_openai_server.py, which serves the same tiny model and injects faults (429, 500,
timeouts...) that the openai SDK's built-in retries must absorb. Faulty responses carry
``retry-after-ms: 10`` and the timeout test waits 1 s, so the retry tests take seconds, not minutes.
Other requests get a generous timeout: the server answers one request at a time, and on a busy
machine the last of a batch may wait several seconds (a client timeout would add a retry).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from esc.chat.answer_tokens import AnswerTokens
from esc.chat.backends.baichuan_npc import BaichuanNPCBackend
from esc.chat.backends.hf import HFBackend
from esc.chat.backends.openai_compat import OpenAIBackend
from esc.chat.base import GenerationSettings, Reply
from esc.chat.build import backend_settings, build_backend
from esc.chat.cache import CachedBackend, CacheSettings, RequestCache, request_key, with_cache
from esc.config_rules import load_section
from esc.errors import ConfigError, UserError
from tests.fake_openai_server import FakeOpenAIServer
from tests.helpers import compose, conf_node, requires_data

pytestmark = requires_data  # the tiny model's tokenizer is trained on the data of `make data`

GREEDY = GenerationSettings(max_new_tokens=16)
KEY_ENV = "ESC_TEST_FAKE_API_KEY"
SECRET = "sk-test-5ecret-do-not-leak-0123456789"

TEXTS = [
    "Hi",
    "I have been feeling very anxious about my exams and I cannot sleep at night, what should I do?",
    "你好，我最近工作压力很大。",
    "My dog died last week and I miss him so much.",
    "mixed 中文 and English: 工作压力大 (work stress).",
    "ok",
]


def conversation(text: str, system: str | None = None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": text}]


CONVERSATIONS = [conversation(t) for t in TEXTS]
CONVERSATIONS[3] = conversation(TEXTS[3], system="You are a caring friend.")
CONVERSATIONS[5] = [
    {"role": "user", "content": "Hello, I'm your personal assistant."},
    {"role": "assistant", "content": "I lost my job."},
    {"role": "user", "content": "I'm sorry to hear that."},
]


@pytest.fixture(scope="module")
def tiny_cfg():
    return compose(["model=tiny"]).model


@pytest.fixture(scope="module")
def hf(tiny_cfg):
    backend = HFBackend.of(model=tiny_cfg, batch_size=8, device="cpu")
    backend.check_ready()
    backend.load()
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def server(hf):
    with FakeOpenAIServer(hf, timeout_sleep_s=3.0) as srv:
        yield srv


@pytest.fixture()
def fresh_server(server):
    server.reset()
    yield server
    server.reset()


def api(server: FakeOpenAIServer, **kwargs) -> OpenAIBackend:
    kwargs = {"model": "tiny", "api_key_env": None, "timeout_s": 30.0, "max_retries": 2, **kwargs}
    return OpenAIBackend.of(base_url=server.url, **kwargs)


# --- hf ----------------------------------------------------------------------------------------


def test_hf_batch_composition_does_not_change_replies(hf):
    hf.batch_size = 6
    try:
        batched = hf.generate(CONVERSATIONS, GREEDY)
        hf.batch_size = 1
        alone = hf.generate(CONVERSATIONS, GREEDY)
    finally:
        hf.batch_size = 8
    assert [r.text for r in batched] == [r.text for r in alone]
    assert [r.completion_tokens for r in batched] == [r.completion_tokens for r in alone]
    assert all(r.ok and r.text for r in batched)
    # replies come back in the caller's order although chunks are sorted by prompt length
    assert [r.prompt_tokens for r in batched] == [hf.count_tokens(c) for c in CONVERSATIONS]
    assert len({r.prompt_tokens for r in batched}) > 3  # the prompts really differ in length


def test_hf_kept_prefixes_give_the_replies_of_a_full_prefill(tiny_cfg):
    """Three turns of six conversations of different lengths, with and without the prefix cache:
    the same greedy replies, while the cached backend prefills only each turn's new tokens."""
    plain = HFBackend.of(model=tiny_cfg, batch_size=4, device="cpu", prefix_cache_gb=0)
    kept = HFBackend.of(model=tiny_cfg, batch_size=4, device="cpu", prefix_cache_gb=1)
    system = "You play a worried person. " * 8  # a long shared start: only whole conversations may match
    chats = [[{"role": "system", "content": system}, *c] for c in CONVERSATIONS]
    try:
        for turn in range(3):
            full, reused = plain.generate(chats, GREEDY), kept.generate(chats, GREEDY)
            assert [r.text for r in reused] == [r.text for r in full], turn
            assert [r.completion_tokens for r in reused] == [r.completion_tokens for r in full]
            assert [r.prompt_tokens for r in reused] == [r.prompt_tokens for r in full]
            for chat, reply in zip(chats, full, strict=True):
                chat += [
                    {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"go on {turn}"},
                ]
        assert kept._prefix.hits >= 2 * len(chats)  # turns 2 and 3 found their conversation
        assert kept._prefix.reused_tokens > 2 * len(chats) * 30
        assert len(kept._prefix) == len(chats)  # one entry per conversation: a turn replaces the last
    finally:
        plain.close()
        kept.close()


def test_hf_out_of_memory_while_joining_kept_prefixes_splits_the_call(tiny_cfg, monkeypatch):
    """Running out of memory while the kept prefixes are put together for a batch is the back-off's
    to handle (split the call), not a model whose cache cannot be joined: the prefix cache stays on."""
    import torch

    kept = HFBackend.of(model=tiny_cfg, batch_size=8, device="cpu", prefix_cache_gb=1)
    chats = [list(c) for c in CONVERSATIONS]
    real = HFBackend._batched_past

    def small_gpu(self, reuse, *args, **kwargs):
        if len(reuse) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(self, reuse, *args, **kwargs)

    try:
        for reply, chat in zip(kept.generate(chats, GREEDY), chats, strict=True):
            chat += [{"role": "assistant", "content": reply.text}, {"role": "user", "content": "go on"}]
        monkeypatch.setattr(HFBackend, "_batched_past", small_gpu)
        replies = kept.generate(chats, GREEDY)
        assert all(r.ok for r in replies)
        assert kept._prefix is not None and kept.batch_size <= 2
    finally:
        kept.close()


@pytest.mark.parametrize("broken", ["_row_kv", "_batched_past"])
def test_hf_prefix_cache_a_model_cannot_use_is_switched_off_not_failed(tiny_cfg, monkeypatch, broken):
    """A model whose cache cannot be split per conversation (or put back together), e.g. a
    remote-code model's own cache type (decoded with `generate`): the prefix cache turns itself off
    and every reply stands."""
    plain = HFBackend.of(model=tiny_cfg, batch_size=4, device="cpu", prefix_cache_gb=0, decode="generate")
    kept = HFBackend.of(model=tiny_cfg, batch_size=4, device="cpu", prefix_cache_gb=1, decode="generate")

    def unusable(*args, **kwargs):
        raise AttributeError("'tuple' object has no attribute 'layers'")

    chats = [list(c) for c in CONVERSATIONS]
    try:
        for turn in range(2):
            if turn == 1 or broken == "_row_kv":  # `_batched_past` is first needed on turn 2
                monkeypatch.setattr(kept, broken, unusable)
            full, reused = plain.generate(chats, GREEDY), kept.generate(chats, GREEDY)
            assert all(r.ok for r in reused) and [r.text for r in reused] == [r.text for r in full]
            for chat, reply in zip(chats, full, strict=True):
                chat += [{"role": "assistant", "content": reply.text}, {"role": "user", "content": "go on"}]
        assert kept._prefix is None
    finally:
        plain.close()
        kept.close()


def test_hf_out_of_memory_splits_the_batch_before_anything_fails(hf, monkeypatch):
    """A chunk that does not fit is halved until it does (a GPU's OOM, simulated above 2 rows);
    the replies equal an unconstrained run, and later chunks keep the size that fit."""
    import torch

    plain = hf.generate(CONVERSATIONS, GREEDY)
    real = HFBackend._generate_chunk
    sizes: list[int] = []

    def small_gpu(self, prompts, settings, gen):
        sizes.append(len(prompts))
        if len(prompts) > 2 or any(len(p) > 10**6 for p in prompts):
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(self, prompts, settings, gen)

    monkeypatch.setattr(HFBackend, "_generate_chunk", small_gpu)
    hf.batch_size = 8
    try:
        replies = hf.generate(CONVERSATIONS, GREEDY)
        assert [r.text for r in replies] == [r.text for r in plain] and all(r.ok for r in replies)
        assert hf.batch_size == 2 and max(sizes[1:]) <= 4
        # once 2 rows fit, no larger chunk is tried again (on an H100 the second halves of 32 and 16
        # were tried whole after 4 had fitted: 9 failed calls where 4 were needed)
        first_fit = next(i for i, n in enumerate(sizes) if n <= 2)
        assert max(sizes[first_fit:]) <= 2, sizes
    finally:
        hf.batch_size = 8


def test_hf_out_of_memory_frees_the_failed_call_before_retrying(hf, monkeypatch):
    """What the failed call allocated is gone when its halves run: on an H100 under a memory cap the
    retry ran inside the exception handler, whose traceback kept the 64-row call's tensors alive,
    and every half down to one row ran out of memory too (docs/gpu.md)."""
    import weakref

    import torch

    real = HFBackend._generate_chunk
    failed: list[weakref.ref] = []
    alive_at_retry: list[int] = []

    def small_gpu(self, prompts, settings, gen):
        if len(prompts) > 2:
            held = torch.empty(len(prompts), 1024)  # the failed call's buffers, alive in its frame
            failed.append(weakref.ref(held))
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        alive_at_retry.append(sum(ref() is not None for ref in failed))
        return real(self, prompts, settings, gen)

    monkeypatch.setattr(HFBackend, "_generate_chunk", small_gpu)
    hf.batch_size = 8
    try:
        replies = hf.generate(CONVERSATIONS, GREEDY)
        assert all(r.ok for r in replies) and failed
        assert alive_at_retry and set(alive_at_retry) == {0}, alive_at_retry
    finally:
        hf.batch_size = 8


def test_hf_answer_distributions_split_on_out_of_memory_too(hf, monkeypatch):
    """The local judge's reads share generation's back-off: a batch that does not fit is halved, the
    distributions equal an unconstrained run's."""
    import torch

    from esc.chat.backends import hf as hf_module

    prompts = [hf.prompt_ids(c) for c in CONVERSATIONS]

    ids_0_to_3 = AnswerTokens(tuple("abcd"), tuple((i,) for i in range(4)), tuple(range(4)))  # ids 0-3

    plain = hf.answer_distribution(prompts, ids_0_to_3)
    real = hf_module.next_token_answers

    def small_gpu(model, device, pad_id, rows, *args, **kwargs):
        if len(rows) > 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(model, device, pad_id, rows, *args, **kwargs)

    monkeypatch.setattr(hf_module, "next_token_answers", small_gpu)
    hf.batch_size = 8
    try:
        split = hf.answer_distribution(prompts, ids_0_to_3)
        assert hf.batch_size == 1 and not any(isinstance(d, Exception) for d in split)
        assert np.allclose(np.asarray(split), np.asarray(plain), rtol=1e-5, atol=0)
    finally:
        hf.batch_size = 8


def test_hf_a_gpu_asked_for_is_never_a_cpu_run(tiny_cfg):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(ConfigError, match="backend.device.*no CUDA GPU is visible"):
        HFBackend.of(model=tiny_cfg, device="cuda").check_ready()
    with pytest.raises(ConfigError, match="backend.batch_size"):
        HFBackend.of(model=tiny_cfg, batch_size=0)
    auto = HFBackend.of(model=tiny_cfg, batch_size="auto", device="auto")
    auto.load()
    try:
        assert auto.batch_size == 256 and auto._cpu_budget > 0  # auto on a CPU: a cap and a memory budget
    finally:
        auto.close()


def test_auto_batch_size_on_a_gpu_counts_the_kv_cache_and_the_prefix_budget(tiny_cfg, monkeypatch):
    """`batch_size: auto` on a GPU (its free memory simulated): rows of the model's real KV size fill
    80% of what the prefix cache's budget leaves free."""
    import torch

    from esc.chat.backends.hf import auto_batch_size, kv_bytes_per_token
    from esc.models.loading import ModelSettings, load_causal_lm

    model = load_causal_lm(ModelSettings.of(tiny_cfg))
    gpu = torch.device("cuda", 0)
    row = 2 * kv_bytes_per_token(model.config, 4) * 2048  # fp32 keys and values of 2,048 tokens, x2
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * row, 100 * row))
    assert auto_batch_size(model, gpu, context_window=2048) == 8  # 80% of 10 rows
    assert auto_batch_size(model, gpu, context_window=2048, reserved_bytes=5 * row) == 4
    assert auto_batch_size(model, gpu, context_window=2048, reserved_bytes=50 * row) == 1  # never 0
    assert auto_batch_size(model, torch.device("cpu"), context_window=2048) == 256  # a cap: see below


def test_auto_batch_size_on_a_cpu_sizes_each_call_by_its_longest_row(tiny_cfg, monkeypatch):
    """`batch_size: auto` on a CPU: a call's rows are as many as the memory budget holds at its
    longest prompt plus the reply (large waves where memory allows), in chunks longest first, and
    the replies are those of a fixed batch size."""
    from esc.chat.backends import hf as hf_module
    from esc.chat.backends.hf import kv_bytes_per_token, rows_that_fit

    assert rows_that_fit(budget=1500, kv_per_token=1, tokens=100, cap=256) == 10
    assert rows_that_fit(budget=1500, kv_per_token=1, tokens=10_000, cap=256) == 1  # never 0
    assert rows_that_fit(budget=10**9, kv_per_token=1, tokens=100, cap=256) == 256
    auto = HFBackend.of(model=tiny_cfg, batch_size="auto", device="cpu", prefix_cache_gb=0)
    fixed = HFBackend.of(model=tiny_cfg, batch_size=8, device="cpu", prefix_cache_gb=0)
    try:
        auto.load()
        per_token = kv_bytes_per_token(auto._model.config, 4)
        longest = max(auto.count_tokens(c) for c in CONVERSATIONS)
        budget = int(1.5 * per_token * (longest + GREEDY.max_new_tokens) * 2.5)  # 2.5 rows of the longest
        auto._cpu_budget = budget
        calls = []
        chunk = hf_module.HFBackend._generate_chunk
        monkeypatch.setattr(
            auto, "_generate_chunk", lambda rows, *a: calls.append(len(rows)) or chunk(auto, rows, *a)
        )
        replies = auto.generate(CONVERSATIONS, GREEDY)
        assert calls[0] == 2 and sum(calls) == len(CONVERSATIONS) and max(calls) > 2  # shorter rows: more
        assert [r.text for r in replies] == [r.text for r in fixed.generate(CONVERSATIONS, GREEDY)]
    finally:
        auto.close()
        fixed.close()


def test_hf_greedy_is_deterministic_and_seeded_sampling_reproducible(hf):
    first, second = hf.generate(CONVERSATIONS[:3], GREEDY), hf.generate(CONVERSATIONS[:3], GREEDY)
    assert [r.text for r in first] == [r.text for r in second]
    sampled = GenerationSettings(max_new_tokens=16, temperature=1.0, seed=7)
    one, two = hf.generate(CONVERSATIONS[:3], sampled), hf.generate(CONVERSATIONS[:3], sampled)
    assert [r.text for r in one] == [r.text for r in two]


def test_hf_length_finish_reason_and_token_counts(hf):
    replies = hf.generate(CONVERSATIONS, GenerationSettings(max_new_tokens=5))
    assert any(r.finish_reason == "length" for r in replies)
    for reply in replies:
        assert 1 <= reply.completion_tokens <= 5
        assert (reply.finish_reason == "length") == (reply.completion_tokens == 5)
        assert reply.latency_s > 0 and not reply.cached


def test_hf_stop_strings_end_and_cut_the_reply(hf):
    settings = GenerationSettings(max_new_tokens=24)
    full = hf.generate(CONVERSATIONS, settings)
    # a plain word the model produces after its first few characters, to stop at
    candidates = [
        (i, m.group(0))
        for i, reply in enumerate(full)
        for m in re.finditer(r"[a-z]{4,}", reply.text)
        if m.start() > 0 and reply.text.count(m.group(0)) >= 1
    ]
    assert candidates, [r.text for r in full]
    index, word = candidates[0]
    stopped = hf.generate([CONVERSATIONS[index]], GenerationSettings(max_new_tokens=24, stop=(word,)))[0]
    expected = full[index].text[: full[index].text.index(word)].strip()
    assert stopped.text == expected
    assert stopped.finish_reason == "stop"
    assert stopped.completion_tokens < full[index].completion_tokens


def test_hf_errors_become_error_replies(hf, monkeypatch):
    bad = [{"role": "user", "content": None}]  # the chat template cannot render it
    replies = hf.generate([CONVERSATIONS[0], bad], GREEDY)
    assert replies[0].ok and not replies[1].ok
    assert replies[1].finish_reason == "error" and replies[1].error

    def broken(*_args, **_kwargs):
        raise RuntimeError("CUDA out of memory\nTried to allocate 2 GiB")

    monkeypatch.setattr(hf._model, "forward", broken)  # greedy_decode and generate both call it
    replies = hf.generate(CONVERSATIONS[:3], GREEDY)
    assert [r.finish_reason for r in replies] == ["error"] * 3
    assert replies[0].error == "RuntimeError: CUDA out of memory Tried to allocate 2 GiB"


def test_hf_identity_context_window_and_adapter(hf, tiny_cfg, tmp_path: Path):
    from peft import LoraConfig, get_peft_model

    from esc.models.loading import ModelSettings, load_causal_lm
    from esc.models.tiny import TinySpec

    identity = hf.identity()
    assert identity["kind"] == "hf"
    assert identity["name_or_path"] == f"tiny-{TinySpec(**dict(tiny_cfg.tiny)).key()}"
    assert identity["adapter"] is None and identity["dtype"] == "float32"
    assert hf.context_window == tiny_cfg.tiny.max_position_embeddings
    assert HFBackend.of(model={**dict(tiny_cfg), "context_window": 512}).context_window == 512

    # a freshly initialised LoRA adapter is a no-op (B = 0): same replies, other identity
    adapter_dir = tmp_path / "adapter"
    peft_model = get_peft_model(
        load_causal_lm(ModelSettings.of(tiny_cfg)), LoraConfig(r=2, target_modules=["q_proj", "v_proj"])
    )
    peft_model.save_pretrained(adapter_dir)
    with_adapter = HFBackend.of(model=tiny_cfg, adapter=str(adapter_dir), device="cpu")
    assert [r.text for r in with_adapter.generate(CONVERSATIONS[:2], GREEDY)] == [
        r.text for r in hf.generate(CONVERSATIONS[:2], GREEDY)
    ]
    first = with_adapter.identity()
    assert first["adapter"] == str(adapter_dir) and len(first["adapter_sha256"]) == 64
    with_adapter.close()
    # a retrained adapter (new weights in the same directory) must not hit the old cache entries
    (adapter_dir / "adapter_model.safetensors").write_bytes(b"retrained")
    assert (
        HFBackend.of(model=tiny_cfg, adapter=str(adapter_dir)).identity()["adapter_sha256"]
        != first["adapter_sha256"]
    )
    with pytest.raises(ConfigError, match="backend.adapter"):
        HFBackend.of(model=tiny_cfg, adapter=str(tmp_path / "missing")).check_ready()


def test_request_key_reads_a_per_request_adapter_by_its_content(tmp_path: Path):
    """Judges pass one adapter per request (`settings.adapter`): an adapter retrained into the same
    folder gets new cache keys, a copy of it elsewhere the same ones."""
    import os
    import shutil

    folder = tmp_path / "empathy"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"r": 8}')
    (folder / "adapter_model.safetensors").write_bytes(b"weights v1")
    messages = [{"role": "user", "content": "Score this."}]

    def key(path: Path) -> str:
        return request_key({"kind": "vllm"}, messages, GenerationSettings(adapter=str(path)))

    first = key(folder)
    shutil.copytree(folder, tmp_path / "copy")
    assert key(tmp_path / "copy") == first
    (folder / "adapter_model.safetensors").write_bytes(b"weights v2")
    os.utime(folder / "adapter_model.safetensors", ns=(1, 1))  # a new stamp even on a coarse clock
    assert key(folder) != first


def test_hf_check_ready_loads_nothing_and_checks_local_paths(tiny_cfg, tmp_path: Path):
    backend = HFBackend.of(model=tiny_cfg, device="cpu")
    backend.check_ready()
    assert backend._model is None  # the weights wait for load() or the first generation
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(ConfigError, match="backend.model.name_or_path.*no config.json"):  # the settings
            HFBackend.of(model={**tiny_cfg, "tiny": None, "name_or_path": str(bad)})
    HFBackend.of(
        model={**tiny_cfg, "tiny": None, "name_or_path": "org/some-hub-model"}
    ).check_ready()  # a hub id
    with pytest.raises(ConfigError, match="backend.model.name_or_path.*is empty"):  # none named
        HFBackend.of(model={**tiny_cfg, "tiny": None}).check_ready()


def test_hf_identity_names_the_resolved_revision(hf, tiny_cfg):
    import transformers

    from esc.models.revision import directory_hash
    from esc.models.tiny import TinySpec, ensure_tiny_model

    identity = hf.identity()
    on_disk = directory_hash(ensure_tiny_model(TinySpec(**dict(tiny_cfg.tiny))))
    assert identity["revision"] == on_disk and identity["revision_source"] == "content"
    assert identity["configured_revision"] is None
    assert identity["code_version"] == {"HFBackend": HFBackend.CODE_VERSION}
    assert identity["packages"] == {"transformers": transformers.__version__}
    assert hf.cache_identity() == identity
    # another tiny spec is another model on disk: another revision (it is not built: unresolved)
    other = HFBackend.of(model={**dict(tiny_cfg), "tiny": {**dict(tiny_cfg.tiny), "seed": 99991}})
    assert other.identity()["revision"] is None and other.identity()["revision_source"] == "unresolved"


def test_hf_generation_config_overrides_apply_and_enter_the_identity(hf, tiny_cfg):
    """`backend.generation_config` reaches transformers (no repeated 3-token sequence in a reply)."""
    long = GenerationSettings(max_new_tokens=48)
    plain_replies = hf.generate(CONVERSATIONS[:3], long)
    no_repeat = HFBackend.of(model=tiny_cfg, device="cpu", generation_config={"no_repeat_ngram_size": 3})
    replies = no_repeat.generate(CONVERSATIONS[:3], long)
    assert no_repeat._generation_config(long).no_repeat_ngram_size == 3
    assert [r.text for r in replies] != [r.text for r in plain_replies]  # the random model loops
    assert no_repeat.identity()["generation_config"] == {"no_repeat_ngram_size": 3}
    assert "generation_config" not in hf.identity()
    no_repeat.close()
    for bad in ({"max_new_tokens": 5}, {"no_such_field": 1}):
        with pytest.raises(ConfigError, match=f"backend.generation_config.{next(iter(bad))}"):
            HFBackend.of(model=tiny_cfg, generation_config=bad)


# --- openai against the fake server ------------------------------------------------------------


def test_openai_backend_matches_hf_replies(hf, fresh_server):
    backend = api(fresh_server)
    try:
        via_api = backend.generate(CONVERSATIONS, GREEDY)
    finally:
        backend.close()
    direct = hf.generate(CONVERSATIONS, GREEDY)
    assert fresh_server.requests == len(CONVERSATIONS)
    for got, want in zip(via_api, direct, strict=True):
        assert (got.text, got.finish_reason) == (want.text, want.finish_reason)
        assert (got.prompt_tokens, got.completion_tokens) == (want.prompt_tokens, want.completion_tokens)
    sent = fresh_server.received[0]["body"]
    assert (
        sent["temperature"] == 0 and sent["max_tokens"] == GREEDY.max_new_tokens and sent["model"] == "tiny"
    )


@pytest.mark.parametrize("fault", ["429", "500", "timeout", "drop"])
def test_openai_retries_absorb_transient_faults(fault, fresh_server):
    backend = api(fresh_server, timeout_s=1.0)  # the server's "timeout" fault answers after 3 s
    try:
        fresh_server.inject([fault])
        reply = backend.generate([CONVERSATIONS[0]], GREEDY)[0]
    finally:
        backend.close()
    assert reply.ok, reply.error
    assert fresh_server.requests == 2  # the failed attempt and the SDK's retry
    assert fresh_server.pending_faults() == 0


def test_openai_max_concurrency_bounds_concurrent_generate_calls(fresh_server):
    """The streaming engine calls `generate` from many threads at once, one conversation each:
    `max_concurrency` still bounds the requests in flight."""
    backend = api(fresh_server, max_concurrency=2)
    fresh_server.timeout_sleep_s = 0.3  # the "timeout" fault, shorter than the client's 30 s: a slow reply
    fresh_server.inject(["timeout"] * 6)
    try:
        calls = [threading.Thread(target=backend.generate, args=([c], GREEDY)) for c in CONVERSATIONS[:6]]
        for call in calls:
            call.start()
        for call in calls:
            call.join()
        assert fresh_server.requests == 6 and fresh_server.peak_in_flight == 2
    finally:
        fresh_server.timeout_sleep_s = 3.0
        backend.close()


def test_openai_exhausted_retries_fail_one_conversation_only(fresh_server):
    backend = api(fresh_server, max_retries=2)
    batch = [*CONVERSATIONS[:2], conversation("BOOM please"), CONVERSATIONS[2]]
    try:
        fresh_server.inject(["500"] * 3, match="BOOM")  # first try + 2 retries
        replies = backend.generate(batch, GREEDY)
    finally:
        backend.close()
    assert [r.ok for r in replies] == [True, True, False, True]
    assert replies[2].finish_reason == "error"
    assert replies[2].error.startswith("InternalServerError: Error code: 500")
    assert "\n" not in replies[2].error and len(replies[2].error) <= 300
    assert fresh_server.requests == len(batch) + 2


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("null_content", "the server's reply has no text (content null, finish_reason "),
        ("empty_content", "the server's reply has no text (content empty, finish_reason "),
        ("no_choices", "the server's answer has no choices (an empty `choices` list)"),
        ("html", "the server's answer is not JSON (it starts: '<html><body><h1>502 Bad Gateway"),
    ],
)
def test_openai_an_answer_without_text_is_a_failure_retried_never_a_reply(fault, reason, fresh_server):
    """Issue 36 (5): `content: null` was a reply of "" (a turn, then scored); no choices and an HTML page
    failed with `IndexError` and `AttributeError`, which say nothing to a user."""
    backend = api(fresh_server, max_retries=1)
    try:
        fresh_server.inject([fault] * 2)  # the first try and the retry
        [failed] = backend.generate([CONVERSATIONS[0]], GREEDY)
        fresh_server.inject([fault])  # the first try only: the retry gets the reply
        [recovered] = backend.generate([CONVERSATIONS[0]], GREEDY)
    finally:
        backend.close()
    assert failed.finish_reason == "error" and failed.text == ""
    assert failed.error.startswith(reason) and failed.error.endswith("(2 tries)")
    assert "\n" not in failed.error
    assert recovered.ok and recovered.text.strip()
    assert fresh_server.requests == 4


def test_openai_a_reply_that_echoes_the_key_is_masked(fresh_server, monkeypatch):
    """Issue 36 (1): a key in a model's reply was kept as it came, and written to every file."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    backend = api(fresh_server, api_key_env=KEY_ENV)
    try:
        fresh_server.inject(["echo_key"])
        [reply] = backend.generate([CONVERSATIONS[0]], GREEDY)
    finally:
        backend.close()
    assert fresh_server.received[0]["authorization"] == f"Bearer {SECRET}"
    assert reply.ok and "(my key is ***, Bearer ***)" in reply.text and SECRET not in reply.text


def test_openai_missing_key_fails_before_any_request(fresh_server, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    backend = api(fresh_server, api_key_env=KEY_ENV)
    with pytest.raises(ConfigError, match=KEY_ENV) as info:
        backend.check_ready()
    assert "backend.api_key_env" in str(info.value)
    with pytest.raises(UserError, match=KEY_ENV):
        backend.generate(CONVERSATIONS[:2], GREEDY)
    assert fresh_server.requests == 0 and fresh_server.model_requests == 0


def test_openai_key_never_leaks(fresh_server, monkeypatch, caplog):
    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    backend = api(fresh_server, api_key_env=KEY_ENV, max_retries=0)
    try:
        backend.check_ready()
        ok = backend.generate([CONVERSATIONS[0]], GREEDY)[0]
        fresh_server.inject(["401"])  # the server echoes the key it got in its error message
        denied = backend.generate([CONVERSATIONS[0]], GREEDY)[0]
        texts = [repr(backend), str(backend), json.dumps(backend.identity()), denied.error, caplog.text]
    finally:
        backend.close()
    assert ok.ok and not denied.ok
    assert fresh_server.received[0]["authorization"] == f"Bearer {SECRET}"  # the key was really sent
    assert denied.error.startswith("AuthenticationError: Error code: 401") and "***" in denied.error
    for text in texts:
        assert SECRET not in text


def test_openai_replies_keep_the_served_model_and_fingerprint(hf, tmp_path: Path):
    with FakeOpenAIServer(hf, response_model="tiny-2024-06-01", system_fingerprint="fp_abc") as srv:
        backend = with_cache(api(srv), cache_settings(tmp_path / "r.sqlite"))
        try:
            fresh = backend.generate(CONVERSATIONS[:2], GREEDY)
            replayed = backend.generate(CONVERSATIONS[:2], GREEDY)
        finally:
            backend.close()
    assert [(r.model, r.system_fingerprint, r.cached) for r in fresh] == [
        ("tiny-2024-06-01", "fp_abc", False)
    ] * 2
    assert [(r.model, r.system_fingerprint, r.cached) for r in replayed] == [
        ("tiny-2024-06-01", "fp_abc", True)
    ] * 2
    assert hf.generate(CONVERSATIONS[:1], GREEDY)[0].model is None  # a local model reports none


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_openai_check_ready_accepts_a_good_config_with_one_request(hf, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FakeOpenAIServer(hf, api_key=SECRET, served_models=["other", "tiny"]) as srv:
        backend = api(srv, api_key_env=KEY_ENV)
        try:
            backend.check_ready()
        finally:
            backend.close()
        assert (srv.model_requests, srv.requests) == (1, 0)


def test_openai_check_ready_names_an_unreachable_base_url(monkeypatch):
    url = f"http://127.0.0.1:{_free_port()}/v1"
    backend = OpenAIBackend.of(model="tiny", base_url=url, api_key_env=None, max_retries=5)
    try:
        with pytest.raises(UserError) as info:
            backend.check_ready()
    finally:
        backend.close()
    message = str(info.value)
    assert message.startswith(f"openai backend (model 'tiny', base_url {url}): unreachable (")
    assert "\n" not in message and "ConnectError" in message


def test_openai_check_ready_names_a_rejected_key_without_showing_it(hf, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FakeOpenAIServer(hf, api_key="sk-the-right-key-000000") as srv:  # echoes the key it got
        backend = api(srv, api_key_env=KEY_ENV, max_retries=5)
        try:
            with pytest.raises(UserError) as info:
                backend.check_ready()
        finally:
            backend.close()
        assert srv.model_requests == 1 and srv.requests == 0  # no retries
    message = str(info.value)
    assert (
        f"base_url {srv.url}" in message and f"HTTP 401: the server rejected the key in {KEY_ENV}" in message
    )
    assert SECRET not in message and "***" in message


def test_openai_check_ready_names_a_model_the_server_does_not_serve(hf):
    with FakeOpenAIServer(hf, served_models=["tiny", "tiny-chat"]) as srv:
        backend = api(srv, model="gpt-4")
        try:
            with pytest.raises(
                UserError, match=r"model 'gpt-4' is not served there \(served: tiny, tiny-chat\)"
            ):
                backend.check_ready()
        finally:
            backend.close()
        # Baichuan-NPC's model list is unverified: a warning, not an error
        npc = BaichuanNPCBackend.of(base_url=srv.url, api_key_env=None)
        try:
            npc.check_ready()
        finally:
            npc.close()


def test_openai_check_ready_without_a_model_list_probes_one_token(hf):
    with FakeOpenAIServer(hf, list_models=False, strict_models=True) as srv:
        good = api(srv)
        wrong_path = OpenAIBackend.of(model="tiny", base_url=srv.url + "/api", api_key_env=None)
        unknown = api(srv, model="gpt-4")
        try:
            good.check_ready()
            assert srv.requests == 1 and srv.received[0]["body"]["max_tokens"] == 1
            for backend in (wrong_path, unknown):
                with pytest.raises(UserError, match="HTTP 404 for both /models and /chat/completions"):
                    backend.check_ready()
        finally:
            for backend in (good, wrong_path, unknown):
                backend.close()


def test_openai_identity_masks_credentials_in_extra_body_and_base_url():
    backend = OpenAIBackend.of(
        model="m",
        base_url="http://user:pa55word-123456@127.0.0.1:9/v1",
        extra_body={"headers": {"Authorization": f"Bearer {SECRET}"}, "guided_choice": ["0", "1"]},
    )
    identity = backend.identity()
    assert identity["extra_body"] == {"headers": {"Authorization": "***"}, "guided_choice": ["0", "1"]}
    assert identity["base_url"] == "http://127.0.0.1:9/v1"
    assert SECRET not in json.dumps(identity) and "pa55word" not in json.dumps(identity)


def test_build_backend_from_config(tiny_cfg):
    assert isinstance(
        build_backend(backend_settings({"kind": "hf", "model": tiny_cfg, "batch_size": 2})), HFBackend
    )
    assert isinstance(build_backend(backend_settings({"kind": "openai", "model": "gpt-4"})), OpenAIBackend)
    assert isinstance(build_backend(backend_settings({"kind": "baichuan_npc"})), BaichuanNPCBackend)
    with pytest.raises(ConfigError, match="backend"):
        build_backend(backend_settings({"kind": "openai", "model": "gpt-4", "temprature": 0}))


# --- request cache -----------------------------------------------------------------------------


def cache_node(path: Path | None) -> dict:
    """The `cache:` node of conf/cache/default.yaml, with the cache file at `path`."""
    return conf_node("cache", {"path": None if path is None else str(path)}, config_name="evaluate")


def cache_settings(path: Path) -> CacheSettings:
    """`cache_node(path)` as validated (what `with_cache` takes)."""
    return load_section("cache", CacheSettings, cache_node(path))


def test_cache_replays_hits_without_requests(fresh_server, tmp_path: Path):
    backend = with_cache(api(fresh_server), cache_settings(tmp_path / "c" / "requests.sqlite"))
    assert isinstance(backend, CachedBackend)
    try:
        first = backend.generate(CONVERSATIONS, GREEDY)
        assert fresh_server.requests == len(CONVERSATIONS) and not any(r.cached for r in first)
        second = backend.generate(CONVERSATIONS, GREEDY)
        assert fresh_server.requests == len(CONVERSATIONS)  # all hits
        assert all(r.cached for r in second)
        for hit, miss in zip(second, first, strict=True):
            assert (hit.text, hit.finish_reason, hit.prompt_tokens, hit.completion_tokens) == (
                miss.text,
                miss.finish_reason,
                miss.prompt_tokens,
                miss.completion_tokens,
            )
        # a mixed batch: only the new conversation is sent
        mixed = backend.generate([CONVERSATIONS[0], conversation("something new")], GREEDY)
        assert [r.cached for r in mixed] == [True, False] and fresh_server.requests == len(CONVERSATIONS) + 1
        # other settings miss
        backend.generate([CONVERSATIONS[0]], GenerationSettings(max_new_tokens=8))
        assert fresh_server.requests == len(CONVERSATIONS) + 2
    finally:
        backend.close()
    # another identity (a new model snapshot label) misses the same file
    other = with_cache(
        api(fresh_server, revision="2024-06-01"), cache_settings(tmp_path / "c" / "requests.sqlite")
    )
    try:
        assert not other.generate([CONVERSATIONS[0]], GREEDY)[0].cached
    finally:
        other.close()
    assert fresh_server.requests == len(CONVERSATIONS) + 3


def test_cache_never_stores_errors(fresh_server, tmp_path: Path):
    cache = RequestCache(tmp_path / "requests.sqlite", "auto", 30.0)
    backend = CachedBackend(api(fresh_server, max_retries=0), cache)
    try:
        fresh_server.inject(["500"], match="Hi")
        first = backend.generate(CONVERSATIONS[:2], GREEDY)
        assert [r.ok for r in first] == [False, True] and len(cache) == 1
        second = backend.generate(CONVERSATIONS[:2], GREEDY)
        assert [r.ok for r in second] == [True, True] and [r.cached for r in second] == [False, True]
        assert fresh_server.requests == 3
    finally:
        backend.close()


def test_cache_forwards_the_inner_backend(hf, tmp_path: Path):
    cached = CachedBackend(hf, RequestCache(tmp_path / "r.sqlite", "auto", 30.0))
    assert cached.identity() == hf.identity()
    assert cached.context_window == hf.context_window and cached.price is hf.price
    assert cached.count_tokens(CONVERSATIONS[0]) == hf.count_tokens(CONVERSATIONS[0])
    cached.check_ready()
    off = conf_node("cache", {"enabled": False}, config_name="evaluate")
    assert with_cache(hf, load_section("cache", CacheSettings, off)) is hf
    assert with_cache(hf, None) is hf  # a primary config of one's own without a `cache:` node
    with pytest.raises(ConfigError, match="cache.path"):
        load_section("cache", CacheSettings, cache_node(None))
    with pytest.raises(ConfigError, match=r"config `cache.timeout_s`: is not set"):
        load_section("cache", CacheSettings, {"enabled": True, "path": "x", "journal_mode": "auto"})


def test_cache_file_is_shared_by_concurrent_writers(tmp_path: Path):
    """Separate connections (as separate processes have) write one file at once without losses."""
    path = tmp_path / "shared.sqlite"
    settings = GenerationSettings()

    def shard(n: int) -> None:
        cache = RequestCache(path, "auto", 30.0)
        for i in range(40):
            key = request_key({"kind": "x"}, [{"role": "user", "content": f"{n}-{i}"}], settings)
            cache.put_many([(key, Reply(text=f"{n}-{i}", finish_reason="stop"))])
        cache.close()

    threads = [threading.Thread(target=shard, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cache = RequestCache(path, "auto", 30.0)
    assert len(cache) == 160
    key = request_key({"kind": "x"}, [{"role": "user", "content": "3-39"}], settings)
    assert cache.get_many([key])[key].text == "3-39"
    assert cache._connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# --- baichuan_npc ------------------------------------------------------------------------------

PROFILE = {
    "basic_info": "Name: Lily. Age: 24. Lost her job last month and feels worthless.",
    "reply_restrict": "1. Talk like a real person. 2. Reveal your troubles gradually.",
    "opener": "I have some trouble to share.",
    "dialogue_sample": None,
}


def test_baichuan_request_shape_and_profile(fresh_server, monkeypatch):
    monkeypatch.setenv("BAICHUAN_API_KEY", SECRET)
    backend = BaichuanNPCBackend.of(base_url=fresh_server.url, timeout_s=30.0, max_retries=1)
    dialogue = [
        {"role": "system", "content": json.dumps(PROFILE, ensure_ascii=False)},
        {"role": "user", "content": "Hello, I'm your personal assistant."},
    ]
    bad = [{"role": "system", "content": "not json"}, {"role": "user", "content": "hi"}]
    try:
        replies = backend.generate([dialogue, bad, dialogue[1:]], GREEDY)
        identity = backend.identity()
    finally:
        backend.close()
    assert replies[0].ok and replies[0].text
    assert replies[1].error.startswith("ValueError: baichuan_npc: the system message is not a JSON profile")
    assert replies[2].error.startswith("ValueError: baichuan_npc: the first message must be the system")
    assert fresh_server.requests == 1  # malformed conversations are never sent
    received = fresh_server.received[0]
    body = received["body"]
    assert received["authorization"] == f"Bearer {SECRET}"
    assert body["model"] == "Baichuan-NPC-Turbo"
    assert body["character_profile"] == {k: v for k, v in PROFILE.items() if v is not None}
    assert body["messages"] == dialogue[1:]
    assert body["temperature"] == pytest.approx(0.01) and body["max_tokens"] == GREEDY.max_new_tokens
    assert body["stream"] is False and "seed" not in body
    assert identity["kind"] == "baichuan_npc" and SECRET not in json.dumps(identity)


def test_baichuan_missing_key_names_the_variable(monkeypatch, fresh_server):
    monkeypatch.delenv("BAICHUAN_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="BAICHUAN_API_KEY"):
        BaichuanNPCBackend.of(base_url=fresh_server.url).check_ready()
    assert fresh_server.requests == 0


def test_prefix_cache_longest_prefix_budget_and_replacement():
    import torch

    from esc.chat.backends.prefix_cache import MIN_REUSE, PrefixCache

    def kv(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:  # one layer, 1 head, dim 2, float32
        return [(torch.arange(n * 2.0).view(1, n, 2), -torch.arange(n * 2.0).view(1, n, 2))]

    cache = PrefixCache(max_bytes=4 * 40 * 16)  # room for 4 entries of 40 tokens (16 bytes a token)
    a, b = list(range(40)), [7] * 40
    cache.store(a, kv(40))
    cache.store(b, kv(40))
    n, key, layers = cache.lookup([*a[:30], 99, 98])
    assert n == 30 and layers[0][0].shape == (1, 30, 2)  # the longest shared prefix, cut to it
    assert cache.lookup(a)[0] == 39  # a whole match leaves one token to feed
    assert cache.lookup([5] * (MIN_REUSE + 5))[0] == 0  # nothing shared
    assert cache.lookup(a[: MIN_REUSE - 2] + [1, 2, 3])[0] == 0  # too short to be worth it
    cache.store([*a, 1, 2], kv(42), replaces=key)  # the conversation goes on: its old entry goes
    assert len(cache) == 2
    cache.store(list(range(100, 140)), kv(40))
    cache.store(list(range(200, 240)), kv(40))  # over budget: the least recently used (b) goes first
    assert cache.nbytes <= cache.max_bytes and cache.lookup(b)[0] == 0 and cache.lookup([*a, 1, 5])[0] == 41


def test_vllm_turns_lora_on_only_where_an_adapter_is_used(tmp_path: Path) -> None:
    """On vLLM's CPU build an engine with LoRA on decodes 1.5x slower with no adapter in any request
    (docs/benchmarks.md): only a backend with an adapter asks for it. Nothing here imports vLLM."""
    from omegaconf import OmegaConf

    from esc.chat.backends.vllm_inproc import VLLMBackend
    from tests.helpers import compose

    model = OmegaConf.to_container(compose(["target=tiny"], config_name="evaluate").target.backend.model)
    plain = VLLMBackend.of(model=model)._llm_args()
    assert plain["enable_lora"] is False
    adapter = Path(__file__).parent / "fixtures" / "internlm2_tiny" / "adapter_a"  # any PEFT adapter
    assert VLLMBackend.of(model=model, adapter=str(adapter))._llm_args()["enable_lora"] is True
    assert (
        VLLMBackend.of(model=model, engine_args={"enable_lora": True})._llm_args()["enable_lora"] is True
    )  # asked for
