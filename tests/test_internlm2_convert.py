"""InternLM2 -> native Llama: the converted checkpoint and adapters compute InternLM2's own logits.

The reference is independent of the converter: logits of tests/fixtures/internlm2_tiny recorded
once with InternLM2's published modelling code (remote code, transformers 4.44.2; SOURCES.md), each
adapter merged into that model's own fused `wqkv`. Here the converted checkpoint runs as
transformers' LlamaForCausalLM and the converted adapters through peft, with no remote code.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from esc.errors import UserError
from esc.models import internlm2
from esc.models.internlm2 import convert_adapter, convert_checkpoint, llama_config, split_wqkv

FIXTURE = Path(__file__).parent / "fixtures" / "internlm2_tiny"
REFERENCE = load_file(str(FIXTURE / "reference_logits.safetensors"))
INPUTS = json.loads((FIXTURE / "reference.json").read_text())["inputs"]
CONFIG = json.loads((FIXTURE / "base" / "config.json").read_text())
# float32: the largest difference of any logit, relative to the largest reference logit (about 10);
# a permuted split is off by more than 1e-2 absolute
TOLERANCE = 1e-5 * max(t.abs().max().item() for t in REFERENCE.values())


def logits(model, key: str) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([INPUTS[key]])).logits[0]


def converted_model(tmp_path: Path):
    from transformers import LlamaForCausalLM

    out = convert_checkpoint(FIXTURE / "base", tmp_path / "llama")
    return LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()


def with_adapter(tmp_path: Path, base, name: str):
    from peft import PeftModel

    adapter = convert_adapter(FIXTURE / name, tmp_path / f"{name}-llama", CONFIG)
    return PeftModel.from_pretrained(base, adapter).eval()


def worst(model, prefix: str) -> float:
    return max((logits(model, key) - REFERENCE[f"{prefix}/{key}"]).abs().max().item() for key in INPUTS)


def test_internlm2_convert_base_gives_internlm2s_logits(tmp_path: Path) -> None:
    model = converted_model(tmp_path)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert worst(model, "base") < TOLERANCE  # "long" (40 tokens) is past max_position_embeddings: dynamic NTK


@pytest.mark.parametrize("adapter", ["adapter_a", "adapter_b"])
def test_internlm2_convert_wqkv_adapter_gives_internlm2s_logits(adapter: str, tmp_path: Path) -> None:
    model = with_adapter(tmp_path, converted_model(tmp_path), adapter)
    config = json.loads((tmp_path / f"{adapter}-llama" / "adapter_config.json").read_text())
    assert config["target_modules"] == ["k_proj", "q_proj", "v_proj"] and (
        config["r"],
        config["lora_alpha"],
    ) == (8, 16)
    assert worst(model, adapter) < TOLERANCE  # LoRA unmerged: W x + s B (A x)
    assert worst(model.merge_and_unload(), adapter) < TOLERANCE  # merged into q/k/v, as the reference
    assert (REFERENCE[f"{adapter}/short"] - REFERENCE["base/short"]).abs().max() > 0.1  # the adapter matters


def naive_split(weight: torch.Tensor, heads: int, kv_heads: int):
    """A plausible wrong layout: all query rows first, then all key rows, then all value rows."""
    head_dim = weight.shape[0] // (heads + 2 * kv_heads)
    return torch.split(weight, [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim])


def test_internlm2_convert_with_the_qkv_split_permuted_fails(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(internlm2, "split_wqkv", naive_split)
    assert worst(converted_model(tmp_path), "base") > 1e-2


def test_internlm2_convert_with_the_adapter_split_permuted_fails(tmp_path: Path, monkeypatch) -> None:
    base = converted_model(tmp_path)  # converted right
    assert worst(base, "base") < TOLERANCE
    calls = []

    def adapter_split_wrong(weight, heads, kv_heads):
        calls.append(weight.shape)
        return (
            naive_split(weight, heads, kv_heads)
            if weight.shape[1] == 8
            else split_wqkv(weight, heads, kv_heads)
        )

    monkeypatch.setattr(internlm2, "split_wqkv", adapter_split_wrong)
    model = with_adapter(tmp_path, base, "adapter_a")
    assert calls and worst(model, "adapter_a") > 1e-2


def test_split_wqkv_takes_each_key_value_heads_rows_in_turn() -> None:
    # 4 query heads, 2 key-value heads, head_dim 1: wqkv rows are [q0 q1 k0 v0 q2 q3 k1 v1]
    rows = torch.arange(8.0).reshape(8, 1)
    q, k, v = split_wqkv(rows, heads=4, kv_heads=2)
    assert (
        q.flatten().tolist() == [0, 1, 4, 5]
        and k.flatten().tolist() == [2, 6]
        and v.flatten().tolist() == [3, 7]
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bias": True}, "bias is true"),
        ({"rope_scaling": {"type": "yarn", "factor": 2.0}}, "rope_scaling"),
        ({"num_key_value_heads": 3}, "do not divide"),
    ],
)
def test_internlm2_convert_refuses_configs_it_cannot_convert(change: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        llama_config({**CONFIG, **change}, "config.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target_modules": ["wqkv", "lm_head"]}, "target_modules"),
        ({"rank_pattern": {"wqkv": 4}}, "rank_pattern"),
        ({"use_dora": True}, "use_dora"),
        ({"bias": "all"}, "bias"),
        ({"peft_type": "IA3"}, "peft_type"),
    ],
)
def test_internlm2_convert_refuses_adapters_it_cannot_convert(
    change: dict, message: str, tmp_path: Path
) -> None:
    src = tmp_path / "adapter"
    shutil.copytree(FIXTURE / "adapter_a", src)
    config = json.loads((src / "adapter_config.json").read_text())
    (src / "adapter_config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(UserError, match=message):
        convert_adapter(src, tmp_path / "out", CONFIG)
    assert not (tmp_path / "out").exists()  # nothing written


def test_esc_models_convert_internlm2_writes_the_base_and_every_adapter(tmp_path: Path, capsys) -> None:
    from esc.cli import main

    released = tmp_path / "ESC-RANK"  # the released layout: one folder per dimension and language
    for name, source in (("fluency", "adapter_a"), ("fluency_en", "adapter_b")):
        shutil.copytree(FIXTURE / source, released / name)
    out = tmp_path / "converted"
    assert (
        main(["models", "convert-internlm2", str(FIXTURE / "base"), str(out), "--adapters", str(released)])
        == 0
    )
    assert json.loads((out / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    for name in ("fluency", "fluency_en"):
        config = json.loads((out / "adapters" / name / "adapter_config.json").read_text())
        assert config["target_modules"] == ["k_proj", "q_proj", "v_proj"]
    with pytest.raises(SystemExit) as stop:
        main(["models", "convert-internlm2", str(FIXTURE / "adapter_a"), str(tmp_path / "bad")])
    assert stop.value.code == 2 and "not an InternLM2 checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_internlm2_convert_never_replaces_its_source_or_a_foreign_folder(tmp_path: Path) -> None:
    src = tmp_path / "internlm2"
    shutil.copytree(FIXTURE / "base", src)
    for out in (src, tmp_path):  # the source itself, a folder holding it
        with pytest.raises(UserError, match="is, holds or lies in"):
            convert_checkpoint(src, out)
    foreign = tmp_path / "my-models"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not written by this converter"):
        convert_checkpoint(src, foreign)
    assert (foreign / "notes.txt").read_text() == "mine" and (src / "model.safetensors").is_file()
    done = convert_checkpoint(src, tmp_path / "llama")
    assert convert_checkpoint(src, done) == done  # its own output may be replaced (a rerun)
    assert not any(p.name.startswith("tokenizer") for p in done.iterdir())  # not converted yet: none


def test_internlm2_convert_refuses_a_checkpoint_with_weights_missing(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    src = tmp_path / "internlm2"
    shutil.copytree(FIXTURE / "base", src)
    state = load_file(str(src / "model.safetensors"))
    del state["model.layers.1.feed_forward.w2.weight"]  # as if one shard of two were not there
    save_file(state, str(src / "model.safetensors"))
    with pytest.raises(UserError, match="1 weights missing.*layers.1.feed_forward.w2"):
        convert_checkpoint(src, tmp_path / "llama")
    assert not (tmp_path / "llama").exists()


def test_internlm2_convert_never_removes_a_folder_it_did_not_make(tmp_path: Path) -> None:
    """Issue 50: `convert-internlm2 m.partial m` deleted its own source, and converting to `w` deleted
    an unrelated `w.partial/`. The conversion is written in a folder made for it, and only that goes."""
    from esc.cli import main

    src = tmp_path / "m.partial"  # a source whose name is what the old converter took for its temp folder
    shutil.copytree(FIXTURE / "base", src)
    weights = (src / "model.safetensors").read_bytes()
    notes = tmp_path / "w.partial"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    assert main(["models", "convert-internlm2", str(src), str(tmp_path / "m")]) == 0
    assert main(["models", "convert-internlm2", str(src), str(tmp_path / "w")]) == 0
    assert main(["models", "convert-internlm2", str(src), str(tmp_path / "w")]) == 0  # a rerun replaces w
    assert (src / "model.safetensors").read_bytes() == weights and (notes / "notes.txt").read_text() == "mine"
    for out in ("m", "w"):
        assert json.loads((tmp_path / out / "config.json").read_text())["architectures"] == [
            "LlamaForCausalLM"
        ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "m.partial", "w", "w.partial"]  # no temp left


def released_and_converted(tmp_path: Path) -> tuple[Path, Path]:
    """The released ESC-RANK layout (two adapters) and its conversion with the base, by the CLI."""
    from esc.cli import main

    released = tmp_path / "ESC-RANK"
    for name, source in (("fluency", "adapter_a"), ("fluency_en", "adapter_b")):
        shutil.copytree(FIXTURE / source, released / name)
    out = tmp_path / "out"
    assert (
        main(["models", "convert-internlm2", str(FIXTURE / "base"), str(out), "--adapters", str(released)])
        == 0
    )
    return released, out


def files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_internlm2_convert_to_a_symbolic_link_is_refused_leaving_nothing(tmp_path: Path, capsys) -> None:
    """The old converter followed the link to check it, then could not replace it: it blamed "an
    existing file, where a folder is needed" and left a full `OUT.partial` beside it."""
    from esc.cli import main

    _, out = released_and_converted(tmp_path)
    before, link = files(out), tmp_path / "link"
    link.symlink_to(out, target_is_directory=True)
    listing = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SystemExit) as stop:
        main(["models", "convert-internlm2", str(FIXTURE / "base"), str(link)])
    assert stop.value.code == 2 and "link: is a symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == listing and files(out) == before


