"""vLLM in this process (``vllm.LLM``) as a chat backend: the fast path on GPUs.

A call's conversations go to ``LLM.chat`` together, and vLLM does the rest: continuous batching
(a short reply frees its slot for the next request instead of waiting for the longest), automatic
prefix caching (a dialogue's history is prefilled once, not again every turn: ESC-Eval's prompts
only grow), tensor parallelism (``tensor_parallel_size``) and LoRA adapters through ``LoRARequest``
(ESC-Role as an adapter on its base; the seven ESC-RANK adapters on one base model, chosen per
request with ``GenerationSettings.adapter``). Replies can be constrained to a set of strings
(``GenerationSettings.choices``, vLLM's structured outputs: a judge's "0".."4"), with the
log-probabilities of the likeliest tokens (``top_logprobs``, read from the model's raw output).

A local judge reads its answers here as on transformers (`answer_distribution`): the same prompt
ids (this package's tokenizer and chat template, sent as token ids) and the log-probabilities of
exactly the answers' ids from the model's whole next-token distribution (``logprob_token_ids``).
Constrained decoding is not used there: vLLM computes its log-probabilities after the grammar's
mask, renormalised over every token that spells a choice (byte-fallback tokens too), which is not
the distribution the transformers judge reads, and leaves no answer mass to check.

Two backends with the same engine settings (model, dtype, parallelism, LoRA on/off...) share one
engine: e.g. a role-player and a judge; a backend without an adapter also joins an engine of its
model started with LoRA (ESC-Role, an adapter, and its base model as target). LoRA is on only where
an adapter is used: on vLLM's CPU build it slows an engine 1.5x even with no adapter in a request.
Two different models on one GPU either split its memory (``gpu_memory_utilization``, 0.45 each by
default) or take turns (``sleep_when_idle``: an engine sleeps, weights offloaded and KV cache
freed, after each call; CUDA only, and each wake-up starts with an empty prefix cache).

vLLM is not a dependency of this package: it pins its own torch. `make test-vllm` builds a CPU
environment (``.venv-vllm``) with it and this package; on a GPU cluster, ``pip install vllm``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import math
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from esc.chat.answer_tokens import AnswerTokens
from esc.chat.backends._common import error_reply, prompt_ids
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, check_features, register_backend
from esc.chat.settings import BackendSettings, BatchSize, Price
from esc.config_rules import check_entries
from esc.errors import ConfigError
from esc.models.loading import (
    AdapterDir,
    ModelSettings,
    adapter_weights,
    load_tokenizer,
    model_label,
    require_named,
    resolve_model_path,
)
from esc.models.revision import adapter_hash, resolve_revision
from esc.settings.types import Device

log = logging.getLogger(__name__)

# `backend.generation_config` fields that SamplingParams has
SAMPLING_FIELDS = frozenset({"repetition_penalty", "top_k", "min_p", "presence_penalty", "frequency_penalty"})


def _sampling_problem(key: str, value: Any) -> str | None:
    """What vLLM cannot decode with among `backend.generation_config`'s fields; None when it can."""
    if key in SAMPLING_FIELDS:
        return None
    return (
        f"vLLM cannot decode with it (it has {', '.join(sorted(SAMPLING_FIELDS))}); set "
        "backend.generation_config=null or use backend.kind=hf"
    )


# engines by their settings, shared by the backends that ask for the same one: [engine, users]
_ENGINES: dict[str, list[Any]] = {}
_ENGINES_LOCK = threading.Lock()


def _engine_key(args: dict[str, Any]) -> str:
    """Backends whose engine arguments are equal share one engine (`_ENGINES`)."""
    return hashlib.sha256(repr(sorted(args.items())).encode()).hexdigest()


def _lora_id(path: str) -> int:
    """A stable positive id for an adapter directory (vLLM keys its LoRA cache on it)."""
    return zlib.crc32(str(Path(path).resolve()).encode()) % (2**31 - 1) + 1


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


def _answer_probabilities(output: Any, answers: AnswerTokens) -> list[float]:
    """Each answer's probability, summed over its ids, from the first generated position's
    log-probabilities (``logprob_token_ids``: every answer id is there)."""
    step = output.outputs[0].logprobs[0]
    return [sum(math.exp(step[token].logprob) for token in ids) for ids in answers.ids]


