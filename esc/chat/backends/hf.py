"""A transformers causal LM as a chat backend: batched, left-padded generation on one device.

The model comes from a ``conf/model/*.yaml`` mapping (a hub id, a local directory or the embedded
tiny model) and is loaded on first use, optionally with a PEFT adapter on top (e.g. the ESC-Role
adapter written by ``train.py +exp=train/esc_role``). Prompts are rendered with the model's own chat
template and a generation prompt; temperature 0 is greedy decoding.

Replies do not depend on how a call's conversations are batched: prompts are left-padded, the
padding is masked, and positions come from the attention mask, so a conversation gets the same
tokens alone as in any batch (exactly so in float32; in half precision batched matrix products may
round differently). Everything the settings do not fix (e.g. a repetition penalty) comes from the
model's ``generation_config``, as in vLLM's default.

A local judge reads its answers from the same backend (`answer_distribution`): the next-token
probabilities of each prompt, reduced to its answers ("0".."4"), nothing generated; each prompt may
name its own LoRA adapter (the seven ESC-RANK adapters on one base model), loaded once on first use.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from esc.chat.answer_tokens import AnswerTokens, answer_probabilities
from esc.chat.backends._common import error_reply, prompt_ids
from esc.chat.backends.greedy_decode import greedy_decode, model_supports, processors_for, unsupported_fields
from esc.chat.backends.next_token import MIN_SHARED_PREFIX, Reduce, next_token_answers, prefill, shared_prefix
from esc.chat.backends.prefix_cache import PrefixCache
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, check_features, register_backend
from esc.chat.settings import BackendSettings, BatchSize, Price
from esc.config_rules import check, check_entries, show
from esc.models.attention import use_grouped_sdpa
from esc.models.cpu_bf16 import Bf16Choice, decide_bf16
from esc.models.loading import (
    AdapterDir,
    LocalDevice,
    ModelSettings,
    adapter_weights,
    check_adapter_files,
    load_for_inference,
    model_label,
    require_named,
    resolve_model_path,
)
from esc.models.revision import adapter_hash, resolve_revision

log = logging.getLogger(__name__)

# Decoding fields that `GenerationSettings` (or the backend itself) owns; `generation_config` may
# not set them, so one setting never has two sources.
OWNED_BY_SETTINGS = frozenset(
    {"max_new_tokens", "max_length", "temperature", "top_p", "do_sample", "num_return_sequences",
     "stop_strings", "eos_token_id", "pad_token_id", "return_dict_in_generate", "output_logits"}
)  # fmt: skip


def _generation_problem(key: str, value: Any) -> str | None:
    """What is wrong with one entry of `backend.generation_config` (a real GenerationConfig field
    not owned elsewhere); None when nothing is."""
    from transformers import GenerationConfig  # heavy: only where a node sets some

    if key in OWNED_BY_SETTINGS:
        return "is set by `generation` (or the backend): set it there"
    if key not in GenerationConfig().to_dict():
        return "is not a transformers GenerationConfig field"
    return None


def _bf16_problem(value: Any) -> str | None:
    if value is True or value is False or value == "auto":
        return None
    return f"must be auto, true or false, got {show(value)}"


DECODE_MODES = ("auto", "generate")
SAMPLING_FIELDS = ("do_sample", "temperature", "top_p", "top_k", "min_p", "typical_p")  # greedy clears these
KEPT_DECODING_FIELDS = ("repetition_penalty", "no_repeat_ngram_size", "length_penalty", "bad_words_ids")
AUTO_BATCH_MAX = 64  # `batch_size: auto` never goes beyond this on a GPU
AUTO_BATCH_CPU = 256  # on a CPU, rows per call are bounded by this and by `cpu_memory_budget`
CPU_MEMORY_SHARE = 0.3  # of the memory available when the model loads, for one call's keys and values


def kv_bytes_per_token(config: Any, element_size: int) -> int:
    """Bytes of KV cache one token takes in every layer (keys and values)."""
    text = getattr(config, "get_text_config", lambda: config)()
    heads = getattr(text, "num_attention_heads", 1)
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return 2 * text.num_hidden_layers * kv_heads * head_dim * element_size


def auto_batch_size(model: Any, device: Any, context_window: int | None, reserved_bytes: int = 0) -> int:
    """Conversations per batch for `batch_size: auto`: on a GPU, what 80% of the free memory, less
    `reserved_bytes` (the prefix cache's budget, filled later), holds at one row's KV cache of
    `context_window` tokens (at most 4,096) times 2 for activations, between 1 and AUTO_BATCH_MAX;
    on a CPU, AUTO_BATCH_CPU: each call's rows are then sized by memory (`rows_that_fit`)."""
    import torch

    if getattr(device, "type", str(device)) != "cuda":
        return AUTO_BATCH_CPU
    free, _ = torch.cuda.mem_get_info(device)
    free = max(0, free - reserved_bytes)
    element = next(model.parameters()).element_size()
    per_row = 2 * kv_bytes_per_token(model.config, element) * min(context_window or 4096, 4096)
    size = max(1, min(AUTO_BATCH_MAX, int(0.8 * free) // per_row))
    log.info(
        "batch_size auto: %d conversations (%.1f GiB free, %.0f MiB a row)",
        size,
        free / 2**30,
        per_row / 2**20,
    )
    return size


def cpu_memory_budget(reserved: int = 0, share: float = CPU_MEMORY_SHARE) -> int:
    """Bytes one call's keys and values may take on a CPU: `share` of the memory available now
    (MemAvailable, Linux) less `reserved` (the prefix cache's budget, filled later), or 2 GiB
    where that cannot be read; at least 256 MiB."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        pass
    if available is None:
        return 2 * 2**30
    return max(2**28, int(share * max(0, available - reserved)))


def rows_that_fit(budget: int, kv_per_token: int, tokens: int, cap: int) -> int:
    """Rows of `tokens` tokens (prompt and reply) whose keys and values, times 1.5 for the
    activations of a prefill, fit in `budget` bytes; between 1 and `cap`."""
    return max(1, min(cap, int(budget / (1.5 * kv_per_token * max(1, tokens)))))


@register_backend("hf")
class HFBackend(ChatBackend):
    """A local transformers model (plus an optional PEFT adapter) generating in batches.

    Args:
        model: a ``conf/model``-style mapping: name, name_or_path, revision, dtype,
            trust_remote_code, chat_template, tiny or packaged, and optionally context_window.
        adapter: a PEFT adapter directory applied on the base model, or None.
        device: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:1``...
        batch_size: conversations per forward batch; a call is split into chunks of this size.
            ``auto``: sized from the GPU memory free once the model is loaded (the KV cache a row
            needs at the context length); on a CPU, per call, as many rows (up to 256) as
            `cpu_memory_budget` holds at the call's longest prompt plus its reply (large waves run
            the matrix products at the row counts where a CPU is fast). A chunk that runs out of
            GPU memory is split in halves and retried (and later chunks are kept to the size that
            fit) before any conversation fails.
        price: USD per 1,000 tokens, e.g. ``{"prompt": 0.0, "completion": 0.0}``.
        prefix_cache_gb: memory (on the model's device) for the keys and values of recent
            conversations, so each turn prefills only its new tokens (`prefix_cache`); 0: off.
        generation_config: extra ``transformers.GenerationConfig`` fields on top of the model's own,
            e.g. ``{"no_repeat_ngram_size": 3}``; part of the backend's identity (and cache key).
        config_key: where these settings sit in the config, for error messages (``judge`` when a
            local judge runs the model).
        cpu_bf16: on a CPU, run the model in bfloat16: ``auto`` when a measured check finds
            bfloat16 matrix products at least 1.3x float32's (`esc.models.cpu_bf16`: a fixed
            product, measured once per process), ``true``,
            ``false`` (the model config's dtype). The choice is logged and named in the identity
            (``dtype``): transcripts in bfloat16 differ from float32 ones. No effect on a GPU.
        decode: ``auto``: greedy calls without stop strings or log-probabilities decode with
            `greedy_decode` (preallocated caches, ended rows leave the batch), the rest with
            ``generate``; ``generate``: always transformers' ``generate`` (the reference).

    `check_ready` only checks the configuration (adapter and model directories); the weights are
    loaded by `load` or on first use. The identity names the resolved model revision
    (`esc.models.revision`: hub commit or content hash), the adapter's content hash, the
    transformers (and peft) version that renders prompts and generates, and `CODE_VERSION`.

    Code version: bump `CODE_VERSION` whenever a change to this class can change a reply to the
    same request (prompt rendering, decoding settings, stop handling, text clean-up, token counts);
    it is part of the request cache key, so replies cached by older code are no longer replayed.
    """

    # 2: greedy calls decode with greedy_decode (ended rows leave the batch); 3: on CPU, masked
    # multi-token attention takes grouped heads in the kernel (esc.models.attention)
    CODE_VERSION = 3
    runs_in_process = True

    class Settings(BackendSettings):
        """An `hf` node (conf/target/tiny.yaml, conf/roleplayer/esc_role_local.yaml, ...)."""

        model: ModelSettings
        adapter: AdapterDir | None = Field(None, description="a PEFT adapter directory")
        device: LocalDevice = Field("auto", description="auto: a CUDA GPU when there is one")
        batch_size: BatchSize = Field(8, description="conversations per forward batch, or auto")
        price: Price | None = None
        generation_config: Annotated[dict[str, Any] | None, check_entries(_generation_problem)] = Field(
            None, description="transformers GenerationConfig fields on top of the model's"
        )
        prefix_cache_gb: float = Field(4.0, ge=0, description="0: off")
        decode: Literal[DECODE_MODES] = "auto"  # type: ignore[valid-type]
        cpu_bf16: Annotated[bool | str, check(_bf16_problem)] = Field(False, description="bfloat16 on a CPU")

        def served_model(self) -> str | None:
            return model_label(self.model) if self.model.named else None

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        self.config_key = config_key  # where this backend's settings sit in the config (error messages)
        self.model = settings.model
        self.prefix_cache_gb = settings.prefix_cache_gb
        self._prefix: PrefixCache | None = None
        self.generation_overrides = dict(settings.generation_config or {})
        self.adapter = settings.adapter
        self.device_name = settings.device
        batch_size = settings.batch_size
        self.batch_size: int | None = None if batch_size == "auto" else batch_size  # auto: on load
        self._cpu_budget: int | None = (
            None  # batch_size auto on a CPU: bytes of keys and values a call may use
        )
        self.price = settings.price
        self._model: Any = None
        self._tokenizer: Any = None
        self._device: Any = None
        self._context_window: int | None = None
        self._identity: dict[str, Any] | None = None
        self._unresolved_warned = False
        self._request_adapters: dict[str, str] = {}  # adapter directory -> PEFT name, loaded on demand
        self._lock = threading.RLock()  # one generation at a time (a server may call from threads)
        self.decode = settings.decode
        self.cpu_bf16 = str(settings.cpu_bf16).lower()  # auto, true, false (YAML's are booleans)
        self._bf16: Bf16Choice | None = None  # decided on first need (a measurement for auto)
        self._fast_model: bool | None = None  # the model's forward takes a cache object (on first use)
        self._greedy_said = False  # the greedy override of the model's sampling config, logged once
        self._fast_refused: list[str] = []  # generation fields that last sent a call to generate

    def __repr__(self) -> str:
        return f"HFBackend(model={self.model.name!r}, adapter={self.adapter!r})"

    # --- loading ------------------------------------------------------------------------------

    def check_ready(self) -> None:
        """Check that a model is named and the adapter's files can be read, without loading
        anything (`load` loads). The settings checked the rest: the device (a GPU that was asked for
        and is not there is an error, never a CPU run), the adapter and a local model directory."""
        require_named(self.model, f"{self.config_key}.model")
        if self.adapter:
            check_adapter_files(self.adapter)  # a config or weights file cut short: one line, now

    def load(self) -> None:
        """Load the tokenizer, model and adapter now (otherwise the first generation does)."""
        self._load()

    def _load(self) -> None:
        with self._lock:
            if self._model is not None:
                return

            adapters = []
            if self.adapter:
                log.info("Applying the PEFT adapter %s", self.adapter)
                adapters = [(str(self.adapter), "default")]
            self._model, self._tokenizer, self._device = load_for_inference(
                self.model, self.device_name, adapters
            )
            if self._device.type == "cpu" and self.bf16_choice().use:
                import torch

                self._model.to(torch.bfloat16)
            if self._device.type == "cpu" and use_grouped_sdpa(self._model):
                log.debug("%r: grouped-query attention left to the SDPA kernel", self)
            if self.batch_size is None:
                reserved = int(self.prefix_cache_gb * 2**30)
                self.batch_size = auto_batch_size(self._model, self._device, self.context_window, reserved)
                if self._device.type == "cpu":
                    self._cpu_budget = cpu_memory_budget(reserved)
                    log.info("batch_size auto: rows per call sized by %.1f GiB of keys and values",
                             self._cpu_budget / 2**30)  # fmt: skip
            if self.prefix_cache_gb > 0:
                self._prefix = PrefixCache(int(self.prefix_cache_gb * 2**30))

    # --- properties ---------------------------------------------------------------------------

    def bf16_choice(self) -> Bf16Choice:
        """Whether the model runs in bfloat16 on the CPU (`cpu_bf16`), decided once and logged."""
        if self._bf16 is None:
            if self.cpu_bf16 == "false" or self._on_gpu():
                self._bf16 = Bf16Choice(False, "false" if self.cpu_bf16 == "false" else "gpu", None)
            else:
                self._bf16 = decide_bf16(self.cpu_bf16)
                log.warning("%r runs in %s on the CPU: %s", self,
                            "bfloat16" if self._bf16.use else "float32", self._bf16.reason())  # fmt: skip
        return self._bf16

    def _on_gpu(self) -> bool:
        if self._device is not None:
            return self._device.type != "cpu"
        import torch

        return self.device_name != "cpu" and (self.device_name != "auto" or torch.cuda.is_available())

    def _text_config(self) -> Any:
        """The model's (text) config: the loaded model's, else read from its directory."""
        if self._model is not None:
            config = self._model.config
        else:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(
                resolve_model_path(self.model),
                revision=self.model.revision,
                trust_remote_code=self.model.trust_remote_code,
            )
        return getattr(config, "get_text_config", lambda: config)()

    @property
    def context_window(self) -> int | None:  # type: ignore[override]
        if self.model.context_window:
            return self.model.context_window
        if self._context_window is None:
            self._context_window = getattr(self._text_config(), "max_position_embeddings", None)
        return self._context_window

    def identity(self) -> dict[str, Any]:
        """Kind, code and package versions, model and its resolved revision, dtype, adapter hash...

        The revision is what is on disk now (nothing is loaded); a hub model that is not downloaded
        yet has ``revision: null`` until `load` (see `cache_identity`).
        """
        if self._identity is not None:
            return dict(self._identity)
        import transformers

        model = self.model
        name_or_path = model_label(model)
        revision = resolve_revision(model)
        packages = {"transformers": transformers.__version__}
        if self.adapter:
            import peft

            packages["peft"] = peft.__version__
        identity: dict[str, Any] = {
            "kind": "hf",
            "code_version": self.code_version(),
            "packages": packages,
            "name_or_path": name_or_path,
            **revision.to_dict(),
            "dtype": "bfloat16" if self.cpu_bf16 != "false" and self.bf16_choice().use else model.dtype,
            "adapter": self.adapter,
            "adapter_sha256": adapter_hash(Path(self.adapter)) if self.adapter else None,
            "decode": self.decode,
        }
        if self.cpu_bf16 != "false":
            identity["cpu_bf16"] = self.cpu_bf16
        if self.generation_overrides:
            identity["generation_config"] = dict(sorted(self.generation_overrides.items()))
        if model.chat_template:
            identity["chat_template_sha256"] = hashlib.sha256(model.chat_template.encode()).hexdigest()
        # a hub revision read before loading may move when loading downloads a newer snapshot
        if revision.resolved and (self._model is not None or revision.source != "hub-cache"):
            self._identity = identity
        return dict(identity)

    def cache_identity(self) -> dict[str, Any]:
        """`identity` with the revision of the model that generates: a hub model whose revision is
        not a pinned commit, and a tiny or packaged model not built yet, are loaded first."""
        identity = self.identity()
        if identity["revision"] is None or identity["revision_source"] == "hub-cache":
            self.load()
            identity = self.identity()
            if identity["revision"] is None and not self._unresolved_warned:
                self._unresolved_warned = True
                log.warning("%r: the model revision could not be resolved; cache keys name none", self)
        return identity

    # --- tokens -------------------------------------------------------------------------------

    def _prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        return prompt_ids(self._tokenizer, messages)

    def count_tokens(self, messages: Sequence[Message]) -> int | None:
        self._load()
        return len(self._prompt_ids(messages))

    def kept_conversations(self, tokens: int) -> int | None:
        """Conversations of `tokens` tokens whose keys and values the prefix cache holds at once
        (None: no prefix cache, every turn is prefilled whole anyway)."""
        if self.prefix_cache_gb <= 0:
            return None
        self._load()
        return max(1, int(self.prefix_cache_gb * 2**30) // (self._kv_per_token() * max(1, tokens)))

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The token ids the model reads for `messages`: the rendered prompt encoded whole."""
        return prompt_ids(self.tokenizer, messages)

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (loading the model with it on first use)."""
        if self._tokenizer is None:
            self._load()
        return self._tokenizer

    # --- per-request adapters -----------------------------------------------------------------

    def load_adapters(self, paths: Sequence[str]) -> None:
        """Load these per-request adapters now (otherwise the first request naming one does)."""
        self._load()
        with self._lock:
            for path in paths:
                self._adapter_name(str(path))

    def _adapter_name(self, path: str | None) -> str | None:
        """The PEFT name of a request's adapter (None: the backend's own, or the base model), loading
        it beside the others the first time; the backend's own adapter stays the active one."""
        if path is None or (self.adapter and Path(path) == Path(self.adapter)):
            return "default" if self.adapter else ("__base__" if self._request_adapters else None)
        if str(path) not in self._request_adapters:
            from peft import PeftModel

            adapter_weights(path, "settings.adapter")
            check_adapter_files(path)
            name = f"a{len(self._request_adapters)}"
            if isinstance(self._model, PeftModel):
                self._model.load_adapter(str(path), adapter_name=name)
            else:
                self._model = PeftModel.from_pretrained(self._model, str(path), adapter_name=name)
            if self.adapter:
                self._model.set_adapter("default")
            self._model.to(self._device)
            self._model.eval()
            self._request_adapters[str(path)] = name
        return self._request_adapters[str(path)]

    @contextlib.contextmanager
    def _own_weights(self) -> Iterator[None]:
        """Generation with the backend's own weights: with per-request adapters loaded on a backend
        that has no adapter of its own, the base model (PEFT would apply the first one loaded)."""
        if self._request_adapters and not self.adapter:
            with self._model.disable_adapter():
                yield
        else:
            yield

    # --- answer distributions (local judges) --------------------------------------------------

    def answer_distribution(
        self,
        prompts: Sequence[Sequence[int]],
        answers: AnswerTokens,
        adapters: Sequence[str | None] | None = None,
    ) -> list[list[float] | Exception]:
        """Each prompt's next-token probability of each answer (e.g. "0".."4"), summed over the ids
        that spell it (`esc.chat.answer_tokens`), not renormalised; nothing is generated.

        `prompts` are token ids (`prompt_ids`); `adapters` names a LoRA adapter directory per prompt
        (None: the backend's own). Prompts with one adapter that start alike (a rubric before the
        dialogue) share one prefill of their common start. Batches of `batch_size`, longest first; a
        batch that runs out of GPU memory is split in halves and retried; a batch that fails gives
        each of its prompts the exception instead of a distribution.
        """
        self._load()

        def reduce(probs: Any) -> Any:
            return answer_probabilities(probs, answers)

        with self._lock:
            results: list[list[float] | Exception | None] = [None] * len(prompts)
            groups: dict[str | None, list[int]] = {}
            for index, path in enumerate(adapters if adapters is not None else [None] * len(prompts)):
                groups.setdefault(path, []).append(index)
            for path, members in groups.items():
                try:
                    name = self._adapter_name(path)
                except Exception as err:  # an adapter that cannot load: its prompts fail, not the call
                    for index in members:
                        results[index] = err
                    continue
                self._answer_group([(i, list(prompts[i])) for i in members], reduce, name, results)
            return [r for r in results if r is not None]

    def _answer_group(
        self,
        members: list[tuple[int, list[int]]],
        reduce: Reduce,
        adapter: str | None,
        results: list[list[float] | Exception | None],
    ) -> None:
        def kwargs(rows: int) -> dict[str, Any]:
            return {"adapter_names": [adapter] * rows} if adapter else {}

        prefix: tuple[int, Any] | None = None
        try:
            shared = shared_prefix([ids for _, ids in members])
            if len(members) > 1 and shared >= MIN_SHARED_PREFIX:
                prefix = (shared, self._prefill(members[0][1][:shared], kwargs(1)))
        except Exception as err:  # read without the shared prefix then
            log.warning("Could not prefill the shared prompt prefix: %s", err)
        pad_id = self._tokenizer.pad_token_id

        def run(rows: list[list[int]]) -> list[list[float]]:
            return next_token_answers(
                self._model, self._device, pad_id, rows, reduce, kwargs(len(rows)), prefix
            )

        members = sorted(members, key=lambda pair: -len(pair[1]))  # similar lengths share a batch
        start = 0
        while start < len(members):
            chunk = members[start : start + self._rows_per_call(len(members[start][1]))]
            start += len(chunk)
            try:
                dists = self._fitting(run, [ids for _, ids in chunk], "prompts")
                for (index, _), probs in zip(chunk, dists, strict=True):
                    results[index] = probs
            except Exception as err:
                log.warning("Reading the answer distribution failed for %d prompts: %s", len(chunk), err)
                for index, _ in chunk:
                    results[index] = err

    def _rows_per_call(self, tokens: int) -> int:
        """Rows in one call whose longest row holds `tokens` tokens: `batch_size`, or on a CPU with
        `batch_size: auto` what the memory budget holds (`rows_that_fit`)."""
        if self._cpu_budget is None:
            return self.batch_size
        return rows_that_fit(self._cpu_budget, self._kv_per_token(), tokens, self.batch_size)

    def _kv_per_token(self) -> int:
        """Bytes of keys and values one token takes in the loaded model (its dtype, every layer)."""
        return kv_bytes_per_token(self._model.config, next(self._model.parameters()).element_size())

    def _prefill(self, ids: list[int], adapter_kwargs: dict[str, Any]) -> list[tuple[Any, Any]]:
        """The keys and values of a prompt start that several prompts share."""
        return prefill(self._model, self._device, ids, adapter_kwargs)

    def _fitting(self, run: Callable[[list[Any]], list[Any]], rows: list[Any], what: str) -> list[Any]:
        """`run(rows)`, split in halves while the GPU runs out of memory (greedy replies and answer
        distributions do not depend on the batch); the rest of the rows, and later batches, go in
        chunks of the size that fit. One row that does not fit alone fails the call."""
        import torch

        if not rows:
            return []
        try:
            return run(rows)
        except torch.OutOfMemoryError:
            if len(rows) == 1:
                raise
        # Retried outside the handler: while it runs, the exception's traceback holds the failed
        # call's frames and so its tensors (a 64-row call's keys and values), and every half ran out
        # of memory too, down to one row (found on an H100 under a memory cap: docs/gpu.md).
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        half = (len(rows) + 1) // 2
        self.batch_size = min(self.batch_size, half)
        log.warning("%r: out of GPU memory at %d %s; retrying %d at a time", self, len(rows), what, half)
        results: list[Any] = []
        while len(results) < len(rows):  # each chunk at the size that fit so far (a chunk may lower it)
            chunk = rows[len(results) : len(results) + self.batch_size]
            done = self._fitting(run, chunk, what)
            if len(done) != len(chunk):
                raise RuntimeError(f"{len(done)} results for {len(chunk)} {what}")
            results += done
        return results

    # --- generation ---------------------------------------------------------------------------

    def _generation_config(self, settings: GenerationSettings) -> Any:
        model = self._model
        gen = copy.deepcopy(model.generation_config)
        gen.max_new_tokens = int(settings.max_new_tokens)
        gen.max_length = None
        if settings.temperature > 0:
            gen.do_sample = True
            gen.temperature = float(settings.temperature)
            gen.top_p = float(settings.top_p)
        else:  # greedy: never pass temperature 0; clear sampling knobs so nothing warns
            self._say_greedy_overrides(gen)
            gen.do_sample = False
            gen.temperature = None
            gen.top_p = None
            gen.top_k = None
            gen.min_p = None
            gen.typical_p = None
        for key, value in self.generation_overrides.items():
            setattr(gen, key, value)
        gen.num_return_sequences = 1
        gen.return_dict_in_generate = settings.top_logprobs > 0  # raw logits for Reply.logprobs
        gen.output_logits = settings.top_logprobs > 0
        gen.eos_token_id = sorted(self._eos_ids())
        gen.pad_token_id = self._tokenizer.pad_token_id
        gen.stop_strings = list(settings.stop) or None
        return gen

    def _say_greedy_overrides(self, gen: Any) -> None:
        """Log once what of the model's own generation_config greedy decoding overrides (a released
        checkpoint may sample: Qwen1.5-Chat's sets do_sample, temperature, top_p, top_k) and which of
        its decoding fields stay (e.g. repetition_penalty)."""
        if self._greedy_said or not getattr(gen, "do_sample", False):
            return  # a config that does not sample has nothing greedy decoding overrides
        self._greedy_said = True
        from transformers import GenerationConfig

        default = GenerationConfig()
        sampling = {k: getattr(gen, k, None) for k in SAMPLING_FIELDS}
        overridden = {k: v for k, v in sampling.items()
                      if k == "do_sample" or (v is not None and v != getattr(default, k, None))}  # fmt: skip
        kept = {k: getattr(gen, k) for k in KEPT_DECODING_FIELDS
                if getattr(gen, k, None) not in (None, getattr(default, k, None))}  # fmt: skip
        if overridden:
            log.warning(
                "%r: the model's generation_config samples (%s); decoding greedily as the settings say "
                "(temperature 0)%s",
                self,
                ", ".join(f"{k}={v}" for k, v in overridden.items()),
                "; kept from it: " + ", ".join(f"{k}={v}" for k, v in kept.items()) if kept else "",
            )

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        configured = self._model.generation_config.eos_token_id
        if isinstance(configured, int):
            ids.add(configured)
        elif configured:
            ids.update(int(i) for i in configured)
        if self._tokenizer.eos_token_id is not None:
            ids.add(int(self._tokenizer.eos_token_id))
        return ids

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        if not batch:
            return []
        check_features(self, settings)
        self._load()
        with self._lock:
            replies: list[Reply | None] = [None] * len(batch)
            encoded: list[tuple[int, list[int]]] = []
            for index, messages in enumerate(batch):
                try:
                    encoded.append((index, self._prompt_ids(messages)))
                except Exception as err:  # a conversation the chat template rejects
                    replies[index] = error_reply(err)
            if settings.temperature > 0 and settings.seed is not None:
                import torch

                torch.manual_seed(int(settings.seed))
            # longest first, so each chunk holds prompts of similar length (little padding)
            encoded.sort(key=lambda item: -len(item[1]))
            gen = self._generation_config(settings) if encoded else None
            start = 0
            while start < len(encoded):
                size = self._rows_per_call(len(encoded[start][1]) + int(settings.max_new_tokens))
                chunk = encoded[start : start + size]
                start += len(chunk)
                t0 = time.perf_counter()
                try:
                    chunk_replies = self._generate_fitting([ids for _, ids in chunk], settings, gen)
                except Exception as err:
                    latency = (time.perf_counter() - t0) / len(chunk)
                    log.warning("Generation failed for %d conversations: %s", len(chunk), err)
                    chunk_replies = [error_reply(err, latency) for _ in chunk]
                for (index, _), reply in zip(chunk, chunk_replies, strict=True):
                    replies[index] = reply
            return [reply for reply in replies if reply is not None]

    def _generate_fitting(
        self, prompts: list[list[int]], settings: GenerationSettings, gen: Any
    ) -> list[Reply]:
        """`_generate_chunk`, split in halves while the GPU runs out of memory (`_fitting`)."""
        return self._fitting(lambda rows: self._generate_chunk(rows, settings, gen), prompts, "conversations")

    def _generate_chunk(
        self, prompts: list[list[int]], settings: GenerationSettings, gen: Any
    ) -> list[Reply]:
        """Left-padded batched decoding (`greedy_decode` or `generate`: `_fast_greedy`). With the
        prefix cache, each row's longest cached prefix is
        not prefilled again: the row is [pad][cached prefix][pad][new tokens], the cached keys and
        values fill the first part of the batch's cache, and positions come from the attention mask,
        so the row computes what it would alone and uncached."""
        import torch
        from transformers import DynamicCache

        t0 = time.perf_counter()
        tokenizer = self._tokenizer
        pad_id = tokenizer.pad_token_id
        reuse = (
            [self._prefix.lookup(ids) for ids in prompts]
            if self._prefix
            else [(0, None, None)] * len(prompts)
        )
        cached = [n for n, _, _ in reuse]
        width_c = max(cached)
        width = width_c + max(len(ids) - n for ids, n in zip(prompts, cached, strict=True))
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, (ids, n) in enumerate(zip(prompts, cached, strict=True)):  # every prompt ends at one column
            input_ids[row, width_c - n : width_c] = torch.tensor(ids[:n], dtype=torch.long)
            attention[row, width_c - n : width_c] = 1
            input_ids[row, width - (len(ids) - n) :] = torch.tensor(ids[n:], dtype=torch.long)
            attention[row, width - (len(ids) - n) :] = 1
        fast = self._fast_greedy(settings, gen)
        past = None
        if width_c:
            try:
                past = self._batched_past(
                    reuse, width_c, width + int(settings.max_new_tokens) if fast else None
                )
            except torch.OutOfMemoryError:
                raise  # the caller's back-off (`_fitting`) splits the call; the prefix cache stays on
            except Exception as err:  # a model whose cache this transformers cannot assemble
                self._stop_prefix_cache(err)
                return self._generate_chunk(prompts, settings, gen)
        if fast:
            with self._own_weights():
                decoded = greedy_decode(
                    self._model,
                    input_ids.to(self._device),
                    attention.to(self._device),
                    past,
                    width_c,
                    int(settings.max_new_tokens),
                    self._eos_ids(),
                    pad_id,
                    processors_for(gen),
                    keep_kv=self._prefix is not None,
                )
            news = [row.tokens for row in decoded]
            kv_of: Callable[[int, int], Any] = lambda row, fed: decoded[row].layers  # noqa: E731
            step_logits = None
        else:
            want_logprobs = settings.top_logprobs > 0
            gen = copy.copy(gen)
            gen.return_dict_in_generate = want_logprobs or self._prefix is not None
            with torch.inference_mode(), self._own_weights():
                output = self._model.generate(
                    input_ids=input_ids.to(self._device),
                    attention_mask=attention.to(self._device),
                    past_key_values=(
                        DynamicCache(ddp_cache_data=past, config=self._model.config) if past else None
                    ),
                    generation_config=gen,
                    tokenizer=tokenizer,
                )
            step_logits = output.logits if want_logprobs else None
            sequences = output.sequences if gen.return_dict_in_generate else output
            news = [sequences[row, width:].tolist() for row in range(len(prompts))]

            def kv_of(row: int, fed: int) -> Any:
                size = len(prompts[row])
                return self._row_kv(output.past_key_values, row, size, cached[row], width_c, width, fed)

        latency = (time.perf_counter() - t0) / len(prompts)
        eos = self._eos_ids()
        replies = []
        for row, ids in enumerate(prompts):
            new = news[row]
            stop_at = next((j for j, token in enumerate(new) if token in eos), None)
            if stop_at is not None:
                kept, produced, ended = new[:stop_at], stop_at + 1, True
            else:
                produced = len(new)
                while produced and new[produced - 1] == pad_id:  # a row stopped by a stop string
                    produced -= 1
                kept, ended = new[:produced], False
            text = tokenizer.decode(kept, skip_special_tokens=True)
            cuts = [text.find(s) for s in settings.stop if s and s in text]
            if cuts:
                text, ended = text[: min(cuts)], True
            finish = "length" if not ended and produced >= settings.max_new_tokens else "stop"
            replies.append(
                Reply(
                    text=text.strip(),
                    finish_reason=finish,
                    prompt_tokens=len(ids),
                    completion_tokens=produced,
                    latency_s=latency,
                    logprobs=(
                        self._top_logprobs(step_logits, row, new[:produced], settings.top_logprobs)
                        if step_logits is not None
                        else None
                    ),
                )
            )
            if self._prefix is not None:  # keep this conversation's keys and values for its next turn
                try:
                    self._prefix.store([*ids, *new[: produced - 1]], kv_of(row, produced - 1), reuse[row][1])
                except Exception as err:  # e.g. a remote-code model's own cache type: replies stand
                    self._stop_prefix_cache(err)
        return replies

    def _fast_greedy(self, settings: GenerationSettings, gen: Any) -> bool:
        """Whether this call decodes with `greedy_decode` (greedy, no stop strings or log-probabilities,
        a model forward that takes a cache object, only generation fields the loop honours);
        otherwise `generate`. `backend.decode: generate` always takes `generate`."""
        if self.decode == "generate" or settings.temperature > 0 or settings.stop or settings.top_logprobs:
            return False
        if self._fast_model is None:
            self._fast_model = model_supports(self._model)
            if not self._fast_model:
                log.info("%r: the model's forward takes no cache object; decoding with generate", self)
        others = unsupported_fields(gen)
        if others and others != self._fast_refused:
            self._fast_refused = others
            log.info("%r: generation fields %s are set; decoding with generate", self, others)
        return self._fast_model and not others

    def _stop_prefix_cache(self, err: Exception) -> None:
        """Go on without kept prefixes (every turn prefilled in full, the same replies) when this
        model's cache cannot be split per conversation or put back together."""
        log.warning("%r: prefix cache off (%s: %s); every turn is prefilled in full", self,
                    type(err).__name__, err)  # fmt: skip
        self._prefix = None

    def _batched_past(
        self, reuse: list[tuple[int, Any, Any]], width_c: int, columns: int | None = None
    ) -> list[tuple[Any, Any]]:
        """A batch's keys and values per layer from each row's cached ones, right-aligned at column
        `width_c`, in tensors of `columns` columns (default `width_c`): `greedy_decode` goes on
        writing into the rest, so the kept prefixes are copied once, not twice."""
        template = next(layers for _, _, layers in reuse if layers)
        batch = []
        for layer, (k0, v0) in enumerate(template):
            keys = k0.new_empty((len(reuse), k0.shape[0], columns or width_c, k0.shape[2]))
            values = v0.new_empty((len(reuse), v0.shape[0], columns or width_c, v0.shape[2]))
            keys[:, :, :width_c] = 0  # padding columns: masked, but never garbage (0 x NaN is NaN)
            values[:, :, :width_c] = 0
            for row, (n, _, layers) in enumerate(reuse):
                if n:
                    keys[row, :, width_c - n : width_c] = layers[layer][0]
                    values[row, :, width_c - n : width_c] = layers[layer][1]
            batch.append((keys, values))
        return batch

    @staticmethod
    def _row_kv(
        past: Any, row: int, prompt: int, n: int, width_c: int, width: int, fed: int
    ) -> list[tuple[Any, Any]]:
        """A row's keys and values after `generate`: its cached prefix, the rest of its prompt and
        the `fed` reply tokens read back (all but the last), per layer."""
        import torch

        device = past.layers[0].keys.device
        positions = torch.cat(
            [
                torch.arange(width_c - n, width_c),
                torch.arange(width - (prompt - n), width),
                torch.arange(width, width + fed),
            ]
        ).to(device)
        return [
            (layer.keys[row].index_select(1, positions), layer.values[row].index_select(1, positions))
            for layer in past.layers
        ]

    def _top_logprobs(self, step_logits: Any, row: int, tokens: list[int], n: int) -> list[dict[str, Any]]:
        """Per generated token: its text and the `n` likeliest tokens' log-probabilities (raw logits,
        before any logits processor), as the chat completions API reports them."""
        import torch

        decode = self._tokenizer.decode
        out = []
        for step, token in enumerate(tokens):
            logprobs = torch.log_softmax(step_logits[step][row].float(), dim=-1)
            values, ids = logprobs.topk(n)
            top = {decode([int(i)]): float(v) for v, i in zip(values.tolist(), ids.tolist(), strict=True)}
            out.append({"token": decode([token]), "top": top})
        return out

    def close(self) -> None:
        with self._lock:
            if self._model is None:
                return
            if self._prefix is not None:
                p = self._prefix
                log.info("%r: prefix cache: %d hits, %d misses, %d prompt tokens not prefilled again",
                         self, p.hits, p.misses, p.reused_tokens)  # fmt: skip
            self._model = None
            self._tokenizer = None
            self._prefix = None
            self._request_adapters = {}
            try:
                import torch

                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            except Exception:  # pragma: no cover - best effort
                pass
