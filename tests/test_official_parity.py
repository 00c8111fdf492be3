"""The `official` judge feeds InternLM2 exactly what score.py's `model.chat(...)` feeds it, and the
`paper` style renders Figures 12-19.

The official side is re-stated here from its sources, not from the code under test: the rubric
strings of score.py (vendored byte for byte, zero-width spaces included:
tests/fixtures/official/score_py.json), score.py's way of wrapping a dialogue, and InternLM2's
documented `chat()`: `build_inputs(tokenizer, query, history=[], meta_instruction)` writes
`<|im_start|>system\\n{meta_instruction}<|im_end|>\\n<|im_start|>user\\n{query}<|im_end|>\\n<|im_start|>assistant\\n`,
and the tokenizer (add_bos_token: true) puts BOS before it. The judge side is what `judge=esc_rank`
renders through its configured model (InternLM2's chat template, tests/fixtures/internlm2), so a
change of one character in a rubric, in the system turn or in the template fails here.
InternLM2's sentencepiece vocabulary could not be obtained (tests/fixtures/internlm2/SOURCES.md):
token ids are compared on a stand-in tokenizer of the same kind (metaspace BPE, InternLM2's special
tokens, BOS added by the tokenizer), path against path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from esc.scoring.judge import ScoreItem
from esc.scoring.judges import build_judge, judge_settings
from esc.scoring.rubrics import DIMENSION_KEYS, prompt_style
from tests.helpers import compose

FIXTURES = Path(__file__).parent / "fixtures"
SCORE_PY = json.loads((FIXTURES / "official" / "score_py.json").read_text(encoding="utf-8"))
INTERNLM2 = json.loads((FIXTURES / "internlm2" / "tokenizer_config.json").read_text(encoding="utf-8"))
# modeling_internlm2.py, InternLM2ForCausalLM.chat(): the default meta_instruction
META_INSTRUCTION = (
    "You are an AI assistant whose name is InternLM (书生·浦语).\n"
    "- InternLM (书生·浦语) is a conversational language model that is developed by Shanghai AI Laboratory "
    "(上海人工智能实验室). It is designed to be helpful, honest, and harmless.\n"
    "- InternLM (书生·浦语) can understand and communicate fluently in the language chosen by the user "
    "such as English and 中文."
)
# an 11-line dialogue in the official format: the assistant's opener, then 5 exchanges; it names the
# "AI assistant" inside a turn too (score.py's replacement applies there as well)
LINES = (
    ("assistant", "Hello, I am your AI assistant. How are you feeling today?"),
    ("user", "I can't sleep. My exams are next week and I keep failing the practice tests."),
    ("assistant", "That sounds exhausting. What happens when you try to sleep?"),
    ("user", "I lie awake going over everything I got wrong."),
    ("assistant", "Many students feel this way. Could you try a short wind-down routine?"),
    ("user", "Maybe. I just feel like everyone else is doing fine."),
    ("assistant", "Comparing yourself to others is hard. You are doing your best."),
    ("user", "Thanks. Talking to an AI assistant at 3 am is a bit strange, though."),
    ("assistant", "It is fine to reach out at any hour. Is there someone you trust to talk to?"),
    ("user", "My sister, maybe. I'll call her tomorrow."),
    ("assistant", "That is a good plan. I hope you get some rest tonight."),
)
CASES = [(dim, lang) for lang in ("en", "zh") for dim in DIMENSION_KEYS]


def score_py_query(index: int, language: str) -> str:
    """What score.py passes to chat() for dimension `index` (its prompt_list order)."""
    prompts = SCORE_PY["prompt_ZH" if language == "zh" else "prompt_EN"]
    official = [("AI assistant：" if role == "assistant" else "ESC-Role：") + text for role, text in LINES]
    dialogue = "\n\n".join(official).replace("AI assistant", "**AI助手**").replace("ESC-Role：", "**用户**")
    query = prompts[index] + "Dialogue between user and AI assistant: \n" + dialogue.strip() + "\n"
    return (
        query
        + "Based on the rules, give your "
        + SCORE_PY["dimention_list"][index]
        + " score (The number only) to the Dialogue."
    )


def build_inputs(query: str, meta_instruction: str = META_INSTRUCTION) -> str:
    """InternLM2's build_inputs with history=[] (add_bos_token true: the tokenizer adds BOS)."""
    prompt = f"<|im_start|>system\n{meta_instruction}<|im_end|>\n" if meta_instruction else ""
    return prompt + f"<|im_start|>user\n{query}<|im_end|>\n<|im_start|>assistant\n"


