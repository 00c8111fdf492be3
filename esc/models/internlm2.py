"""InternLM2 checkpoints and their LoRA adapters as native Llama ones: ESC-RANK without remote code.

InternLM2 (ESC-RANK's base, `internlm/internlm2-chat-7b`) is not in transformers; its modelling code
comes with the weights (`trust_remote_code`) and breaks on the transformers this repo installs
(docs/models.md). Its layers are Llama's with other names and one fused projection:

* `attention.wqkv` holds, for each key/value head h in turn, the rows of its
  `num_attention_heads / num_key_value_heads` query heads, then its key head, then its value head
  (each `head_dim` rows). The query rows taken in that order are Llama's `q_proj` (query head
  h * groups + g), the key and value rows `k_proj` and `v_proj`;
* `attention.wo`, `feed_forward.w1/w3/w2`, `attention_norm`, `ffn_norm`, `tok_embeddings`,
  `output`, `norm` are `o_proj`, `gate_proj/up_proj/down_proj`, `input_layernorm`,
  `post_attention_layernorm`, `embed_tokens`, `lm_head`, `norm`;
* rotary embeddings, RMSNorm and SiLU are Llama's (rotate-half layout, no permutation needed).

A LoRA adapter on `wqkv` (the released ESC-RANK adapters: r=8, alpha 16) adds `B A x`; its `A`
serves q, k and v alike and `B`'s rows split like `wqkv`'s, so three adapters on `q_proj`, `k_proj`,
`v_proj` with the same `A` compute exactly the same function. Anything this does not know (a bias,
an unknown rope scaling, per-module ranks, DoRA, other modules) is refused with one `error:` line,
never guessed.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from esc.errors import UserError
from esc.paths import cache_dir

log = logging.getLogger(__name__)

# InternLM2 module names -> Llama's (the fused wqkv is split, not renamed)
RENAMES = {
    "attention.wo": "self_attn.o_proj",
    "feed_forward.w1": "mlp.gate_proj",
    "feed_forward.w3": "mlp.up_proj",
    "feed_forward.w2": "mlp.down_proj",
    "attention_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
TOP_LEVEL = {
    "model.tok_embeddings.weight": "model.embed_tokens.weight",
    "model.norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
ADAPTER_TARGETS = {"wqkv": ("q_proj", "k_proj", "v_proj"), "wo": ("o_proj",), "w1": ("gate_proj",),
                   "w3": ("up_proj",), "w2": ("down_proj",)}  # fmt: skip
# config.json keys that carry over to LlamaConfig unchanged
SHARED_CONFIG_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
    "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings", "rope_theta",
)  # fmt: skip
LAYER_KEY = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
LAYER_WEIGHTS = ("attention.wqkv", *RENAMES)  # every layer has each of these (.weight)
MARKER = "converted_from_internlm2.json"  # in every folder this writes: what it may replace


def check_output(out: Path, *sources: Path) -> None:
    """Refuse an output folder that is, holds or lies inside a source, or that exists with files
    this converter did not write: it is replaced whole."""
    target = out.resolve()
    for source in sources:
        src = source.resolve()
        if target == src or src.is_relative_to(target) or target.is_relative_to(src):
            raise UserError(
                f"{out}: the output folder is, holds or lies in {source}; give a folder apart from it"
            )
    if target.exists() and any(target.iterdir()) and not (target / MARKER).is_file():
        raise UserError(f"{out}: exists and was not written by this converter; give a new or empty folder")


def _mark(folder: Path, source: Path, kind: str) -> None:
    (folder / MARKER).write_text(json.dumps({"source": str(source), "kind": kind}) + "\n", encoding="utf-8")


def is_internlm2_dir(path: str | Path) -> bool:
    """Whether `path` holds an InternLM2 checkpoint (its config.json says so)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    data = json.loads(config.read_text(encoding="utf-8"))
    return data.get("model_type") == "internlm2" or "InternLM2ForCausalLM" in (
        data.get("architectures") or []
    )


