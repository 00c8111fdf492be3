"""Any chat backend as judge (an OpenAI-compatible endpoint: GPT-4, ChatGPT, a vLLM server; or vLLM
in this process, ``backend.kind: vllm``).

The judge prompt goes out as a chat; the reply must state one score (strict parsing,
`esc.chat.answers`): "Score: 3", "**3**" and "3/4" count, "2 or 3" or a missing number make the
judgment invalid, with the reply kept. Where the endpoint returns log-probabilities (OpenAI and
vLLM do with ``logprobs``), the probabilities of "0".."4" at the token that states the score are
kept as well: the expected score and the five probabilities, as the local judge gives them.

``constrain: true`` makes the backend answer with exactly one of "0".."4" (constrained decoding:
``backend.kind: vllm``; a vLLM *server* takes ``backend.extra_body: {structured_outputs: {choice:
[...]}}`` instead). ``adapters`` (the layouts of the local judge: ESC-RANK's adapter per dimension)
sends each item with its dimension's LoRA adapter, on one base model (``backend.kind: vllm``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from pydantic import Field, model_validator

from esc.chat.base import ChatBackend, GenerationSettings, check_features
from esc.chat.batch.backend import batch_problem, with_batches
from esc.chat.build import Backend, build_backend
from esc.chat.cache import CacheSettings, with_cache
from esc.chat.closed import read_reply, strict_choice
from esc.chat.settings import BackendSettings
from esc.chat.usage import Usage
from esc.config_rules import relation
from esc.models.internlm2 import native_internlm2
from esc.models.loading import ModelSettings, adapter_weights
from esc.models.revision import adapter_hash
from esc.scoring.judge import (
    DIGITS,
    INVALID,
    Judge,
    JudgeAnswer,
    JudgeSettings,
    PromptStyleName,
    ScoreItem,
    register_judge,
)
from esc.scoring.judges.local import Adapters, adapter_paths
from esc.scoring.rubrics import prompt_style

# backends that load the weights themselves: a local InternLM2 folder is given as its converted copy
IN_PROCESS = ("vllm", "hf")


@register_judge("api")
class APIJudge(Judge):
    """A chat backend (``esc.chat``) asked for a score in words.

    Args:
        name: label of the judge in outputs.
        backend: an ``esc.chat`` backend node (``kind: openai``, model, base_url, api_key_env...).
        prompt: prompt style (``paper``: Figures 12-19, the GPT-4 prompts; or ``official``).
        max_new_tokens: reply length; a score needs a few tokens.
        top_logprobs: log-probabilities to ask for (0: none; OpenAI allows up to 20).
        constrain: the answer must be exactly one of "0".."4" (backends with constrained decoding).
        adapters: ``{layout, root}`` as for the local judge: one LoRA adapter per (dimension,
            language), sent with each request (backends that switch adapters per request).
        cache: the request cache node of the run (reruns replay identical requests).
        batch: send the requests through the provider's batch API (OpenAI's Batch API, Anthropic's
            Message Batches: half the price, answers within 24 h; `esc.chat.batch`). The batches are
            recorded in `batch_folder`; a rerun, or a run after a kill, polls them again.
        batch_folder: where the judges' ledgers go, each in a folder named after its judge
            (conf/judge/: the run folder's ``batches/``, so ``OUT/batches/gpt4/``).
        batch_poll_s: seconds between polls.
        batch_wait_s: how long one run waits for its batches; past it their judgments are failed
            and a rerun collects them.
        default_system: the system turn sent when the prompt style has none; null: the backend
            model's ``chat_default_system`` (vLLM in this process with InternLM2), if it has one.
    """

    class Settings(JudgeSettings):
        """An `api` judge node (conf/judge/gpt4.yaml, claude.yaml, esc_rank_vllm.yaml, ...)."""

        backend: Backend
        prompt: PromptStyleName = Field("paper", description="paper or official")
        max_new_tokens: int = Field(8, ge=1, description="a score needs a few tokens")
        top_logprobs: int = Field(20, ge=0, le=20, description="0: none; OpenAI allows up to 20")
        constrain: bool = Field(False, description="exactly one of 0-4: constrained decoding")
        adapters: Adapters | None = None
        cache: CacheSettings | None = Field(None, description="the run's request cache")
        default_system: str | None = None
        batch: bool = Field(False, description="the provider's batch API at half the price; docs/scoring.md")
        batch_folder: str | None = Field(None, min_length=1, description="where the ledgers go")
        batch_poll_s: float = Field(30.0, gt=0, description="seconds between polls")
        batch_wait_s: float = Field(86_400.0, ge=0, description="0: submit and leave; a rerun collects")

        @model_validator(mode="after")
        def _ledger(self) -> Self:
            if self.batch and not self.batch_folder:
                raise relation(
                    "batch_folder", "is empty: name the folder the batch ledger goes in (batch: true)"
                )
            problem = batch_problem(self.backend) if self.batch else None
            if problem:
                raise relation("batch", problem)
            return self

    def __init__(self, settings: Settings, config_key: str = "judge") -> None:
        self.config_key = config_key
        self.name = name = settings.name
        self.prompt = settings.prompt
        model = getattr(settings.backend, "model", None)  # an API's model is a name, a local one a node
        model = model if isinstance(model, ModelSettings) else None
        self.default_system = settings.default_system or (model.chat_default_system if model else None)
        self.style = prompt_style(self.prompt)
        paths = adapter_paths(settings.adapters)
        self._configured = {key: str(path) for key, path in paths.items()}  # what the identity hashes
        self.loaded_as: str | None = None
        backend: BackendSettings = settings.backend
        if backend.kind in IN_PROCESS and model is not None:
            native = native_internlm2(model, paths)  # a local InternLM2 folder: its converted copy
            if native is not None:
                model, paths = native
                backend = backend.model_copy(update={"model": model})
                self.loaded_as = "LlamaForCausalLM converted from InternLM2 (esc/models/internlm2.py)"
        built = build_backend(backend, key=f"{self.config_key}.backend")
        if settings.batch:
            key = f"{self.config_key}.batch"
            folder = Path(str(settings.batch_folder)) / name  # a ledger each
            built = self._batched = with_batches(
                built, folder, settings.batch_poll_s, settings.batch_wait_s, key=key
            )
        self.batch = settings.batch
        self.backend: ChatBackend = with_cache(built, settings.cache)
        self.constrain = settings.constrain
        self.settings = GenerationSettings(
            max_new_tokens=1 if self.constrain else settings.max_new_tokens,
            temperature=0.0,
            top_logprobs=settings.top_logprobs,
            choices=DIGITS if self.constrain else (),
        )
        self.adapters = {key: str(path) for key, path in paths.items()}  # as loaded
        self._usage = Usage()  # every reply of this run: what the manifest reports as the judge's cost

    @property
    def scores_by_adapter(self) -> bool:
        return bool(self.adapters)

    def check_ready(self) -> None:
        """Key first (no request when its variable is unset), then one cheap request: an unreachable
        endpoint, a rejected key or a model the server does not serve fails with one line, before
        any work. Loads no local model."""
        wanted = dataclasses.replace(self.settings, adapter="any" if self.adapters else None)
        check_features(self.backend, wanted)  # constrain / adapters need a backend that has them
        for path in set(self.adapters.values()):
            adapter_weights(path, "judge.adapters")
        self.backend.expect_adapters(sorted(set(self.adapters.values())))  # vLLM: start with LoRA on
        self.backend.check_ready()

    def identity(self) -> dict[str, Any]:
        identity = {
            "kind": "api",
            "name": self.name,
            "backend": self.backend.identity(),
            "prompt": self.prompt_identity,
            "default_system": self.default_system,
            "settings": self.settings.to_dict(),
            "method": "strict parse (+ log-probabilities where returned)",
        }
        if self._configured:
            identity["adapters"] = {
                f"{dim}/{lang}": adapter_hash(Path(path))
                for (dim, lang), path in sorted(self._configured.items())
            }
        if self.loaded_as:
            identity["loaded_as"] = self.loaded_as
        return identity

    def _groups(
        self, items: Sequence[ScoreItem], judgments: list[JudgeAnswer | None]
    ) -> dict[tuple[str | None, tuple[str, ...]], list[int]]:
        """The items by the call they go in (one per adapter and answer set); an item no adapter
        covers is judged invalid in `judgments` instead."""
        groups: dict[tuple[str | None, tuple[str, ...]], list[int]] = {}
        for k, item in enumerate(items):
            path = self.adapters.get((item.dimension, item.language)) if self.adapters else None
            if self.adapters and path is None:  # a dimension the adapters do not cover
                judgments[k] = JudgeAnswer(INVALID, error=f"no adapter for {item.dimension}")
                continue
            groups.setdefault((path, item.choices), []).append(k)
        return groups

    def _call(self, path: str | None, choices: tuple[str, ...]) -> GenerationSettings:
        return dataclasses.replace(self.settings, adapter=path, choices=choices if self.constrain else ())

    def submit(self, items: Sequence[ScoreItem]) -> None:
        """With ``batch: true``: every request of `items` sent now as batches (those the request cache
        or a recorded batch covers are not), so that `judge` only collects."""
        if not self.batch:
            return
        groups = self._groups(items, [None] * len(items))
        for (path, choices), members in groups.items():
            prompts = [items[k].prompt(self.style, self.default_system) for k in members]
            self.backend.submit(prompts, self._call(path, choices))

    def judge(self, items: Sequence[ScoreItem]) -> list[JudgeAnswer]:
        judgments: list[JudgeAnswer | None] = [None] * len(items)
        for (path, choices), members in self._groups(items, judgments).items():
            settings = self._call(path, choices)
            for k, judgment in zip(members, self._judge([items[k] for k in members], settings), strict=True):
                judgments[k] = judgment
        return [j for j in judgments if j is not None]

    def _judge(self, items: Sequence[ScoreItem], settings: GenerationSettings) -> list[JudgeAnswer]:
        batch = [it.prompt(self.style, self.default_system) for it in items]
        choices = items[0].choices
        wanted = "single score 0-4" if choices == DIGITS else f"single answer of {'/'.join(choices)}"
        replies = self.backend.generate(batch, settings)
        for reply in replies:
            self._usage.add(reply)
        return [
            JudgeAnswer.from_closed(read_reply(reply, choices, strict_choice, wanted)) for reply in replies
        ]

    def usage(self) -> dict[str, Any] | None:
        """The replies' requests, tokens and cost (at the batch price with ``batch: true``), and the
        batches: the ledger, those this run submitted and those whose replies it collected."""
        report = self._usage.report(self.backend.price)
        if self.batch:
            report["batches"] = {
                "ledger": str(self._batched.ledger.path),
                "submitted": self._batched.submitted,
                "collected": sorted(self._batched.collected),
            }
        return report

    def close(self) -> None:
        self.backend.close()