def standin_tokenizer(tmp_path: Path, model: dict):
    """A metaspace-BPE tokenizer with InternLM2's special tokens, chat template and BOS rule, loaded
    through the judge's model block (`load_tokenizer`), as the real one would be."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from esc.models.loading import ModelSettings, load_tokenizer

    specials = ["<unk>", "<s>", "</s>", *INTERNLM2["additional_special_tokens"]]
    bpe = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    bpe.decoder = decoders.Metaspace(prepend_scheme="first")
    corpus = [*SCORE_PY["prompt_EN"], *SCORE_PY["prompt_ZH"], META_INSTRUCTION, *(t for _, t in LINES)]
    alphabet = [f"<0x{b:02X}>" for b in range(256)]
    bpe.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=2000, special_tokens=specials + alphabet, show_progress=False)
    )
    bpe.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bpe.token_to_id("<s>"))]
    )
    folder = tmp_path / "internlm2-standin"
    folder.mkdir()
    bpe.save(str(folder / "tokenizer.json"))
    config = {k: INTERNLM2[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token", "chat_template")}
    config["additional_special_tokens"] = INTERNLM2["additional_special_tokens"]
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", **config})
    )
    (folder / "config.json").write_text('{"model_type": "llama"}')  # a model directory, as the settings want
    return load_tokenizer(
        ModelSettings.of({**model, "name_or_path": str(folder), "trust_remote_code": False, "revision": None})
    )


@pytest.fixture(scope="module")
def esc_rank(tmp_path_factory: pytest.TempPathFactory):
    """`judge=esc_rank` as rank.py composes it, with the stand-in tokenizer in place of the hub's."""
    root = tmp_path_factory.mktemp("adapters")  # a folder (the settings check it is one); no adapter read
    cfg = compose(["judge=esc_rank", f"judge.adapters.root={root}", "dialogues=x"], config_name="rank")
    from omegaconf import OmegaConf

    judge_cfg = OmegaConf.to_container(cfg.judge, resolve=True)
    judge = build_judge(judge_settings(judge_cfg))
    judge.backend._tokenizer = standin_tokenizer(tmp_path_factory.mktemp("tok"), judge_cfg["model"])
    return judge, judge_cfg


@pytest.mark.parametrize("dimension,language", CASES)
def test_official_internlm2_prompt_is_score_py_chat(esc_rank, dimension: str, language: str) -> None:
    judge, _ = esc_rank
    item = ScoreItem("d", dimension, language, LINES)
    expected = "<s>" + build_inputs(score_py_query(DIMENSION_KEYS.index(dimension), language))
    assert judge.prompt_text(item) == expected
    # token ids: the judge encodes its string whole; score.py's tokenizer call adds BOS itself
    query = score_py_query(DIMENSION_KEYS.index(dimension), language)
    official_ids = judge.backend.tokenizer([build_inputs(query)])
    assert judge.prompt_ids(item) == official_ids["input_ids"][0]


def test_official_internlm2_rubrics_keep_the_zero_width_spaces() -> None:
    style = prompt_style("official")
    counts = {
        (lang, dim): style.rubrics[lang][dim].count("\u200b")
        for lang in ("en", "zh")
        for dim in DIMENSION_KEYS
    }
    assert sum(counts.values()) == 20
    assert (
        counts[("en", "fluency")] == 4
        and counts[("en", "humanoid")] == 6
        and counts[("zh", "suggestion")] == 2
    )


