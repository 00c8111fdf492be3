"""The paper's 14 targets (Table 2): every config composes, each local target's prompt is what its
authors' format gives for a 5-turn dialogue (rendered offline from its tokenizer files in
tests/fixtures/targets, see SOURCES.md there), the model class and remote code agree with the
model's config.json, and targets without downloadable weights are skipped by the grids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from esc.chat.backends._common import render_prompt
from esc.chat.build import backend_settings
from esc.config_rules import load_section
from esc.dialogues.record import Dialogue, Turn
from esc.errors import ConfigError
from esc.evaluate.run import unavailable_target
from esc.evaluate.sides import TargetSettings
from esc.models.loading import ModelSettings, auto_model_class, load_tokenizer
from tests.helpers import compose, run_entry

FIXTURES = Path(__file__).parent / "fixtures" / "targets"
PAPER_TARGETS = (
    "gpt4", "chatgpt", "vicuna_7b", "llama3_8b_instruct", "wizardlm2_7b", "qwen1_5_7b_chat", "chatglm3_6b",
    "yi_6b_chat", "extes_llama", "chatcounselor", "mindchat", "soulchat", "emollm", "mechat",
)  # fmt: skip
LOCAL = [t for t in PAPER_TARGETS if t not in ("gpt4", "chatgpt")]
FIXTURE_DIR = {"extes_llama": "llama3_8b_instruct"}  # LLaMA3-8B-Instruct fine-tune
OFFICIAL_SYSTEM = "You are a helpful assistant!"  # what the official evaluate.py inserts
TURNS = 5


def target(name: str):
    return compose([f"target={name}"], config_name="evaluate").target


def typed_target(node: Any) -> TargetSettings:
    """A target's node as evaluate.py's validation gives it to the job."""
    plain = node if isinstance(node, dict) else OmegaConf.to_container(node, resolve=True)
    return load_section("target", TargetSettings, plain)


def five_turn_view(system: str | None) -> list[dict[str, str]]:
    """The target's view at the 5th turn: 5 seeker messages, 4 replies, the 5th reply to come."""
    dialogue = Dialogue(1, "en", "rp", "t", "card prompt", "opener", system)
    for k in range(1, TURNS + 1):
        dialogue.turns.append(Turn("roleplayer", f"seeker says {k}", "stop"))
        if k < TURNS:
            dialogue.turns.append(Turn("target", f"reply {k}", "stop"))
    return dialogue.target_view()


def seekers_and_replies() -> tuple[list[str], list[str]]:
    return [f"seeker says {k}" for k in range(1, TURNS + 1)], [f"reply {k}" for k in range(1, TURNS)]


