"""Judges beyond the base model: per-dimension LoRA adapters in one batch, and API judges
(strict parsing, log-probabilities, failures) against canned replies and the fake OpenAI server."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from esc.chat.answer_tokens import AnswerTokens
from esc.chat.answers import stated_answer_probabilities as answer_distribution
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, register_backend
from esc.chat.settings import BackendSettings
from esc.scoring.judge import FAILED, INVALID, VALID, ScoreItem
from esc.scoring.judges import build_judge, judge_settings
from esc.scoring.rubrics import DIMENSION_KEYS
from tests.helpers import compose, conf_node, requires_data

LINES = (("assistant", "Hello."), ("user", "I can't sleep before exams."), ("assistant", "That sounds hard."))


@register_backend("queued_replies")
class QueuedBackend(ChatBackend):
    """Replies with the given texts in turn (and log-probabilities when given), for API-judge tests."""

    runs_in_process = True  # a fake model: nothing is billed

    class Settings(BackendSettings):
        replies: list[dict[str, Any]]

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        self.replies = settings.replies
        self.sent: list[list[Message]] = []
        self.settings: GenerationSettings | None = None

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        self.settings = settings
        out = []
        for messages in batch:
            self.sent.append(list(messages))
            canned = self.replies[(len(self.sent) - 1) % len(self.replies)]
            out.append(Reply(**{"finish_reason": "stop", **canned}))
        return out

    def identity(self) -> dict[str, Any]:
        return {"kind": "queued_replies"}


def logprobs(token: str, top: dict[str, float]) -> list[dict[str, Any]]:
    return [{"token": token, "top": {t: math.log(p) for t, p in top.items()}}]


def api_judge(replies: list[dict[str, Any]], prompt: str = "paper"):
    return build_judge(judge_settings({"kind": "api", "name": "canned", "prompt": prompt,
                        "backend": {"kind": "queued_replies", "replies": replies}}))  # fmt: skip


def test_api_judge_parses_strictly_and_keeps_log_probabilities() -> None:
    judge = api_judge([
        {"text": "3", "logprobs": logprobs("3", {"3": 0.6, "2": 0.2, " 4": 0.1, "Score": 0.1})},
        {"text": "**2**"},                      # no log-probabilities: the stated score only
        {"text": "I'd give 2 or 3"},            # invalid, reply kept
        {"text": "", "finish_reason": "error", "error": "APITimeoutError: timed out"},  # failed
    ])  # fmt: skip
    items = [ScoreItem(f"d{i}", "empathy", "en", LINES) for i in range(4)]
    valid, plain, invalid, failed = judge.judge(items)
    assert valid.status == VALID and valid.score == 3 and valid.answer_mass == pytest.approx(0.9)
    assert valid.probs == pytest.approx([0, 0, 0.2 / 0.9, 0.6 / 0.9, 0.1 / 0.9], abs=1e-6)
    assert plain.status == VALID and plain.score == 2 and plain.probs is None and plain.raw == "**2**"
    assert invalid.status == INVALID and invalid.score is None and invalid.raw == "I'd give 2 or 3"
    assert failed.status == FAILED and "timed out" in failed.error
    backend = judge.backend
    assert backend.settings.temperature == 0 and backend.settings.top_logprobs == 20
    system, user = backend.sent[0]
    assert (
        system["content"] == "You are a helpful assistant!" and "give your empathic score" in user["content"]
    )


def test_answer_distribution_reads_the_token_that_states_the_score() -> None:
    last = {" 4": math.log(0.5), "3": math.log(0.25), "x": math.log(0.25)}
    steps = [{"token": "Score", "top": {"Score": -0.1}}, {"token": ":", "top": {":": 0.0}},
             {"token": " 4", "top": last}]  # fmt: skip
    assert answer_distribution(steps, 4) == pytest.approx([0, 0, 0, 0.25, 0.5])
    assert answer_distribution(steps, 2) is None and answer_distribution(None, 3) is None


@requires_data
def test_api_judge_through_the_fake_openai_server(tmp_path: Path) -> None:
    """The real openai backend: log-probabilities come back; the tiny model's text is no score."""
    from esc.chat.backends.hf import HFBackend
    from tests.fake_openai_server import FakeOpenAIServer

    hf = HFBackend.of(model=compose(["model=tiny"]).model, device="cpu")
    with FakeOpenAIServer(hf) as server:
        judge = build_judge(judge_settings({
            "kind": "api", "name": "served", "prompt": "official", "max_new_tokens": 4, "top_logprobs": 5,
            "backend": {"kind": "openai", "model": "tiny", "base_url": server.url, "api_key_env": None,
                        "max_retries": 0, "timeout_s": 60},
        }))  # fmt: skip
        server.inject(["500"], match="DIE")
        items = [ScoreItem("a", "fluency", "en", LINES), ScoreItem("b", "overall", "en", (("user", "DIE"),))]
        ok, dead = judge.judge(items)
        judge.close()
    assert ok.status == INVALID and ok.raw and "single score" in ok.error
    assert dead.status == FAILED and "500" in dead.error
    sent = server.received[0]["body"]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5 and sent["temperature"] == 0