def test_official_internlm2_parity_fails_on_one_changed_character(esc_rank, monkeypatch) -> None:
    """The comparison is exact: one character of a rubric or of the system turn breaks it."""
    import dataclasses

    from esc.scoring import rubrics

    judge, _ = esc_rank
    item = ScoreItem("d", "humanoid", "en", LINES)
    expected = "<s>" + build_inputs(score_py_query(DIMENSION_KEYS.index("humanoid"), "en"))
    assert judge.prompt_text(item) == expected
    style = judge.style
    changed = {lang: dict(r) for lang, r in style.rubrics.items()}
    changed["en"]["humanoid"] = changed["en"]["humanoid"].replace("\u200b", "", 1)
    monkeypatch.setattr(judge, "style", dataclasses.replace(style, rubrics=changed))
    assert judge.prompt_text(item) != expected
    monkeypatch.setattr(judge, "style", style)
    monkeypatch.setattr(judge, "default_system", META_INSTRUCTION.replace("中文.", "中文"))
    assert judge.prompt_text(item) != expected
    assert rubrics.prompt_style("official").version >= 2  # the fix changed the prompts: a new version


def test_official_internlm2_judge_runs_in_float16_as_score_py(esc_rank) -> None:
    _, judge_cfg = esc_rank
    assert judge_cfg["model"]["dtype"] == "float16"
    assert judge_cfg["model"]["chat_default_system"] == META_INSTRUCTION
    assert judge_cfg["min_answer_mass"] > 0  # a trained judge: low mass on the answers is invalid
    vllm = compose(["judge=esc_rank_vllm", "judge.adapters.root=/nowhere"], config_name="rank").judge
    assert vllm.engine == "vllm" and vllm.model.dtype == "float16"
    assert vllm.model.chat_default_system == META_INSTRUCTION


def test_official_internlm2_training_samples_carry_the_system_turn() -> None:
    """ESC-RANK trained on InternLM2 learns from the prompt the judge sends: same system turn."""
    from omegaconf import OmegaConf

    from esc.annotate.human_scores import Annotation
    from esc.judge_training.data import rank_sample

    cfg = compose(["+exp=train/esc_rank"])
    data = OmegaConf.to_container(cfg.data, resolve=True)
    assert data["chat_default_system"] == META_INSTRUCTION
    ann = Annotation("d", "en", LINES, "empathy", 3, "a")
    sample = rank_sample(ann, data["prompt"], data["chat_default_system"])
    item = ScoreItem("d", "empathy", "en", LINES)
    assert sample.messages[:-1] == item.prompt(prompt_style("official"), META_INSTRUCTION)
    assert sample.messages[-1] == {"role": "assistant", "content": "3"} and not sample.learn_end_of_turn


# --- the paper style: Figures 12-19 -------------------------------------------------------------------

FIGURE_OF = {  # (dimension, language) -> figure; the Chinese prompts differ only in fluency
    **{
        (d, lang): f
        for d, f in zip(DIMENSION_KEYS, (12, 14, 15, 16, 17, 18, 19), strict=True)
        for lang in ("en", "zh")
    },
    ("fluency", "zh"): 13,
}


def paper_figures() -> dict[int, str]:
    """Figure number -> its text, as printed (comment lines dropped)."""
    text = (FIXTURES / "official" / "paper_figures_12_19.txt").read_text(encoding="utf-8")
    figures = {}
    for block in text.split("\n=== ")[1:]:
        caption, _, body = block.partition("\n")
        figures[int(re.match(r"Figure (\d+)", caption).group(1))] = body
    return figures