def llama_config(internlm2: Mapping[str, Any], source: str = "config.json") -> dict[str, Any]:
    """The LlamaConfig fields of an InternLM2 config.json, or a UserError naming what cannot convert."""
    if internlm2.get("bias", True):
        raise UserError(f"{source}: bias is true (or missing): InternLM2 with biases has no Llama form")
    missing = [
        k
        for k in ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size")
        if k not in internlm2
    ]
    if missing:
        raise UserError(f"{source}: missing {', '.join(missing)}: not an InternLM2 config")
    heads = int(internlm2["num_attention_heads"])
    kv_heads = int(internlm2.get("num_key_value_heads") or heads)
    if int(internlm2["hidden_size"]) % heads or heads % kv_heads:
        raise UserError(f"{source}: hidden_size / heads / key-value heads do not divide: layout unknown")
    config: dict[str, Any] = {k: internlm2[k] for k in SHARED_CONFIG_KEYS if k in internlm2}
    config.update(num_key_value_heads=kv_heads, attention_bias=False, mlp_bias=False,
                  architectures=["LlamaForCausalLM"], model_type="llama")  # fmt: skip
    scaling = internlm2.get("rope_scaling")
    if scaling:
        kind = scaling.get("type") or scaling.get("rope_type")
        if kind not in ("dynamic", "linear") or set(scaling) - {"type", "rope_type", "factor"}:
            raise UserError(f"{source}: rope_scaling {scaling} is not one InternLM2's code knows")
        config["rope_scaling"] = {"rope_type": kind, "factor": float(scaling["factor"])}
    return config