@pytest.fixture(scope="module")
def adapter_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seven random (non-zero) LoRA adapters on the tiny model, in the per_dimension layout."""
    import torch
    from peft import LoraConfig, get_peft_model

    from esc.models.loading import ModelSettings, load_causal_lm

    root = tmp_path_factory.mktemp("adapters")
    cfg = compose(["model=tiny"]).model
    for i, key in enumerate(DIMENSION_KEYS):
        torch.manual_seed(i)
        base = load_causal_lm(ModelSettings.of(cfg))
        model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                               init_lora_weights=False))  # fmt: skip
        model.save_pretrained(root / key)
    return root


@requires_data
def test_per_dimension_adapters_share_one_batch(adapter_root: Path) -> None:
    """A batch mixing all dimensions gives each item what its own adapter alone gives."""
    model = compose(["model=tiny"]).model
    judge = build_judge(judge_settings({"kind": "local", "name": "rank", "model": model, "batch_size": 16,
                         "adapters": {"layout": "per_dimension", "root": str(adapter_root)}}))  # fmt: skip
    judge.check_ready()
    items = [ScoreItem(f"d{i}", key, "en", LINES[: 1 + i % 3]) for i in range(2) for key in DIMENSION_KEYS]
    mixed = judge.judge(items)
    base = build_judge(judge_settings({"kind": "local", "name": "base", "model": model})).judge(items)
    for item, got, plain in zip(items, mixed, base, strict=True):
        only = {"layout": "single", "root": str(adapter_root / item.dimension)}
        single = build_judge(
            judge_settings({"kind": "local", "name": "one", "model": model, "adapters": only})
        )
        assert got.probs == pytest.approx(single.judge([item])[0].probs, abs=1e-5)
        assert got.probs != pytest.approx(plain.probs, abs=1e-3)  # the adapter matters
    files = judge.identity()["adapters"]["files"]
    assert len(files) == 14 and files["empathy/en"]["path"].endswith("/empathy")
    assert len({f["sha256"] for f in files.values()}) == 7


@requires_data
def test_the_shared_rubric_prefix_is_run_once_and_changes_no_score(adapter_root: Path, monkeypatch) -> None:
    """Items of one dimension share the rubric before the dialogue: it is prefilled once per group,
    and every item gets the distribution it gets judged alone (no shared prefix then)."""
    from esc.chat.backends.hf import HFBackend

    model = compose(["model=tiny"]).model
    judge = build_judge(judge_settings({"kind": "local", "name": "rank", "model": model, "batch_size": 3,
                         "adapters": {"layout": "per_dimension", "root": str(adapter_root)}}))  # fmt: skip
    prefills: list[int] = []
    real = HFBackend._prefill
    monkeypatch.setattr(
        HFBackend, "_prefill", lambda self, ids, kwargs: prefills.append(len(ids)) or real(self, ids, kwargs)
    )
    items = [
        ScoreItem(f"d{i}", key, "en", LINES[: 1 + i % 3]) for i in range(5) for key in ("empathy", "fluency")
    ]
    grouped = judge.judge(items)
    assert len(prefills) == 2 and min(prefills) > 100  # one rubric prefix per dimension, long
    for item, got in zip(items, grouped, strict=True):
        assert got.probs == pytest.approx(judge.judge([item])[0].probs, abs=1e-5)


def test_official_layout_maps_to_the_released_folders(tmp_path: Path) -> None:
    from esc.scoring.judges.local import Adapters, adapter_paths

    (tmp_path / "ESC-RANK").mkdir()
    paths = adapter_paths(Adapters.model_validate({"layout": "official", "root": str(tmp_path / "ESC-RANK")}))
    assert paths[("empathy", "en")] == tmp_path / "ESC-RANK" / "empathic_en"
    assert paths[("skill", "zh")] == tmp_path / "ESC-RANK" / "tech"
    assert paths[("humanoid", "en")].name == "human_en" and len(paths) == 14


def test_adapters_of_some_dimensions_only(tmp_path: Path) -> None:
    """`judge.adapters.dimensions` limits the per-dimension folders to those trained; without it the
    first missing folder is a one-line config error naming the key, before any model loads."""
    from esc.errors import ConfigError
    from esc.scoring.judges.local import Adapters, LocalJudge, adapter_paths

    for dim in ("empathy", "overall"):
        (tmp_path / dim).mkdir()
        (tmp_path / dim / "adapter_config.json").write_text("{}")
        (tmp_path / dim / "adapter_model.safetensors").write_bytes(b"")
    some = {"layout": "per_dimension", "root": str(tmp_path), "dimensions": ["empathy", "overall"]}
    assert {d for d, _ in adapter_paths(Adapters.model_validate(some))} == {"empathy", "overall"}
    every = LocalJudge.of(
        name="j",
        model=conf_node("model"),
        adapters={"layout": "per_dimension", "root": str(tmp_path)},
    )
    with pytest.raises(
        ConfigError,
        match=r"config `judge.adapters`: .*/(fluency|diversity|suggestion|humanoid|skill) does not exist",
    ):
        every.check_ready()


def test_a_local_judge_names_its_engine_key_when_it_is_not_hf_or_vllm(monkeypatch) -> None:
    """`judge.engine` is hf or vllm; `engine: vllm` where vLLM is not installed stops at check_ready
    with one line naming `judge.engine`, before any model loads."""
    import builtins

    from esc.errors import ConfigError, UserError
    from esc.scoring.judges.local import LocalJudge

    with pytest.raises(ConfigError, match=r'config `judge.engine`: must be \'hf\' or \'vllm\', got "tpu"'):
        LocalJudge.of(name="j", model=conf_node("model"), engine="tpu")
    real_import = builtins.__import__

    def no_vllm(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError("No module named 'vllm'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_vllm)
    judge = LocalJudge.of(name="j", model=conf_node("model"), engine="vllm", vllm={"max_model_len": 512})
    with pytest.raises(UserError, match=r"^config `judge.engine`: vllm is not installed"):
        judge.check_ready()


@requires_data
def test_hf_backend_reads_answer_distributions_with_per_request_adapters(adapter_root: Path) -> None:
    """One call may give each prompt its own adapter (or none: the base model); each prompt gets what
    it gets in a call of its own, an adapter that cannot load fails only its prompts, and generation
    afterwards still uses the backend's own weights."""
    from esc.chat.backends.hf import HFBackend
    from esc.chat.base import GenerationSettings

    backend = HFBackend.of(model=compose(["model=tiny"]).model, device="cpu", batch_size=2, prefix_cache_gb=0)
    chats = [[{"role": "user", "content": text}] for text in ("I feel alone.", "Work is too much.", "Hi")]
    greedy = GenerationSettings(max_new_tokens=6)
    before = [r.text for r in backend.generate(chats, greedy)]
    prompts = [backend.prompt_ids(chat) for chat in chats]

    ids05 = AnswerTokens(tuple("abcdef"), tuple((i,) for i in range(6)), tuple(range(6)))  # ids 0-5

    base = backend.answer_distribution(prompts, ids05)
    empathy, fluency = str(adapter_root / "empathy"), str(adapter_root / "fluency")
    alone = {path: backend.answer_distribution(prompts, ids05, [path] * 3) for path in (empathy, fluency)}
    mixed = backend.answer_distribution(
        prompts * 3, ids05, [empathy] * 3 + [None] * 3 + [fluency, str(adapter_root / "missing"), fluency]
    )

    def close(a, b) -> bool:
        return bool(np.allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=0))

    assert close(mixed[:3], alone[empathy]) and close(mixed[3:6], base)
    assert close(mixed[6], alone[fluency][0]) and close(mixed[8], alone[fluency][2])
    assert isinstance(mixed[7], Exception) and "missing" in str(mixed[7])
    assert not close(alone[empathy], base)  # the adapter does change the distribution
    assert [r.text for r in backend.generate(chats, greedy)] == before