def figure_chat(body: str, dialogue: str) -> list[dict[str, str]]:
    """A figure as a chat, with the documented joins: a PDF line that starts in lower case continues
    the line before; the literal "\\n" two figures print after their last rule is dropped; the
    [System] text is the system turn, [Instruction] .. [Output] the user turn."""
    lines = [line for line in body.split("\n") if line.strip()]
    joined: list[str] = []
    for line in lines:
        if joined and line[:1].islower():
            joined[-1] += " " + line
        else:
            joined.append(line.removesuffix("\\n"))
    text = "\n".join(joined).replace("{Dialogue }", dialogue)
    system, user = re.match(r"\[System\]\n(.*?)\n(\[Instruction\]\n.*\[Output\])$", text, re.S).groups()
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@pytest.mark.parametrize("dimension,language", CASES)
def test_paper_prompt_is_its_figure(dimension: str, language: str) -> None:
    from esc.scoring.rubrics import dialogue_text

    item = ScoreItem("d", dimension, language, LINES)
    dialogue = dialogue_text(LINES)
    expected = figure_chat(paper_figures()[FIGURE_OF[(dimension, language)]], dialogue)
    assert item.prompt(prompt_style("paper")) == expected


# --- old scores are refused, never mixed ---------------------------------------------------------------


def _set_prompt_version(node: object, version: int) -> None:
    if isinstance(node, dict):
        if node.get("style") == "official" and "version" in node:
            node["version"] = version
        for value in node.values():
            _set_prompt_version(value, version)
    elif isinstance(node, list):
        for value in node:
            _set_prompt_version(value, version)


def test_scores_of_the_old_official_prompt_are_refused_not_mixed(tmp_path: Path) -> None:
    from esc.dialogues.record import Dialogue, Turn
    from tests.helpers import run_entry

    folder = tmp_path / "dialogues"
    folder.mkdir()
    turns = [Turn("roleplayer", "I lost my job.", "stop"), Turn("target", "I am sorry.", "stop")]
    dialogue = Dialogue(1, "en", "rp", "bot", "sys", "Hello.", None, turns, "complete")
    (folder / "bot__rp__en.jsonl").write_text(json.dumps(dialogue.to_dict()) + "\n")
    out = tmp_path / "rank"
    args = ["judge=tiny", f"dialogues={folder}", "scoring.progress=false", "leaderboard.charts=false",
            "dimensions=[empathy]", f"hydra.run.dir={out}"]  # fmt: skip
    assert run_entry("rank.py", args).returncode == 0
    # the folder of an older run: its settings name the prompt of version 1
    settings = json.loads((out / "settings.json").read_text())
    _set_prompt_version(settings, 1)
    (out / "settings.json").write_text(json.dumps(settings))
    scores = (out / "scores" / "bot__rp__en__tiny.jsonl").read_bytes()
    again = run_entry("rank.py", args)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    [error] = [line for line in again.stderr.splitlines() if line.startswith("error:")]
    assert "version" in error and "hydra.run.dir=NEW_DIR" in error
    assert (out / "scores" / "bot__rp__en__tiny.jsonl").read_bytes() == scores
    # the report of score files made with two versions of the prompt is refused too
    old = [json.loads(line) for line in scores.decode().splitlines()]
    for record in old:
        record["prompt"]["version"] = 1
    (tmp_path / "old.jsonl").write_text("".join(json.dumps({**r, "dialogue_id": "x/1"}) + "\n" for r in old))
    mixed = run_entry("rank.py", ["mode=leaderboard", f"scores=[{out / 'scores'},{tmp_path / 'old.jsonl'}]",
                                  f"hydra.run.dir={tmp_path / 'board'}"])  # fmt: skip
    assert mixed.returncode == 2
    [error] = [line for line in mixed.stderr.splitlines() if line.startswith("error:")]
    assert re.search(r"official v1 \(\w{12}\), official v2 \(\w{12}\)", error), error


def test_esc_rank_recipe_defaults_to_the_released_adapters_settings() -> None:
    from omegaconf import OmegaConf

    peft = OmegaConf.to_container(compose(["+exp=train/esc_rank"]).peft, resolve=True)
    assert {k: peft[k] for k in ("r", "lora_alpha", "lora_dropout", "target_modules")} == {
        "r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["wqkv"],
    }  # fmt: skip
    tiny = OmegaConf.to_container(compose(["+exp=train/esc_rank", "model=tiny"]).peft, resolve=True)
    assert tiny["target_modules"] is None  # another model: its own linear layers