def fixture_tokenizer(name: str, tmp_path: Path):
    """The target's tokenizer for rendering: a small BPE vocabulary with the special tokens and chat
    template of its fixture tokenizer_config.json, loaded through `load_tokenizer` with the target's
    model block (its `chat_template` override included)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    config = json.loads((FIXTURES / FIXTURE_DIR.get(name, name) / "tokenizer_config.json").read_text())

    def token(key: str) -> str | None:
        value = config.get(key)
        return value.get("content") if isinstance(value, dict) else value

    specials = {k: token(k) for k in ("bos_token", "eos_token", "unk_token", "pad_token") if token(k)}
    bpe = Tokenizer(models.BPE(unk_token=specials.get("unk_token")))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(
        ["seeker says reply"],
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=sorted(set(specials.values())), show_progress=False
        ),
    )
    folder = tmp_path / name
    folder.mkdir()
    bpe.save(str(folder / "tokenizer.json"))
    kept = {"tokenizer_class": "PreTrainedTokenizerFast", **specials}
    if config.get("chat_template"):
        kept["chat_template"] = config["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(kept))
    (folder / "config.json").write_text('{"model_type": "llama"}')  # a model directory, as the settings want
    model = dict(target(name).backend.model)
    return load_tokenizer(
        ModelSettings.of({**model, "name_or_path": str(folder), "trust_remote_code": False, "revision": None})
    )


# --- the expected prompts, from each author's own description ---------------------------------------


def chatml(system: str | None, default_system: str | None = None, bos: str = "") -> str:
    seekers, replies = seekers_and_replies()
    out = bos
    if system or default_system:
        out += f"<|im_start|>system\n{system or default_system}<|im_end|>\n"
    for k, seeker in enumerate(seekers):
        out += f"<|im_start|>user\n{seeker}<|im_end|>\n"
        if k < len(replies):
            out += f"<|im_start|>assistant\n{replies[k]}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def llama3(system: str) -> str:
    seekers, replies = seekers_and_replies()
    head = "<|begin_of_text|><|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>"
    out = head.format("system", system)
    for k, seeker in enumerate(seekers):
        out += f"<|start_header_id|>user<|end_header_id|>\n\n{seeker}<|eot_id|>"
        if k < len(replies):
            out += f"<|start_header_id|>assistant<|end_header_id|>\n\n{replies[k]}<|eot_id|>"
    return out + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def chatglm3(system: str) -> str:  # the tokenizer's build_chat_input: "[gMASK]sop<|role|>\n content..."
    seekers, replies = seekers_and_replies()
    out = f"[gMASK]sop<|system|>\n {system}"
    for k, seeker in enumerate(seekers):
        out += f"<|user|>\n {seeker}"
        if k < len(replies):
            out += f"<|assistant|>\n {replies[k]}"
    return out + "<|assistant|>"


VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def vicuna(system: str) -> str:  # FastChat vicuna_v1.1: ADD_COLON_TWO, sep " ", sep2 "</s>"; BOS first
    seekers, replies = seekers_and_replies()
    out = "<s>" + system + " "
    for k, seeker in enumerate(seekers):
        out += f"USER: {seeker} "
        out += f"ASSISTANT: {replies[k]}</s>" if k < len(replies) else "ASSISTANT:"
    return out


MECHAT_INSTRUCTION = (  # qiuhuachuan/smile README, get_instruction()
    "现在你扮演一位专业的心理咨询师，你具备丰富的心理学和心理健康知识。你擅长运用多种心理咨询技巧，例如认知行为疗法原则、"
    "动机访谈技巧和解决问题导向的短期疗法。以温暖亲切的语气，展现出共情和对来访者感受的深刻理解。以自然的方式与来访者进行对话，"
    "避免过长或过短的回应，确保回应流畅且类似人类的对话。提供深层次的指导和洞察，使用具体的心理概念和例子帮助来访者更深入地"
    "探索思想和感受。避免教导式的回应，更注重共情和尊重来访者的感受。根据来访者的反馈调整回应，确保回应贴合来访者的情境和需求。"
    "请为以下的对话生成一个回复。"
)


def mechat() -> str:  # README: the whole dialogue in one instruction, ChatGLM2 chat() with history=[]
    seekers, replies = seekers_and_replies()
    lines = []
    for k, seeker in enumerate(seekers):
        lines.append("来访者：" + seeker)
        if k < len(replies):
            lines.append("咨询师：" + replies[k])
    history = "\n".join(lines) + "\n" + "咨询师："
    query = f"{MECHAT_INSTRUCTION}\n\n对话：\n{history}"
    return "[gMASK]sop" + f"[Round 1]\n\n问：{query}\n\n答："


def soulchat() -> str:  # scutcyr/SoulChat README (multi-turn); ChatGLM-6B appends [gMASK] <sop>
    seekers, replies = seekers_and_replies()
    context = "\n".join(f"用户：{seekers[k]}\n心理咨询师：{replies[k]}" for k in range(len(replies)))
    return context + "\n用户：" + seekers[-1] + "\n心理咨询师：" + "[gMASK]<sop>"


EMOLLM_SYSTEM = (  # SmartFlowAI/EmoLLM xtuner_config/internlm2_chat_7b_full.py
    "你是心理健康助手EmoLLM，由EmoLLM团队打造。你旨在通过专业心理咨询，协助来访者完成心理诊断。"
    "请充分利用专业心理学知识与咨询技术，一步步帮助来访者解决心理问题。"
)

EXPECTED = {
    "qwen1_5_7b_chat": lambda: chatml(OFFICIAL_SYSTEM),
    "yi_6b_chat": lambda: chatml(OFFICIAL_SYSTEM),
    "mindchat": lambda: chatml(OFFICIAL_SYSTEM),
    "emollm": lambda: chatml(EMOLLM_SYSTEM, bos="<s>"),
    "llama3_8b_instruct": lambda: llama3(OFFICIAL_SYSTEM),
    "extes_llama": lambda: llama3(OFFICIAL_SYSTEM),
    "chatglm3_6b": lambda: chatglm3(OFFICIAL_SYSTEM),
    "vicuna_7b": lambda: vicuna(OFFICIAL_SYSTEM),
    "wizardlm2_7b": lambda: vicuna(OFFICIAL_SYSTEM),
    "chatcounselor": lambda: vicuna(VICUNA_SYSTEM),  # trained with FastChat's default system prompt
    "mechat": mechat,
    "soulchat": soulchat,
}


def test_every_paper_target_has_an_expected_prompt() -> None:
    assert sorted(EXPECTED) == sorted(LOCAL)


@pytest.mark.parametrize("name", LOCAL)
def test_a_five_turn_dialogue_renders_in_the_authors_format(name: str, tmp_path: Path) -> None:
    cfg = target(name)
    tokenizer = fixture_tokenizer(name, tmp_path)
    assert render_prompt(tokenizer, five_turn_view(cfg.system_prompt)) == EXPECTED[name]()


# --- configs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PAPER_TARGETS)
def test_every_target_composes_with_a_model_or_says_why_not(name: str) -> None:
    cfg = target(name)
    assert cfg.display_name and cfg.generation.temperature == 0.0
    if cfg.backend.kind != "hf":
        assert cfg.backend.model
        return
    if cfg.get("weights_unavailable"):
        assert cfg.backend.model.name_or_path is None
        assert "give a local copy" not in cfg.weights_unavailable  # evaluate.py adds the how-to itself
    else:
        assert "/" in cfg.backend.model.name_or_path, name  # a hub id


def test_llama3_decodes_as_the_official_script() -> None:
    for name in ("llama3_8b_instruct", "extes_llama"):
        cfg = target(name)
        assert cfg.generation.max_new_tokens == 256 and cfg.system_prompt == OFFICIAL_SYSTEM
        assert "<|eot_id|>" in cfg.generation.stop


def test_only_extes_llama_and_emollm_lack_downloadable_weights(tmp_path: Path) -> None:
    missing = {name for name in PAPER_TARGETS if unavailable_target(typed_target(target(name)))}
    assert missing == {"extes_llama", "emollm"}
    cfg = OmegaConf.to_container(target("emollm"), resolve=True)
    (tmp_path / "config.json").write_text("{}")  # a local copy: a model directory
    cfg["backend"] = {
        **cfg["backend"],
        "model": {**cfg["backend"]["model"], "name_or_path": str(tmp_path)},
    }
    assert unavailable_target(typed_target(cfg)) is None  # a local copy makes it runnable


@pytest.mark.parametrize(
    ("name", "fixture", "auto_class"),
    [
        ("chatglm3_6b", "chatglm3_6b", "AutoModelForCausalLM"),
        ("soulchat", "soulchat", "AutoModel"),  # ChatGLM-6B maps no AutoModelForCausalLM
        ("mechat", "mechat", "AutoModelForCausalLM"),
    ],
)
def test_remote_code_models_agree_with_their_config_json(name: str, fixture: str, auto_class: str) -> None:
    model = dict(target(name).backend.model)
    config = json.loads((FIXTURES / fixture / "config.json").read_text())
    assert model["trust_remote_code"] is bool(config.get("auto_map"))
    decided = auto_model_class(ModelSettings.of({**model, "auto_class": None}), str(FIXTURES / fixture))
    assert decided == auto_class
    assert (
        auto_model_class(ModelSettings.of(model), str(FIXTURES / fixture)) == auto_class
    )  # the config agrees


def test_auto_class_defaults_and_errors(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    model = {**target("chatglm3_6b").backend.model, "name_or_path": str(tmp_path), "auto_class": None}
    assert auto_model_class(ModelSettings.of(model), str(tmp_path)) == "AutoModelForCausalLM"
    with pytest.raises(ConfigError, match="config `backend.model.auto_class`"):  # refused by the settings
        backend_settings({"kind": "hf", "model": {**model, "auto_class": "AutoModelForVision2Seq"}})


def test_chatglm3_stops_on_its_role_tokens() -> None:
    config = json.loads((FIXTURES / "chatglm3_6b" / "tokenizer_config.json").read_text())
    added = {entry["content"] for entry in config["added_tokens_decoder"].values()}
    stops = set(target("chatglm3_6b").generation.stop)
    assert stops <= added | {"<|observation|>"}  # <|observation|> is a ChatGLM3 role token too


# --- the grid skips what cannot run ---------------------------------------------------------------


def test_a_target_without_weights_is_one_line_alone_and_skipped_in_a_sweep(tmp_path: Path) -> None:
    single = run_entry(
        "evaluate.py", ["target=extes_llama", "roleplayer=tiny", f"hydra.run.dir={tmp_path}/one"]
    )
    assert single.returncode == 2
    line = single.stderr.strip().splitlines()[-1]
    assert line.startswith("error: config `target.backend.model.name_or_path`: is not set, and extes_llama")
    sweep = run_entry(
        "evaluate.py",
        [
            "-m", "roleplayer=tiny", "target=extes_llama,tiny", "cards.limit=1", "cards.languages=[en]",
            "dialogue.turns=1", "engine.progress=false", "cache.enabled=false",
            f"hydra.sweep.dir={tmp_path}/grid",
        ],
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert "skipped extes_llama: no public weights exist" in sweep.stdout
    assert "1 dialogues completed, 0 failed" in sweep.stdout  # the grid went on to the next target
    assert list((tmp_path / "grid").glob("*/dialogues/tiny__tiny__en.jsonl"))
