"""A local causal LM as judge: one forward pass per item, the score read off the answer distribution.

For each (dialogue, dimension) the judge prompt is rendered with the model's chat template and a
generation prompt (a style without a system text sends the model's own chat() default system turn,
`model.chat_default_system`, as score.py's InternLM2 `chat()` does), and one forward pass gives the
next-token distribution at the answer position. Its probabilities of the answers "0".."4" (each
summed over the ids that spell it there, `esc.chat.answer_tokens`: the same ids ESC-RANK
training labels) give the score (the most likely), the expected score and the five probabilities,
renormalised; `answer_mass` says how much probability fell on them at all. Nothing is generated and
nothing is parsed, so no reply can be misread.

The model runs in the `hf` chat backend (`HFBackend.answer_distribution`), the one transformers
inference stack: its loading, batching and out-of-memory back-off serve judging too. With
`engine: vllm` it runs in vLLM in this process instead (`VLLMBackend.answer_distribution`): the
same prompt ids, the same answer ids, the probabilities vLLM returns for exactly those ids. Items are judged
by (dimension, language): they share a rubric, so the prompt text before the dialogue is the same for
all of them, and the backend runs it once, its keys and values reused by every batch (about half the
prompt tokens of the official prompts). Rows are left-padded with explicit position ids (a row
scores the same alone as in any batch) and only the last position's logits are computed. With one
LoRA adapter per dimension (ESC-RANK), every row names its adapter (per-request adapters: PEFT's
mixed-adapter batches).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from esc.chat.answer_tokens import AnswerTokens, answer_tokens
from esc.chat.backends._common import render_prompt
from esc.chat.backends.hf import HFBackend
from esc.chat.backends.vllm_inproc import VLLMBackend
from esc.chat.build import backend_settings, build_backend
from esc.chat.closed import read_distributions
from esc.chat.settings import dumped
from esc.config_rules import Settings, check, relation
from esc.errors import ConfigError, UserError
from esc.models.internlm2 import local_internlm2_dir, native_internlm2
from esc.models.loading import ModelSettings, adapter_weights, model_label
from esc.models.revision import adapter_hash, resolve_revision
from esc.scoring.judge import (
    DIGITS,
    Judge,
    JudgeAnswer,
    JudgeSettings,
    PromptStyleName,
    ScoreItem,
    register_judge,
)
from esc.scoring.rubrics import (
    DIMENSION_KEYS,
    LANGUAGES,
    dimension,
    dimensions,
    prompt_style,
)
from esc.settings.types import Device, ExistingDir, NonEmpty

log = logging.getLogger(__name__)

LAYOUTS = ("none", "single", "per_dimension", "official")
ENGINES = ("hf", "vllm")


def _dimension_problem(names: Any) -> str | None:
    for name in names or ():
        try:
            dimension(name)
        except UserError:
            return f"unknown dimension {name!r}; known: {', '.join(DIMENSION_KEYS)}"
    return None


class Adapters(Settings):
    """A judge's `adapters:` (ESC-RANK's LoRA adapters), read by `adapter_paths`.

    layouts: ``none`` (the base model judges); ``single`` (``root`` is one adapter for everything);
    ``per_dimension`` (``root/<key>/`` for both languages, as ``train.py +exp=train/esc_rank`` writes);
    ``official`` (the released ESC-RANK: ``root/<official key>`` for Chinese and
    ``root/<official key>_en`` for English, e.g. ``ESC-RANK/empathic_en``). ``dimensions`` limits
    the adapters to some dimensions (items of the others are invalid: "no adapter"); null (or left
    out, as `esc.judge_training.run` builds a `single` node) means every dimension."""

    layout: Literal[LAYOUTS]  # type: ignore[valid-type]
    root: ExistingDir | None = Field(None, description="the adapters' folder")
    dimensions: Annotated[NonEmpty[str], check(_dimension_problem)] | None = None

    @model_validator(mode="after")
    def _root_for_a_layout(self) -> Adapters:
        if self.layout != "none" and not self.root:
            raise relation("root", f"layout {self.layout!r} needs the adapter directory")
        return self


def adapter_paths(adapters: Adapters | None) -> dict[tuple[str, str], Path]:
    """(dimension, language) -> adapter directory, for a judge's `adapters` (`Adapters`); no node
    (None) or layout ``none``: the base model judges."""
    if adapters is None or adapters.layout == "none":
        return {}
    root = Path(str(adapters.root))
    wanted = {dimension(d).key for d in adapters.dimensions or DIMENSION_KEYS}
    paths: dict[tuple[str, str], Path] = {}
    for d in (d for d in dimensions() if d.key in wanted):
        for language in LANGUAGES:
            if adapters.layout == "single":
                path = root
            elif adapters.layout == "per_dimension":
                path = root / d.key
            else:
                path = root / (d.official_key + ("_en" if language == "en" else ""))
            paths[(d.key, language)] = path
    return paths


def _weights(path: Path) -> Path:
    return adapter_weights(path, "judge.adapters")


@register_judge("local")
class LocalJudge(Judge):
    """A local model (``conf/model``-style mapping), optionally with LoRA adapters, on transformers
    or vLLM.

    Args:
        name: label of the judge in outputs.
        model: a ``conf/model/*.yaml`` mapping (hub id, local directory, tiny or packaged).
        prompt: prompt style in ``esc/scoring/rubrics.yaml`` (``official`` or ``paper``).
        adapters: ``{layout, root}``, see :func:`adapter_paths`.
        device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:1`` ...
        batch_size: items per forward pass.
        max_prompt_tokens: longer prompts are invalid judgments ("prompt too long"), never cut;
            null: the model's context window.
        min_answer_mass: judgments whose answers "0".."4" get less probability than this in total
            are invalid (0: always read the distribution, report the mass).
        default_system: the system turn sent when the prompt style has none; null: the model's
            ``chat_default_system`` (InternLM2's chat() default), if it has one.
        engine: ``hf`` (transformers: `device`, `batch_size`) or ``vllm`` (vLLM in this process).
        vllm: the vLLM engine's settings with ``engine: vllm`` (`VLLMBackend`'s arguments:
            ``gpu_memory_utilization``, ``max_model_len``, ``max_lora_rank``, ``max_loras``...).
    """

    class Settings(JudgeSettings):
        """A `local` judge node (conf/judge/tiny.yaml, smollm2.yaml, esc_rank.yaml, ...)."""

        model: ModelSettings
        prompt: PromptStyleName = Field("official", description="official or paper")
        adapters: Adapters | None = None
        device: Device = Field("auto", description="auto: a CUDA GPU when there is one")
        batch_size: int = Field(8, ge=1, description="items per forward pass")
        max_prompt_tokens: int | None = Field(None, ge=1, description="null: the model's context window")
        min_answer_mass: float = Field(0.0, ge=0, le=1, description="less mass on 0-4: invalid")
        default_system: str | None = None
        engine: Literal[ENGINES] = "hf"  # type: ignore[valid-type]
        vllm: dict[str, Any] | None = Field(None, description="the vllm backend's keys, with engine: vllm")

    def __init__(self, settings: Settings, config_key: str = "judge") -> None:
        self.config_key = config_key
        self.engine = settings.engine
        self.vllm_cfg = dict(settings.vllm or {})
        self.name = settings.name
        self.model = settings.model
        self.default_system = settings.default_system or self.model.chat_default_system
        self.prompt = settings.prompt
        self.style = prompt_style(self.prompt)
        self.adapters_cfg = dumped(settings.adapters)
        self.paths = adapter_paths(settings.adapters)
        self.device_name = settings.device
        self.batch_size = settings.batch_size
        self.max_prompt_tokens = settings.max_prompt_tokens
        self.min_answer_mass = settings.min_answer_mass
        self._backend: HFBackend | VLLMBackend | None = None
        self._loaded_paths: dict[str, str] = {}  # adapter as configured -> as loaded (converted copies)
        self._loaded = False
        self._answers: dict[tuple[str, ...], AnswerTokens] = {}
        self._identity: dict[str, Any] | None = None
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"LocalJudge(name={self.name!r}, model={self.model.name!r})"

    @property
    def scores_by_adapter(self) -> bool:
        return bool(self.paths)

    # --- loading ------------------------------------------------------------------------------

    @property
    def backend(self) -> HFBackend | VLLMBackend:
        """The chat backend that runs the model (built on first use): hf (no generation, so no kept
        prefixes between calls) or vLLM."""
        if self._backend is None:
            model = self.model
            native = native_internlm2(model, self.paths)  # a local InternLM2 folder: no remote code
            if native is not None:
                model, converted = native
                self._loaded_paths = {str(self.paths[key]): str(path) for key, path in converted.items()}
                log.info("%r: InternLM2 loaded as its converted Llama copy %s", self, model.name_or_path)
            if self.engine == "vllm":
                node = {"kind": "vllm", "model": model, **self.vllm_cfg}
                key = f"{self.config_key}.vllm"
                self._backend = build_backend(backend_settings(node, key), key=key)
            else:
                node = {"kind": "hf", "model": model, "device": self.device_name}
                node.update(batch_size=self.batch_size, prefix_cache_gb=0)  # no generation: no kept prefixes
                self._backend = build_backend(backend_settings(node, self.config_key), key=self.config_key)
        return self._backend

    def _loaded_path(self, adapter: Path | str) -> str:
        """The folder an adapter is loaded from: itself, or its converted copy."""
        self.backend  # noqa: B018 (converts on first use)
        return self._loaded_paths.get(str(adapter), str(adapter))

    def check_ready(self) -> None:
        for path in set(self.paths.values()):
            _weights(path)
        if self.engine == "vllm":
            try:
                self.backend.check_ready()  # vLLM installed, before any model loads
            except ConfigError as err:  # the keys as this judge's config spells them
                vllm = f"{self.config_key}.vllm."
                below = err.key.removeprefix(vllm)
                key = (
                    err.key
                    if below == err.key
                    else f"{self.config_key}.{'engine' if below == 'kind' else below}"
                )
                raise ConfigError(key, err.problem) from None
        self._load()

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            distinct = sorted({self._loaded_path(p) for p in self.paths.values()})  # one copy of each
            if distinct:
                log.info("Loading %d LoRA adapter(s) for the judge", len(distinct))
            self.backend.load_adapters(distinct)
            self._loaded = True
            self.answers(DIGITS)  # a model whose "0".."4" are not single tokens fails here

    def answers(self, choices: tuple[str, ...]) -> AnswerTokens:
        """The ids of each answer (e.g. "0".."4") at the answer position (`esc.chat.answer_tokens`)."""
        if choices not in self._answers:
            self._answers[choices] = answer_tokens(
                self.backend.tokenizer, choices, self.default_system, name=self.model.name
            )
        return self._answers[choices]

    def identity(self) -> dict[str, Any]:
        """What its scores depend on. Kept once the revision is resolved: before the model is built
        or downloaded (the folder's fingerprint is taken before `check_ready` loads it) it is
        unresolved, and is resolved again on the next call, so that the first run of a fresh clone
        records the same revision as its rerun."""
        if self._identity is None or self._identity.get("revision") is None:
            model = model_label(self.model)
            adapters = {  # content hash of each adapter directory (config and weights)
                f"{d}/{lang}": {"path": str(p), "sha256": adapter_hash(_weights(p).parent)}
                for (d, lang), p in sorted(self.paths.items())
            }
            self._identity = {
                "kind": "local",
                "name": self.name,
                "model": model,
                **resolve_revision(self.model).to_dict(),  # hub commit or content hash, not the config's null
                "dtype": self.model.dtype,
                "adapters": (
                    {"layout": self.adapters_cfg.get("layout"), "files": adapters} if adapters else None
                ),
                "prompt": self.prompt_identity,
                "default_system": self.default_system,
                "method": "next-token distribution over 0-4",
            }
            if self.engine == "vllm":  # the version is not a setting: a vLLM upgrade keeps a folder
                self._identity["engine"] = "vllm"
                self._identity["packages"] = self.backend.identity()["packages"]
            if local_internlm2_dir(self.model) is not None:
                self._identity["loaded_as"] = (
                    "LlamaForCausalLM converted from InternLM2 (esc/models/internlm2.py)"
                )
        return dict(self._identity)

    # --- scoring ------------------------------------------------------------------------------

    def prompt_text(self, item: ScoreItem) -> str:
        """The whole string the model reads for `item`, special tokens included."""
        return render_prompt(self.backend.tokenizer, item.prompt(self.style, self.default_system))

    def prompt_ids(self, item: ScoreItem) -> list[int]:
        """The token ids the model reads: `prompt_text` encoded whole (its special tokens as written)."""
        return self.backend.prompt_ids(item.prompt(self.style, self.default_system))

    def _limit(self) -> int | None:
        if self.max_prompt_tokens:
            return int(self.max_prompt_tokens)
        window = self.backend.context_window
        return int(window) - 1 if window else None

    def judge(self, items: Sequence[ScoreItem]) -> list[JudgeAnswer]:
        if not items:
            return []
        self._load()
        with self._lock:
            results: list[JudgeAnswer | None] = [None] * len(items)
            for members in self._groups(items):
                adapters = [self._row_adapter(items[i]) for i in members] if self.paths else None
                answers = read_distributions(
                    self.backend,
                    [self._encoded(items[i]) for i in members],
                    self.answers(items[members[0]].choices),
                    self._limit(),
                    self.min_answer_mass,
                    adapters,
                )
                for index, answer in zip(members, answers, strict=True):
                    results[index] = JudgeAnswer.from_closed(answer)
            return [r for r in results if r is not None]

    def _groups(self, items: Sequence[ScoreItem]) -> list[list[int]]:
        """Items read in one backend call: on transformers one rubric (dimension, language) each, so
        the text before the dialogue is prefilled once for the group; on vLLM every item with the
        same answers at once, each row with its own adapter (vLLM batches adapters and caches
        prefixes itself)."""
        groups: dict[tuple[str, ...], list[int]] = {}
        for index, item in enumerate(items):
            rubric = (item.dimension, item.language) if self.engine == "hf" else ()
            groups.setdefault((*rubric, *item.choices), []).append(index)
        return list(groups.values())

    def _row_adapter(self, item: ScoreItem) -> str | None:
        adapter = self.paths.get((item.dimension, item.language))
        return self._loaded_path(adapter) if adapter is not None else None

    def _encoded(self, item: ScoreItem) -> list[int] | Exception:
        """The item's prompt ids, or why they cannot be had (the judgment is then invalid)."""
        try:
            if self.paths and (item.dimension, item.language) not in self.paths:
                raise UserError(f"no adapter for {item.dimension}/{item.language}")
            return self.prompt_ids(item)
        except Exception as err:  # a rubric or template that cannot render this item
            return err

    def close(self) -> None:
        with self._lock:
            if self._backend is not None:
                self._backend.close()
            self._loaded = False