def test_internlm2_convert_refused_adapter_leaves_out_as_it_was(tmp_path: Path, capsys) -> None:
    """An adapter refused after the base had been written replaced OUT's base and removed its
    adapters; all of it is converted first in a folder of its own, and OUT replaced only then."""
    from esc.cli import main

    released, out = released_and_converted(tmp_path)
    before, listing = files(out), sorted(p.name for p in tmp_path.iterdir())
    assert len([p for p in before if p.name == "adapter_model.safetensors"]) == 2
    shutil.copytree(FIXTURE / "adapter_a", released / "zz_dora")
    config = json.loads((released / "zz_dora" / "adapter_config.json").read_text())
    (released / "zz_dora" / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(SystemExit) as stop:
        main(["models", "convert-internlm2", str(FIXTURE / "base"), str(out), "--adapters", str(released)])
    assert stop.value.code == 2 and "zz_dora/adapter_config.json: use_dora is true" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == listing and files(out) == before


def test_judge_conversion_follows_weights_changed_in_place(tmp_path: Path, monkeypatch) -> None:
    """Issue 50: the judge's cached conversion was keyed on file names and sizes, so weights changed in
    place with the same shapes (a re-download, a fine-tune) reused the old conversion. It is keyed on
    each file's content (hashed again only when its stat changed) and the converter's version."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    monkeypatch.setenv("ESC_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "internlm2"
    shutil.copytree(FIXTURE / "base", src)
    first = internlm2.native_checkpoint(src)
    file = src / "model.safetensors"
    state, size, stat = load_file(str(file)), file.stat().st_size, file.stat()
    state["model.tok_embeddings.weight"] = state["model.tok_embeddings.weight"] + 1.0  # a fine-tune
    with safe_open(str(file), framework="pt") as handle:
        metadata = handle.metadata()
    save_file(state, str(file), metadata=metadata)
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with its old time set back
    assert file.stat().st_size == size
    second = internlm2.native_checkpoint(src)
    converted = load_file(str(second / "model.safetensors"))["model.embed_tokens.weight"]
    assert second != first and torch.equal(converted, state["model.tok_embeddings.weight"])

    hashed = []
    real = internlm2.sha256_file
    monkeypatch.setattr(internlm2, "sha256_file", lambda path: hashed.append(path) or real(path))
    assert internlm2.native_checkpoint(src) == second and hashed == []  # unchanged: stat only, no re-hash
    monkeypatch.setattr(internlm2, "CONVERTER_VERSION", internlm2.CONVERTER_VERSION + 1)
    assert internlm2.native_checkpoint(src) not in (first, second)  # a new converter converts again


def test_a_killed_conversions_folders_are_cleaned_and_an_earlier_output_put_back(tmp_path: Path) -> None:
    """kill -9 leaves `.OUT.converting-HOST-PID-X` (gigabytes) and, between the two renames of a
    replacement, the earlier OUT inside `.OUT.replaced-HOST-PID-X`: the next conversion to OUT removes
    the first and puts the second back where OUT is missing; a live run's folders and other hosts' stay."""
    import subprocess

    from esc.models import internlm2

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that was a process on this host and is no more
    host = internlm2._owner_tag().rpartition("-")[0]
    out = tmp_path / "w"
    half = tmp_path / f".w.converting-{host}-{gone.pid}-abc123"
    (half / "shards").mkdir(parents=True)
    moved = tmp_path / f".w.replaced-{host}-{gone.pid}-def456"
    (moved / "w").mkdir(parents=True)
    (moved / "w" / "config.json").write_text("{}")
    live = tmp_path / f".w.converting-{host}-{os.getppid()}-ghi789"  # a running conversion's
    live.mkdir()
    other_host = tmp_path / f".w.converting-elsewhere-{gone.pid}-jkl012"
    other_host.mkdir()
    notes = tmp_path / "w.partial"
    notes.mkdir()
    internlm2._remove_leftovers(out)
    assert not half.exists() and not moved.exists()
    assert (out / "config.json").read_text() == "{}"  # the earlier conversion is back
    assert live.is_dir() and other_host.is_dir() and notes.is_dir()
