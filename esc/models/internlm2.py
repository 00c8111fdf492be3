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
an unknown rope scaling, per-module ranks, DoRA, other modules, weights that do not match their
adapter config) is refused with one `error:` line, never guessed.

OUT is written as every output folder is (`esc.output_folder`): converted in a staging folder beside
it and put in place only when complete; OUT is new, empty or an earlier conversion (its marker,
`converted_from_internlm2.json`, lists the files it wrote, and only those are replaced); anything
else in OUT is refused, and kept with `force`; a staging folder a killed conversion left on this host
is removed by the next one. The judge's cached copies are keyed on the content of the files
converted (`content_key`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from esc.errors import DataError, UserError
from esc.hashing import sha256_file
from esc.jsonl import atomic_write_bytes, read_json
from esc.output_folder import Command, owner_tag, process_gone, staged
from esc.paths import cache_dir

if TYPE_CHECKING:
    from esc.models.loading import ModelSettings

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
# bump when what the conversion writes changes: the judge's cached conversions are then made again
CONVERTER_VERSION = 2
#: what a conversion wrote before its marker listed its files: the paths a conversion takes
LEGACY_CONVERTED = re.compile(
    r"converted_from_internlm2\.json|config\.json|generation_config\.json|model\.safetensors"
    r"|tokenizer(_config)?\.json|special_tokens_map\.json|chat_template\.jinja|adapters(/.+)?"
)
STAGING = ".converting-"  # before issue 62, a conversion was written in `.OUT.converting-HOST-PID-XXXX`
REPLACED = ".replaced-"  # and an earlier OUT waited in `.OUT.replaced-HOST-PID-XXXX/OUT` meanwhile
_owner_tag = owner_tag  # `HOST-PID`, as those folders' names spell it


def _legacy_conversion(out: Path) -> re.Pattern[str] | None:
    return LEGACY_CONVERTED if (out / MARKER).is_file() else None


#: how the converter writes its folder: `esc.output_folder`, the rule of every output folder
CONVERT = Command(
    "esc models convert-internlm2", MARKER, "written by this converter", input_noun="its source",
    flag="OUT", legacy=_legacy_conversion,
)  # fmt: skip


def _dead_here(tag: str) -> bool:
    """Whether the conversion that made a folder tagged `HOST-PID-...` ran on this host and is gone."""
    host, _, rest = tag.partition("-")
    pid = rest.partition("-")[0]
    return pid.isdigit() and process_gone(host, int(pid))


def _remove_leftovers(out: Path) -> None:
    """What a conversion killed before issue 62 left beside `out`: its half-written folder is
    removed; an earlier `out` it had moved aside is put back when `out` is missing (the kill came
    between the two renames), removed otherwise. (Today's are `esc.output_folder`'s to remove.)"""
    for path in sorted(out.parent.glob(f".{out.name}.*")):
        name = path.name.removeprefix(f".{out.name}")
        for kind in (STAGING, REPLACED):
            if not name.startswith(kind) or not path.is_dir() or not _dead_here(name.removeprefix(kind)):
                continue
            earlier = path / out.name
            if kind == REPLACED and earlier.is_dir() and not out.exists():
                os.rename(earlier, out)
                log.warning("%s: put back the earlier conversion a killed run had moved aside", out)
            shutil.rmtree(path, ignore_errors=True)


def check_output(out: Path, *sources: Path) -> None:
    """Refuse an output folder that is, holds or lies inside a source, that is a symbolic link or a
    file (what else OUT may hold is `esc.output_folder`'s rule, `CONVERT`)."""
    if out.is_symlink():
        raise UserError(
            f"{out}: is a symbolic link (to {os.readlink(out)}); the converter replaces its output folder "
            "whole and does not follow links: name the folder itself or a new one"
        )
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: is an existing file, where a folder is needed; name a new folder")
    target = out.resolve()
    for source in sources:
        src = source.resolve()
        if target == src or src.is_relative_to(target) or target.is_relative_to(src):
            raise UserError(
                f"{out}: the output folder is, holds or lies in {source}; give a folder apart from it"
            )


def _mark(folder: Path, source: Path, kind: str) -> None:
    """What a converted adapter folder under OUT/adapters/ was converted from."""
    text = json.dumps({"source": str(source), "kind": kind, "converter_version": CONVERTER_VERSION})
    (folder / MARKER).write_text(text + "\n", encoding="utf-8")


@contextlib.contextmanager
def _staged(out: Path, source: Path, kind: str, *sources: Path, force: bool = False) -> Iterator[Path]:
    """A folder made for this conversion beside `out` (`esc.output_folder.staged`), which replaces
    `out` only when the body ends without an error and is removed otherwise: `out` appears whole,
    new or as it was, and keeps any file this converter did not write (refused unless `force`)."""
    check_output(out, source, *sources)
    _remove_leftovers(out)
    record = {"source": str(source), "kind": kind, "converter_version": CONVERTER_VERSION}
    with staged(out, CONVERT, (source, *sources), force, record) as tmp:
        yield tmp


def check_source(src: Path) -> None:
    """A UserError unless `src` is an InternLM2 checkpoint folder, naming what it is instead."""
    if not src.exists():
        raise _not_found(src)
    if not is_internlm2_dir(src):
        raise UserError(f"{src}: not an InternLM2 checkpoint (its config.json has no model_type internlm2)")


def _not_found(src: Path) -> UserError:
    return UserError(f"{src}: not found: name an InternLM2 checkpoint folder (config.json, *.safetensors)")


def is_internlm2_dir(path: str | Path) -> bool:
    """Whether `path` holds an InternLM2 checkpoint (its config.json says so)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    data = read_json(config)
    return isinstance(data, dict) and (
        data.get("model_type") == "internlm2" or "InternLM2ForCausalLM" in (data.get("architectures") or [])
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


def _load_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """The tensors of one safetensors file; a DataError naming it when it is cut short or corrupt."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except SafetensorError as err:
        problem = f"unreadable safetensors file ({err}): cut short or corrupt; copy or download it again"
        raise DataError(file, None, problem) from None


def _read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError(
            f"{folder}: no *.safetensors weights (a .bin checkpoint is not read: convert it first)"
        )
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(_load_safetensors(file))
    return state


def convert_checkpoint(
    src: str | Path, out: str | Path, adapters: str | Path | None = None, force: bool = False
) -> Path:
    """Write `src` (an InternLM2 folder) as a LlamaForCausalLM folder `out`: config, weights (one
    safetensors file), the generation config and, where `src` has InternLM2's tokenizer.model, the
    tokenizer as a native one (`convert_tokenizer`); with `adapters`, every adapter folder under it
    into `out/adapters/` (`_write_adapter_tree`). All of it is written in a folder of its own and
    replaces `out` only when everything converted: a refusal leaves `out` as it was. `force`: write
    into a folder holding files this converter did not write (they are kept). Returns `out`."""
    src, out = Path(src), Path(out)
    roots = (Path(adapters),) if adapters is not None else ()
    if not src.exists():
        raise _not_found(src)
    check_output(out, src, *roots)
    if not (src / "config.json").is_file():
        raise UserError(f"{src}: no config.json: not an InternLM2 checkpoint folder")
    source = read_json(src / "config.json")
    fields = llama_config(source, str(src / "config.json"))
    with _staged(out, src, "checkpoint", *roots, force=force) as tmp:
        if roots:  # small, and refused before the base's gigabytes are written
            _write_adapter_tree(roots[0], tmp / "adapters", source)
        tensors = _write_checkpoint(src, tmp, source, fields)
    log.info("Converted InternLM2 %s to LlamaForCausalLM in %s (%d tensors)", src, out, tensors)
    return out


def _write_checkpoint(src: Path, tmp: Path, source: Mapping[str, Any], fields: dict[str, Any]) -> int:
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    state = convert_state_dict(_read_safetensors(src), fields)
    config = LlamaConfig(**{k: v for k, v in fields.items() if k not in ("architectures", "model_type")})
    config.architectures = ["LlamaForCausalLM"]
    dtype = source.get("torch_dtype") or source.get("dtype")
    if dtype:
        config.dtype = dtype
    config.save_pretrained(tmp)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt", "converted_from": "internlm2"})
    if (src / "generation_config.json").is_file():
        shutil.copy2(src / "generation_config.json", tmp / "generation_config.json")
    if (src / "tokenizer.model").is_file():
        convert_tokenizer(src, tmp)
    return len(state)


def convert_adapter(src: str | Path, out: str | Path, config: Mapping[str, Any]) -> Path:
    """Write a PEFT LoRA adapter trained on InternLM2 (`src`) as one on the converted Llama model:
    `wqkv` -> q_proj/k_proj/v_proj (A shared, B's rows split as wqkv's), `wo`/`w1`/`w3`/`w2` renamed.
    `config`: the base model's InternLM2 config.json. Refuses what it cannot convert exactly."""
    src, out = Path(src), Path(out)
    with _staged(out, src, "adapter") as tmp:
        _write_adapter(src, tmp, config)
    return out


ADAPTER_WEIGHT = re.compile(
    r"^(.*\.layers\.\d+\.)(attention|feed_forward)\.(wqkv|wo|w1|w2|w3)\.(lora_[AB])\.weight$"
)


def _adapter_settings(where: Path) -> dict[str, Any]:
    """adapter_config.json, or a UserError naming what of it does not convert exactly."""
    adapter = read_json(where)
    if not isinstance(adapter, dict):
        raise DataError(where, None, "expected a JSON object (a PEFT adapter config)")
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
    rank = adapter.get("r")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise UserError(f"{where}: r is {rank!r}: a LoRA rank is a whole number of at least 1")
    adapter["target_modules"] = targets
    return adapter


def _check_adapter_weights(
    weights: Mapping[str, torch.Tensor], adapter: Mapping[str, Any], file: Path, where: Path
) -> None:
    """Refuse weights that do not match their config: a module outside `target_modules` (PEFT would
    drop its weights: an adapter that does nothing), a target without weights, a lora_A without its
    lora_B, a rank other than `r` (PEFT would fail only when it loads it)."""
    parts: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    for name, tensor in weights.items():
        match = ADAPTER_WEIGHT.match(name)
        if not match:
            raise UserError(f"{file}: {name}: not a LoRA weight of InternLM2's modules")
        prefix, block, module, part = match.groups()
        parts.setdefault((f"{prefix}{block}.", module), {})[part] = tensor
    if not parts:
        raise UserError(f"{file}: holds no LoRA weights")
    modules = sorted({module for _, module in parts})
    if modules != sorted(set(adapter["target_modules"])):
        raise UserError(
            f"{where}: target_modules {adapter['target_modules']} but {file.name} holds weights of "
            f"{modules}: they must name the same modules (PEFT ignores weights outside target_modules)"
        )
    rank = adapter["r"]
    for (prefix, module), pair in sorted(parts.items()):
        if set(pair) != {"lora_A", "lora_B"}:
            missing = ({"lora_A", "lora_B"} - set(pair)).pop()
            raise UserError(f"{file}: {prefix}{module} has no {missing}: a LoRA weight is an A and a B")
        a, b = pair["lora_A"], pair["lora_B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != rank or b.shape[1] != rank:
            raise UserError(
                f"{file}: {prefix}{module} has lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)}, "
                f"not of rank r={rank} as {where.name} says; fix the config or the weights"
            )


def _write_adapter(src: Path, dest: Path, config: Mapping[str, Any]) -> None:
    """Convert the adapter `src` into the existing folder `dest` (see `convert_adapter`)."""
    from safetensors.torch import save_file

    where = src / "adapter_config.json"
    if not where.is_file():
        raise UserError(f"{src}: no adapter_config.json: not a PEFT adapter folder")
    adapter = _adapter_settings(where)
    file = src / "adapter_model.safetensors"
    if not file.is_file():
        raise UserError(f"{src}: no adapter_model.safetensors (a .bin adapter is not read)")
    weights = _load_safetensors(file)
    _check_adapter_weights(weights, adapter, file, where)
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    converted: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        prefix, _, module, part = ADAPTER_WEIGHT.match(name).groups()  # type: ignore[union-attr]
        block = "self_attn" if module in ("wqkv", "wo") else "mlp"
        if module == "wqkv":
            parts = split_wqkv(tensor, heads, kv_heads) if part == "lora_B" else (tensor,) * 3
            for proj, piece in zip(ADAPTER_TARGETS["wqkv"], parts, strict=True):
                converted[f"{prefix}{block}.{proj}.{part}.weight"] = piece.clone()
        else:
            converted[f"{prefix}{block}.{ADAPTER_TARGETS[module][0]}.{part}.weight"] = tensor
    new_targets = sorted({name for t in adapter["target_modules"] for name in ADAPTER_TARGETS[t]})
    adapter.update(target_modules=new_targets, base_model_name_or_path=None)
    dest.mkdir(parents=True, exist_ok=True)
    save_file(converted, str(dest / "adapter_model.safetensors"), metadata={"format": "pt"})
    (dest / "adapter_config.json").write_text(json.dumps(adapter, indent=2) + "\n", encoding="utf-8")


def _write_adapter_tree(root: Path, dest: Path, config: Mapping[str, Any]) -> list[Path]:
    folders = sorted(p.parent for p in root.rglob("adapter_config.json"))
    if not folders:
        raise UserError(f"{root}: no adapter folder (adapter_config.json) under it")
    written = []
    for folder in folders:
        target = dest / folder.relative_to(root)
        _write_adapter(folder, target, config)
        _mark(target, folder, "adapter")
        written.append(target)
    return written


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
    config = read_json(config_file)
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

HASHES = "file-hashes.json"  # in cache_dir()/converted: each file's sha256 by its path and stat


def _stamp(stat: os.stat_result) -> list[int]:
    """What changes when a file's bytes may have: an in-place write (size, mtime, ctime, which no
    `touch` can set back), a replacement (inode, device)."""
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]


def file_hashes(files: list[Path]) -> dict[Path, str]:
    """The sha256 of each file's bytes, hashed again only when its stat changed since the last call
    (cached in `cache_dir()/converted/file-hashes.json`): a rerun does not read gigabytes again."""
    from filelock import FileLock

    root = cache_dir() / "converted"
    root.mkdir(parents=True, exist_ok=True)
    book = root / HASHES
    with FileLock(str(root / f".{HASHES}.lock")):
        try:
            known = json.loads(book.read_text(encoding="utf-8")) if book.is_file() else {}
        except (UnicodeDecodeError, json.JSONDecodeError):
            log.warning("%s: not valid JSON; hashing the weights again", book)
            known = {}
        known = known if isinstance(known, dict) else {}
        hashes, changed = {}, False
        for file in files:
            path, stamp = str(file.resolve()), _stamp(file.stat())  # stat first: a later write shows
            entry = known.get(path)
            if not (isinstance(entry, dict) and entry.get("stat") == stamp and entry.get("sha256")):
                entry = known[path] = {"stat": stamp, "sha256": sha256_file(file)}
                changed = True
            hashes[file] = entry["sha256"]
        if changed:
            atomic_write_bytes(book, (json.dumps(known, indent=1, sort_keys=True) + "\n").encode())
    return hashes


def content_key(files: list[Path], *extra: object) -> str:
    """A cache key for a conversion of `files`: each one's name and content hash, the converter's
    version and `extra` (what else the conversion depends on)."""
    import hashlib

    digest = hashlib.sha256(f"converter {CONVERTER_VERSION}".encode())
    for file, sha in sorted(file_hashes(files).items()):
        digest.update(b"\0" + file.name.encode() + b"\0" + sha.encode())
    for value in extra:
        digest.update(b"\0" + str(value).encode())
    return digest.hexdigest()[:16]


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


CHECKPOINT_FILES = ("config.json", "generation_config.json", "tokenizer.model", "tokenizer_config.json")


def native_checkpoint(src: str | Path) -> Path:
    """The converted copy of the InternLM2 folder `src` (weights, tokenizer), made once and cached
    under the content of every file the conversion reads."""
    src = Path(src)
    files = [src / name for name in CHECKPOINT_FILES if (src / name).is_file()]
    key = content_key(files + sorted(src.glob("*.safetensors")))
    return _cached("internlm2", key, src, lambda out: convert_checkpoint(src, out))


def native_adapter(src: str | Path, config: Mapping[str, Any]) -> Path:
    """The converted copy of a LoRA adapter trained on InternLM2, made once and cached."""
    src = Path(src)
    files = [p for p in (src / "adapter_config.json", src / "adapter_model.safetensors") if p.is_file()]
    key = content_key(files, config.get("num_key_value_heads"), config.get("num_attention_heads"))
    return _cached("lora", key, src, lambda out: convert_adapter(src, out, config))


def local_internlm2_dir(model: ModelSettings) -> Path | None:
    """The local InternLM2 folder a `conf/model` node names, or None (a hub id, another model)."""
    name = model.name_or_path
    if not name or not Path(name).is_dir() or not is_internlm2_dir(name):
        return None
    return Path(name)


def native_internlm2(
    model: ModelSettings, adapters: Mapping[Any, Path]
) -> tuple[ModelSettings, dict[Any, Path]] | None:
    """A model node that loads the converted copy of `model`'s InternLM2 folder (no remote code) and
    its adapters' converted copies under the same keys; None when `model` names no local InternLM2
    folder (a hub id is left to the hub: download it first, then name the folder)."""
    src = local_internlm2_dir(model)
    if src is None:
        return None
    config = read_json(src / "config.json")
    out = native_checkpoint(src)
    native = model.model_copy(update={"name_or_path": str(out), "trust_remote_code": False, "revision": None,
                                      "attn_implementation": None})  # fmt: skip
    return native, {key: native_adapter(path, config) for key, path in adapters.items()}