def split_wqkv(
    weight: torch.Tensor, heads: int, kv_heads: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) rows of a fused `wqkv` weight (or a LoRA B: any tensor whose rows are wqkv's)."""
    groups = heads // kv_heads
    rows = weight.shape[0]
    if rows % (kv_heads * (groups + 2)):
        raise UserError(f"wqkv has {rows} rows: not {kv_heads} key-value heads x ({groups} + 2) head rows")
    head_dim = rows // (kv_heads * (groups + 2))
    blocks = weight.reshape(kv_heads, groups + 2, head_dim, *weight.shape[1:])
    q = blocks[:, :groups].reshape(heads * head_dim, *weight.shape[1:])
    k = blocks[:, groups].reshape(kv_heads * head_dim, *weight.shape[1:])
    v = blocks[:, groups + 1].reshape(kv_heads * head_dim, *weight.shape[1:])
    return q.contiguous(), k.contiguous(), v.contiguous()


def convert_state_dict(
    state: Mapping[str, torch.Tensor], config: Mapping[str, Any]
) -> dict[str, torch.Tensor]:
    """An InternLM2 state dict (names as in its safetensors files) in Llama's names and layout."""
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    expected = set(TOP_LEVEL) | {
        f"model.layers.{i}.{w}.weight" for i in range(int(config["num_hidden_layers"])) for w in LAYER_WEIGHTS
    }
    if not config.get("tie_word_embeddings"):
        expected.add("output.weight")
    else:
        expected.discard("output.weight")
    missing = sorted(expected - set(state))
    if missing:
        raise UserError(
            f"{len(missing)} weights missing (a shard not there?), e.g. {', '.join(missing[:3])}; "
            "nothing was written"
        )
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name in TOP_LEVEL:
            out[TOP_LEVEL[name]] = tensor
            continue
        match = LAYER_KEY.match(name)
        if not match:
            raise UserError(f"weight {name}: not a name of InternLM2's layout; nothing was written")
        layer, rest = match.groups()
        prefix = f"model.layers.{layer}."
        if rest == "attention.wqkv.weight":
            for proj, part in zip(
                ("q_proj", "k_proj", "v_proj"), split_wqkv(tensor, heads, kv_heads), strict=True
            ):
                out[f"{prefix}self_attn.{proj}.weight"] = part
            continue
        module = rest.rsplit(".", 1)[0]
        if module not in RENAMES or not rest.endswith(".weight"):
            raise UserError(f"weight {name}: not a name of InternLM2's layout; nothing was written")
        out[f"{prefix}{RENAMES[module]}.weight"] = tensor
    return out


def _read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError(
            f"{folder}: no *.safetensors weights (a .bin checkpoint is not read: convert it first)"
        )
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state


def convert_checkpoint(src: str | Path, out: str | Path) -> Path:
    """Write `src` (an InternLM2 folder) as a LlamaForCausalLM folder `out`: config, weights (one
    safetensors file), the generation config and, where `src` has InternLM2's tokenizer.model, the
    tokenizer as a native one (`convert_tokenizer`). Returns `out`."""
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    src, out = Path(src), Path(out)
    check_output(out, src)
    source = json.loads((src / "config.json").read_text(encoding="utf-8"))
    fields = llama_config(source, str(src / "config.json"))
    dtype = source.get("torch_dtype") or source.get("dtype")
    state = convert_state_dict(_read_safetensors(src), fields)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    config = LlamaConfig(**{k: v for k, v in fields.items() if k not in ("architectures", "model_type")})
    config.architectures = ["LlamaForCausalLM"]
    if dtype:
        config.dtype = dtype
    config.save_pretrained(tmp)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt", "converted_from": "internlm2"})
    if (src / "generation_config.json").is_file():
        shutil.copy2(src / "generation_config.json", tmp / "generation_config.json")
    if (src / "tokenizer.model").is_file():
        convert_tokenizer(src, tmp)
    _mark(tmp, src, "checkpoint")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    log.info("Converted InternLM2 %s to LlamaForCausalLM in %s (%d tensors)", src, out, len(state))
    return out


def convert_adapter(src: str | Path, out: str | Path, config: Mapping[str, Any]) -> Path:
    """Write a PEFT LoRA adapter trained on InternLM2 (`src`) as one on the converted Llama model:
    `wqkv` -> q_proj/k_proj/v_proj (A shared, B's rows split as wqkv's), `wo`/`w1`/`w3`/`w2` renamed.
    `config`: the base model's InternLM2 config.json. Refuses what it cannot convert exactly."""
    from safetensors.torch import load_file, save_file

    src, out = Path(src), Path(out)
    check_output(out, src)
    where = src / "adapter_config.json"
    if not where.is_file():
        raise UserError(f"{src}: no adapter_config.json: not a PEFT adapter folder")
    adapter = json.loads(where.read_text(encoding="utf-8"))
    if adapter.get("peft_type", "LORA") != "LORA":
        raise UserError(f"{where}: peft_type {adapter.get('peft_type')!r}: only LoRA adapters convert")
    for key in ("rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform"):
        if adapter.get(key):
            raise UserError(f"{where}: {key} is set: per-module settings are not converted")
    for key in ("use_dora", "use_rslora", "lora_bias"):
        if adapter.get(key):
            raise UserError(f"{where}: {key} is true: only plain LoRA converts exactly")
    if adapter.get("bias", "none") != "none":
        raise UserError(f"{where}: bias {adapter.get('bias')!r}: only bias 'none' converts")
    targets = adapter.get("target_modules")
    targets = [targets] if isinstance(targets, str) else list(targets or [])
    unknown = [t for t in targets if t not in ADAPTER_TARGETS]
    if not targets or unknown:
        raise UserError(
            f"{where}: target_modules {targets}: only {sorted(ADAPTER_TARGETS)} (InternLM2's) convert"
        )
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    files = [p for p in (src / "adapter_model.safetensors",) if p.is_file()]
    if not files:
        raise UserError(f"{src}: no adapter_model.safetensors (a .bin adapter is not read)")
    weights = load_file(str(files[0]))
    converted: dict[str, torch.Tensor] = {}
    pattern = re.compile(
        r"^(.*\.layers\.\d+\.)(attention|feed_forward)\.(wqkv|wo|w1|w2|w3)\.(lora_[AB])\.weight$"
    )
    for name, tensor in weights.items():
        match = pattern.match(name)
        if not match:
            raise UserError(
                f"{src}/adapter_model.safetensors: {name}: not a LoRA weight of InternLM2's modules"
            )
        prefix, _, module, part = match.groups()
        block = "self_attn" if module in ("wqkv", "wo") else "mlp"
        if module == "wqkv":
            parts = split_wqkv(tensor, heads, kv_heads) if part == "lora_B" else (tensor,) * 3
            for proj, piece in zip(ADAPTER_TARGETS["wqkv"], parts, strict=True):
                converted[f"{prefix}{block}.{proj}.{part}.weight"] = piece.clone()
        else:
            converted[f"{prefix}{block}.{ADAPTER_TARGETS[module][0]}.{part}.weight"] = tensor
    new_targets = sorted({name for t in targets for name in ADAPTER_TARGETS[t]})
    adapter.update(target_modules=new_targets, base_model_name_or_path=None)
    tmp = out.with_name(out.name + ".partial")  # `out` appears whole or not at all
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(converted, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
    (tmp / "adapter_config.json").write_text(json.dumps(adapter, indent=2) + "\n", encoding="utf-8")
    _mark(tmp, src, "adapter")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def convert_adapter_tree(root: str | Path, out: str | Path, config: Mapping[str, Any]) -> list[Path]:
    """Convert every adapter folder under `root` (any folder with adapter_config.json, e.g. the
    released ESC-RANK's 14) into the same relative place under `out`. They are written beside `out`
    first, which is replaced only when all converted: one that cannot convert stops the whole tree
    with its error and leaves `out` as it was."""
    root, out = Path(root), Path(out)
    check_output(out, root)
    folders = sorted(p.parent for p in root.rglob("adapter_config.json"))
    if not folders:
        raise UserError(f"{root}: no adapter folder (adapter_config.json) under it")
    written = []
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for folder in folders:
            written.append(convert_adapter(folder, staging / folder.relative_to(root), config))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _mark(staging, root, "adapters")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return [out / p.relative_to(staging) for p in written]


def convert_tokenizer(src: str | Path, out: str | Path) -> Path:
    """Write InternLM2's sentencepiece tokenizer (`src`: tokenizer.model + tokenizer_config.json) as
    a native `tokenizers` tokenizer in `out` (tokenizer.json, tokenizer_config.json): the same ids,
    special tokens (added tokens, split out before the model), BOS added as `add_bos_token` says,
    and the chat template. Built by transformers' `SpmConverter.build_tokenizer_from_spm_proto`,
    which follows the sentencepiece model's own settings, in its legacy mode (each text between
    special tokens gets sentencepiece's dummy prefix, as InternLM2's slow tokenizer encodes it)."""
    import inspect

    from tokenizers import AddedToken, processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

    if "legacy" not in inspect.signature(SpmConverter.build_tokenizer_from_spm_proto).parameters:
        import transformers

        raise UserError(
            f"converting InternLM2's tokenizer needs a transformers whose SpmConverter follows the "
            f"sentencepiece model's own settings (5.24 does; this is {transformers.__version__}): convert "
            "once where `make install` put it (`esc models convert-internlm2`, or a judge run), then reuse it"
        )
    src, out = Path(src), Path(out)
    model_file, config_file = src / "tokenizer.model", src / "tokenizer_config.json"
    for needed in (model_file, config_file):
        if not needed.is_file():
            raise UserError(
                f"{needed}: missing; an InternLM2 tokenizer is tokenizer.model + tokenizer_config.json"
            )
    config = json.loads(config_file.read_text(encoding="utf-8"))
    proto = import_protobuf("reading InternLM2's tokenizer.model").ModelProto()
    proto.ParseFromString(model_file.read_bytes())
    pieces = [(p.piece, p.score) for p in proto.pieces]
    kind = proto.trainer_spec.model_type  # 1 unigram, 2 BPE
    if kind not in (1, 2):
        raise UserError(f"{model_file}: sentencepiece model type {kind}: only BPE and unigram convert")
    vocab: Any = {piece: i for i, (piece, _) in enumerate(pieces)} if kind == 2 else pieces
    tokenizer = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab, legacy=True)
    special: dict[int, str] = {}
    for key, entry in (config.get("added_tokens_decoder") or {}).items():
        token_id, content = int(key), entry["content"]
        if token_id >= len(pieces) or pieces[token_id][0] != content:
            raise UserError(
                f"{config_file}: added token {content!r} is not piece {token_id} of tokenizer.model"
            )
        if entry.get("special", True):
            special[token_id] = content
    tokenizer.add_special_tokens(
        [AddedToken(t, normalized=False, special=True) for _, t in sorted(special.items())]
    )
    bos = config.get("bos_token") or "<s>"
    eos = config.get("eos_token") or "</s>"
    if config.get("add_bos_token", True):
        bos_id = tokenizer.token_to_id(bos)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0" + (f" {eos}:0" if config.get("add_eos_token") else ""),
            pair=f"{bos}:0 $A:0 $B:1" + (f" {eos}:1" if config.get("add_eos_token") else ""),
            special_tokens=[(bos, bos_id)]
            + ([(eos, tokenizer.token_to_id(eos))] if config.get("add_eos_token") else []),
        )
    named = {bos, eos, config.get("unk_token") or "<unk>", config.get("pad_token") or eos}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=bos,
        eos_token=eos,
        unk_token=config.get("unk_token") or "<unk>",
        pad_token=config.get("pad_token") or eos,
        additional_special_tokens=[t for _, t in sorted(special.items()) if t not in named],
        clean_up_tokenization_spaces=bool(config.get("clean_up_tokenization_spaces", False)),
        model_max_length=config.get("model_max_length") or 32768,
    )
    if config.get("chat_template"):
        fast.chat_template = config["chat_template"]
    fast.save_pretrained(out)
    return out