@register_backend("vllm")
class VLLMBackend(ChatBackend):
    """A model served by vLLM inside this process.

    Args:
        model: a ``conf/model``-style mapping (hub id, local directory, tiny or packaged; dtype,
            revision, trust_remote_code, chat_template, context_window).
        adapter: a LoRA adapter applied to every request (e.g. ESC-Role), or None.
        tensor_parallel_size: GPUs the model is split over.
        gpu_memory_utilization: share of GPU memory this engine may take (weights + KV cache).
        max_model_len: the longest prompt + reply; None: the model's (or ``context_window``).
        enable_prefix_caching: reuse the KV cache of shared prompt prefixes across requests.
        max_lora_rank: the largest LoRA rank the engine accepts.
        max_loras: adapters one batch may mix (the judge's seven ESC-RANK adapters).
        sleep_when_idle: put the engine to sleep after each call (CUDA), so another model can use the GPU.
        engine_args: more ``vllm.LLM`` arguments (e.g. ``{"enforce_eager": true}``).
        price: USD per 1,000 tokens (none for a local model).
        batch_size: the engine's ``max_num_seqs`` (sequences in flight), so that an ``hf`` side turns
            into a vLLM one with ``backend.kind=vllm`` alone.
        device: accepted for the same reason; vLLM runs where its build runs (a GPU, or the CPU build).
        cpu_bf16: accepted for the same reason (the hf backend's CPU bfloat16 choice); vLLM runs in
            ``model.dtype``.
        generation_config: decoding fields on top of the settings, those vLLM's ``SamplingParams``
            has (``repetition_penalty``, ``top_k``, ``min_p``, ``presence_penalty``,
            ``frequency_penalty``); others (``no_repeat_ngram_size``) are refused. The model's own
            ``generation_config.json`` gives these fields first, as transformers merges it (a
            released checkpoint's repetition_penalty stays); its temperature and top_p never apply:
            the settings decide whether to sample, and the log says once what greedy overrode.
    """

    CODE_VERSION = 1
    runs_in_process = True
    features = frozenset({"choices", "adapter"})

    class Settings(BackendSettings):
        """A `vllm` node (conf/judge/esc_rank_vllm.yaml, `backend.kind=vllm` on an hf node)."""

        model: ModelSettings
        adapter: AdapterDir | None = Field(None, description="a LoRA adapter for every request")
        tensor_parallel_size: int = Field(1, ge=1, description="GPUs the model is split over")
        gpu_memory_utilization: float = Field(0.45, gt=0, le=1, description="share of GPU memory")
        max_model_len: int | None = Field(None, ge=1, description="null: the model's")
        enable_prefix_caching: bool = True
        max_lora_rank: int = Field(64, ge=1)
        max_loras: int = Field(8, ge=1, description="adapters one batch may mix")
        sleep_when_idle: bool = False
        engine_args: dict[str, Any] | None = Field(None, description="more vllm.LLM arguments")
        price: Price | None = None
        batch_size: BatchSize | None = Field(None, description="the engine's max_num_seqs")
        device: Device = Field("auto", description="accepted as hf's: vLLM runs where its build runs")
        generation_config: Annotated[dict[str, Any] | None, check_entries(_sampling_problem)] = Field(
            None, description=f"fields of vLLM's SamplingParams: {', '.join(sorted(SAMPLING_FIELDS))}"
        )
        cpu_bf16: bool | Literal["auto"] | None = Field(None, description="accepted as hf's; no effect")

        def served_model(self) -> str | None:
            return model_label(self.model) if self.model.named else None

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        self.config_key = config_key
        self.model = settings.model
        self.generation_overrides = dict(settings.generation_config or {})
        adapter, batch_size = settings.adapter, settings.batch_size
        self.adapter = str(adapter) if adapter else None
        self._request_adapters: set[str] = set()  # per-request adapters named before the engine starts
        self.engine_settings = {
            "tensor_parallel_size": settings.tensor_parallel_size,
            "gpu_memory_utilization": settings.gpu_memory_utilization,
            "max_model_len": settings.max_model_len,
            "enable_prefix_caching": settings.enable_prefix_caching,
            "max_lora_rank": settings.max_lora_rank,
            "max_loras": settings.max_loras,
            # `auto` (the hf backend's sizing from free memory): vLLM sizes its own batches
            "max_num_seqs": batch_size if isinstance(batch_size, int) else None,
            **(settings.engine_args or {}),
        }
        self.sleep_when_idle = settings.sleep_when_idle
        self.price = settings.price
        self._engine: Any = None
        self._engine_key: str | None = None
        self._tokenizer: Any = None
        self._model_decoding: dict[str, Any] | None = None
        self._greedy_said = False
        self._identity: dict[str, Any] | None = None
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"VLLMBackend(model={self.model.name!r}, adapter={self.adapter!r})"

    # --- readiness and loading --------------------------------------------------------------------

    def check_ready(self) -> None:
        """vLLM importable and a model named (the settings checked the adapter and a local model
        directory); loads nothing."""
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise ConfigError(
                f"{self.config_key}.kind",
                "vllm is not installed in this environment: `make test-vllm` builds a CPU one "
                "(.venv-vllm); on GPUs `pip install vllm`; or use backend.kind=hf",
            ) from None
        require_named(self.model, f"{self.config_key}.model")

    def _llm_args(self) -> dict[str, Any]:

        model = self.model
        settings = dict(self.engine_settings)
        args: dict[str, Any] = {
            "model": resolve_model_path(model),
            "revision": model.revision,
            "dtype": model.dtype,  # null: left out, vLLM's own (auto)
            "trust_remote_code": model.trust_remote_code,
            "max_model_len": settings.pop("max_model_len") or model.context_window,
            # LoRA only where an adapter is used: on vLLM's CPU build an engine with LoRA on decodes
            # 1.5x slower even without one (benchmarks/profile_vllm.py --lora on,off)
            "enable_lora": bool(self.adapter or self._request_adapters),
            "enable_sleep_mode": self.sleep_when_idle,
            **settings,
        }
        return {k: v for k, v in args.items() if v is not None}

    def load(self) -> None:
        """Start the engine (or join one with the same settings), now rather than on first use."""
        with self._lock:
            if self._engine is not None:
                return
            from vllm import LLM

            args = self._llm_args()
            key = _engine_key(args)
            with _ENGINES_LOCK:
                with_lora = _engine_key({**args, "enable_lora": True})
                if key not in _ENGINES and with_lora in _ENGINES:  # no adapter: a LoRA engine serves it too
                    key = with_lora
                if key in _ENGINES:
                    _ENGINES[key][1] += 1
                    log.info("vLLM: sharing the engine of %s", args["model"])
                else:
                    log.info("vLLM: starting an engine for %s", args["model"])
                    _ENGINES[key] = [LLM(**args), 1]
                self._engine, self._engine_key = _ENGINES[key][0], key

    # --- properties -------------------------------------------------------------------------------

    @property
    def context_window(self) -> int | None:  # type: ignore[override]
        configured = self.engine_settings["max_model_len"] or self.model.context_window
        if configured:
            return int(configured)
        if self._engine is not None:
            return int(self._engine.llm_engine.model_config.max_model_len)
        return None

    def identity(self) -> dict[str, Any]:
        if self._identity is not None:
            return dict(self._identity)
        import vllm

        model = self.model
        identity: dict[str, Any] = {
            "kind": "vllm",
            "code_version": self.code_version(),
            "packages": {"vllm": vllm.__version__},
            "name_or_path": model_label(model),
            **resolve_revision(model).to_dict(),
            "dtype": model.dtype,
            "adapter": self.adapter,
            "adapter_sha256": adapter_hash(Path(self.adapter)) if self.adapter else None,
        }
        if model.chat_template:
            identity["chat_template_sha256"] = hashlib.sha256(model.chat_template.encode()).hexdigest()
        if self.generation_overrides:
            identity["generation_config"] = dict(sorted(self.generation_overrides.items()))
        self._identity = identity
        return dict(identity)

    # --- tokens and answer distributions -------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        """This package's tokenizer of the model (`load_tokenizer`: the configured chat template);
        prompts read by `answer_distribution` are encoded with it and sent as token ids."""
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = load_tokenizer(self.model)
            return self._tokenizer

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The token ids the model reads for `messages` (as `HFBackend.prompt_ids` gives them)."""
        return prompt_ids(self.tokenizer, messages)

    def count_tokens(self, messages: Sequence[Message]) -> int | None:
        return len(self.prompt_ids(messages))

    @property
    def reads_distributions(self) -> bool:
        """Whether this vLLM returns the log-probabilities of given token ids (0.32 on), which
        `answer_distribution` needs; False where vLLM is not importable."""
        try:
            from vllm import SamplingParams
        except ImportError:
            return False
        fields = getattr(SamplingParams, "__struct_fields__", None)
        return "logprob_token_ids" in (
            fields if fields is not None else getattr(SamplingParams, "__annotations__", {})
        )

    def expect_adapters(self, paths: Sequence[str]) -> None:
        """Record per-request adapters before the engine starts, so that it starts with LoRA on
        (an engine started without it refuses every request naming an adapter)."""
        if self._engine is not None and paths and not self._request_adapters and not self.adapter:
            raise RuntimeError(f"{self!r}: the engine started without LoRA; name the adapters before load()")
        self._request_adapters.update(str(p) for p in paths)

    def load_adapters(self, paths: Sequence[str]) -> None:
        """Start the engine and check these per-request adapters' files (vLLM loads an adapter when
        a request first names it)."""
        for path in paths:
            adapter_weights(path, "settings.adapter")
        self.expect_adapters(paths)
        self.load()

    def answer_distribution(
        self,
        prompts: Sequence[Sequence[int]],
        answers: AnswerTokens,
        adapters: Sequence[str | None] | None = None,
    ) -> list[list[float] | Exception]:
        """Each prompt's next-token probability of each answer, summed over the ids that spell it
        (`esc.chat.answer_tokens`), not renormalised: `HFBackend.answer_distribution` on vLLM.

        One token is generated per prompt, greedily, and thrown away; the answers' probabilities
        are the log-probabilities vLLM returns for exactly their ids (``logprob_token_ids``) from
        the whole vocabulary. Rows with adapters go in one call, each with its own ``LoRARequest``;
        rows without one in another (vLLM's CPU build gave a row without an adapter its
        neighbour's adapter in a mixed batch). A call that fails is retried prompt by prompt, and a
        prompt that fails alone gets the exception instead of a distribution."""
        from vllm import SamplingParams, TokensPrompt

        if not self.reads_distributions:
            raise ConfigError(
                "judge.engine",
                f"this vLLM ({_vllm_version()}) cannot return the log-probabilities of given tokens "
                "(SamplingParams.logprob_token_ids, vLLM 0.32 has it); upgrade vLLM or use engine=hf",
            )
        self.load()
        params = SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=answers.flat())
        paths = list(adapters) if adapters is not None else [None] * len(prompts)
        results: list[list[float] | Exception | None] = [None] * len(prompts)
        with self._lock, self._awake():
            for with_adapter in (True, False):
                members = [i for i, path in enumerate(paths) if (path is not None) == with_adapter]
                if not members:
                    continue
                loras = {}
                for index in members:
                    try:
                        loras[index] = self._lora_request(paths[index])
                    except Exception as err:  # an adapter without weights: its rows fail, not the call
                        results[index] = err
                members = [i for i in members if i in loras]
                if not members:
                    continue
                requests = [TokensPrompt(prompt_token_ids=list(prompts[i])) for i in members]
                rows = [loras[i] for i in members]
                try:
                    outputs = self._engine.generate(requests, params, lora_request=rows, use_tqdm=False)
                    read = [_answer_probabilities(o, answers) for o in outputs]
                except Exception as err:  # find the prompt that fails, keep the rest
                    log.warning("vLLM answer distributions failed for %d prompts (%s)", len(members), err)
                    read = [
                        self._one_distribution(request, params, lora, answers)
                        for request, lora in zip(requests, rows, strict=True)
                    ]
                for index, dist in zip(members, read, strict=True):
                    results[index] = dist
        return [r for r in results if r is not None]

    @contextlib.contextmanager
    def _awake(self) -> Iterator[None]:
        """The engine awake for a call (`sleep_when_idle`: asleep again after it)."""
        if self.sleep_when_idle:
            self._engine.wake_up()
        try:
            yield
        finally:
            if self.sleep_when_idle:
                self._engine.sleep(level=1)

    def _one_distribution(self, request: Any, params: Any, lora: Any, answers: AnswerTokens) -> Any:
        try:
            output = self._engine.generate([request], params, lora_request=lora, use_tqdm=False)[0]
            return _answer_probabilities(output, answers)
        except Exception as err:
            return err

    # --- generation -------------------------------------------------------------------------------

    def _sampling_params(self, settings: GenerationSettings) -> Any:
        from vllm import SamplingParams

        kwargs: dict[str, Any] = {
            "max_tokens": int(settings.max_new_tokens),
            "temperature": float(settings.temperature),  # 0: greedy
            "top_p": float(settings.top_p) if settings.temperature > 0 else 1.0,
            "stop": list(settings.stop) or None,
            "seed": settings.seed,
            "logprobs": int(settings.top_logprobs) or None,
            **self._kept_from_model(settings),
            **self.generation_overrides,
        }
        if settings.choices:
            from vllm.sampling_params import StructuredOutputsParams

            kwargs["structured_outputs"] = StructuredOutputsParams(choice=list(settings.choices))
        return SamplingParams(**kwargs)

    def _kept_from_model(self, settings: GenerationSettings) -> dict[str, Any]:
        """The decoding fields of the model's own generation_config (as vLLM reads it) that apply on
        top of the settings, as transformers merges that file: those SamplingParams has, minus
        temperature and top_p (the settings'). Says once, as the hf backend does, what greedy
        decoding overrides of a config that samples and what of it stays."""
        if self._model_decoding is None:
            try:
                self._model_decoding = dict(self._engine.model_config.get_diff_sampling_param())
            except Exception as err:  # an engine without it: the settings alone, said once
                log.warning("%r: could not read the model's generation_config (%s)", self, err)
                self._model_decoding = {}
        model = self._model_decoding
        kept = {k: v for k, v in model.items() if k in SAMPLING_FIELDS and k not in self.generation_overrides}
        samples = float(model.get("temperature") or 0) > 0
        if samples and settings.temperature == 0 and not self._greedy_said:
            self._greedy_said = True
            overridden = {k: model[k] for k in ("temperature", "top_p", "top_k", "min_p") if k in model}
            log.warning(
                "%r: the model's generation_config samples (%s); decoding greedily as the settings say "
                "(temperature 0)%s",
                self,
                ", ".join(f"{k}={v}" for k, v in overridden.items()),
                "; kept from it: " + ", ".join(f"{k}={v}" for k, v in kept.items() if k not in overridden)
                if set(kept) - set(overridden)
                else "",
            )
        return kept

    def _lora(self, settings: GenerationSettings) -> Any:
        return self._lora_request(settings.adapter)

    def _lora_request(self, path: str | None) -> Any:
        """The LoRARequest of a request's adapter (None: the backend's own, if it has one)."""
        path = path or self.adapter
        if not path:
            return None
        from vllm.lora.request import LoRARequest

        adapter_weights(path, f"{self.config_key}.adapter" if path == self.adapter else "settings.adapter")
        return LoRARequest(f"adapter-{_lora_id(path)}", _lora_id(path), str(path))

    def _reply(self, output: Any, latency: float, want_logprobs: bool) -> Reply:
        completion = output.outputs[0]
        return Reply(
            text=completion.text.strip(),
            finish_reason=completion.finish_reason or "stop",
            prompt_tokens=len(output.prompt_token_ids or []),
            completion_tokens=len(completion.token_ids),
            latency_s=latency,
            logprobs=self._logprobs(completion) if want_logprobs else None,
        )

    @staticmethod
    def _logprobs(completion: Any) -> list[dict[str, Any]] | None:
        """vLLM's per-position {token id: Logprob} as {"token": text, "top": {text: logprob}}."""
        steps = completion.logprobs
        if not steps:
            return None
        out = []
        for token_id, step in zip(completion.token_ids, steps, strict=False):
            chosen = step.get(token_id)
            top = {
                lp.decoded_token: float(lp.logprob) for lp in step.values() if lp.decoded_token is not None
            }
            out.append({"token": chosen.decoded_token if chosen else "", "top": top})
        return out

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        if not batch:
            return []
        check_features(self, settings)
        self.load()
        with self._lock:
            params, lora = self._sampling_params(settings), self._lora(settings)
            want_logprobs = settings.top_logprobs > 0
            if self.sleep_when_idle:
                self._engine.wake_up()
            try:
                t0 = time.perf_counter()
                try:
                    outputs = self._chat(batch, params, lora)
                    latency = (time.perf_counter() - t0) / len(batch)
                    return [self._reply(o, latency, want_logprobs) for o in outputs]
                except Exception as err:  # one bad conversation fails the call: find it, keep the rest
                    log.warning("vLLM generation failed for %d conversations (%s)", len(batch), err)
                    if len(batch) == 1:
                        return [error_reply(err, time.perf_counter() - t0)]
                return [self._one(messages, params, lora, want_logprobs) for messages in batch]
            finally:
                if self.sleep_when_idle:
                    self._engine.sleep(level=1)

    def _chat(self, batch: Sequence[Sequence[Message]], params: Any, lora: Any) -> list[Any]:
        conversations = [[dict(m) for m in messages] for messages in batch]
        return self._engine.chat(
            conversations,
            params,
            use_tqdm=False,
            lora_request=lora,
            chat_template=self.model.chat_template,
        )

    def _one(self, messages: Sequence[Message], params: Any, lora: Any, want_logprobs: bool) -> Reply:
        t0 = time.perf_counter()
        try:
            return self._reply(
                self._chat([messages], params, lora)[0], time.perf_counter() - t0, want_logprobs
            )
        except Exception as err:
            return error_reply(err, time.perf_counter() - t0)

    def close(self) -> None:
        with self._lock:
            if self._engine is None:
                return
            with _ENGINES_LOCK:
                entry = _ENGINES.get(self._engine_key or "")
                if entry is not None:
                    entry[1] -= 1
                    if entry[1] <= 0:
                        del _ENGINES[self._engine_key]
            self._engine = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # pragma: no cover - best effort
            pass