# --- converted once, kept in the cache: what the judge loads instead of the remote code ----------------


def _digest(files: list[Path], whole: bool) -> str:
    """A key for files: their bytes (`whole`), or their names and sizes (multi-GB weights)."""
    import hashlib

    h = hashlib.sha256()
    for file in sorted(files):
        h.update(
            file.name.encode() + b"\0" + (file.read_bytes() if whole else str(file.stat().st_size).encode())
        )
    return h.hexdigest()[:16]


def _cached(kind: str, key: str, source: Path, build: Callable[[Path], Path]) -> Path:
    """`cache_dir()/converted/<kind>-<key>`, built by `build(out)` the first time (one process at a
    time: the others wait and reuse it)."""
    from filelock import FileLock

    root = cache_dir() / "converted"
    out = root / f"{kind}-{key}"
    if (out / MARKER).is_file():
        return out
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{out.name}.lock")):
        if not (out / MARKER).is_file():
            log.warning("Converting %s %s to a native Llama form (once) into %s", kind, source, out)
            build(out)
    return out


def native_checkpoint(src: str | Path) -> Path:
    """The converted copy of the InternLM2 folder `src` (weights, tokenizer), made once and cached."""
    src = Path(src)
    small = [
        p
        for p in (src / "config.json", src / "tokenizer.model", src / "tokenizer_config.json")
        if p.is_file()
    ]
    key = _digest(small, whole=True) + _digest(sorted(src.glob("*.safetensors")), whole=False)
    return _cached("internlm2", key, src, lambda out: convert_checkpoint(src, out))


def native_adapter(src: str | Path, config: Mapping[str, Any]) -> Path:
    """The converted copy of a LoRA adapter trained on InternLM2, made once and cached."""
    src = Path(src)
    files = [p for p in (src / "adapter_config.json", src / "adapter_model.safetensors") if p.is_file()]
    key = (
        _digest(files, whole=True)
        + str(config.get("num_key_value_heads"))
        + str(config.get("num_attention_heads"))
    )
    return _cached("lora", key, src, lambda out: convert_adapter(src, out, config))


def local_internlm2_dir(model_cfg: Mapping[str, Any]) -> Path | None:
    """The local InternLM2 folder a `conf/model`-style mapping names, or None (a hub id, another model)."""
    name = model_cfg.get("name_or_path")
    if not name or not Path(str(name)).is_dir() or not is_internlm2_dir(str(name)):
        return None
    return Path(str(name))


def native_internlm2(
    model_cfg: Mapping[str, Any], adapters: Mapping[Any, Path]
) -> tuple[dict[str, Any], dict[Any, Path]] | None:
    """A model config that loads the converted copy of `model_cfg`'s InternLM2 folder (no remote
    code) and its adapters' converted copies under the same keys; None when `model_cfg` names no
    local InternLM2 folder (a hub id is left to the hub: download it first, then name the folder)."""
    src = local_internlm2_dir(model_cfg)
    if src is None:
        return None
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    out = native_checkpoint(src)
    native = {**model_cfg, "name_or_path": str(out), "trust_remote_code": False, "revision": None,
              "attn_implementation": None}  # fmt: skip
    return native, {key: native_adapter(path, config) for key, path in adapters.items()}
