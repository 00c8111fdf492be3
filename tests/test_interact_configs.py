"""Role-player and target configs compose; role-player prompts render as specified (en/zh, ICL, Baichuan).

Configs are composed from `tests/configs/interact.yaml` (a minimal primary config) with conf/ on the
search path, so these tests do not depend on conf/evaluate.yaml.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from omegaconf import DictConfig, OmegaConf

from esc.chat.base import Generation
from esc.errors import ConfigError, UserError
from esc.models.loading import DTYPES
from esc.paths import REPO_ROOT, data_dir
from esc.prompts import (
    CHECKSUMS_FILE,
    PROMPTS_FILE,
    example_dialogue,
    example_dialogue_source,
    load_registry,
    needs_example,
    prompt_ids,
    prompt_version,
    render_roleplayer_prompt,
    role_player_system_prompt,
    supporter_opener,
    texts_checksum,
    training_prompt_id,
    training_texts_version,
)
from tests.helpers import conf_node

CONF_DIR = REPO_ROOT / "conf"
TEST_CONF_DIR = Path(__file__).parent / "configs"
GROUPS = ("roleplayer", "target")
BACKEND_KINDS = {"hf", "openai", "baichuan_npc", "canned"}
# Validation instruments, not chatbots: canned supportive / dismissive replies (docs/seeker.md).
VALIDATION_TARGETS = {"canned_supportive", "canned_dismissive"}

# `???` values a user must give on the command line; every other value must be set.
MANDATORY = {
    ("roleplayer", "esc_role_local"): {"backend.adapter"},
    ("roleplayer", "esc_role_smollm2"): {"backend.adapter"},
    ("target", "openai_compatible"): {"backend.model", "backend.base_url"},  # your chatbot's server
}
# Targets without downloadable weights: name_or_path is null until a user gives a local copy
# (`weights_unavailable`; tests/test_targets.py).
LOCAL_WEIGHTS_ONLY = {("target", "extes_llama"), ("target", "emollm")}
# Paper §3.1 / Table 2: the 14 evaluated models, by display name.
PAPER_TARGETS = {
    "GPT-4", "ChatGPT", "Vicuna-7B-1.5", "WizardLM2-7B-Chat", "Qwen1.5-7B-Chat", "Chatglm3-6B",
    "Yi-6B-Chat", "LLaMa3-8B-Instruct", "ChatCounselor", "MindChat", "SoulChat", "EmoLLM", "MeChat",
    "ExTES-LLaMa",
}  # fmt: skip
ROLEPLAYER_CONFIGS = {
    "esc_role", "esc_role_local", "gpt4_zero_shot", "gpt4_icl", "gpt4_cot", "gpt4_icl_cot",
    "baichuan_npc_zero_shot", "baichuan_npc_icl", "baichuan_npc_cot", "baichuan_npc_icl_cot", "tiny",
    "smollm2", "esc_role_smollm2",
}  # fmt: skip
ROLEPLAYER_PROMPTS = {
    "esc_role_official", "esc_role_figure11", "gpt4_zero_shot", "gpt4_icl", "gpt4_cot", "gpt4_icl_cot",
    "baichuan_npc_zero_shot", "baichuan_npc_icl", "baichuan_npc_cot", "baichuan_npc_icl_cot", "tiny",
}  # fmt: skip

# The official ESC-Eval evaluation prompt (haidequanbu/ESC-Eval evaluate.py): the spec, verbatim.
OFFICIAL_EN_BEFORE = (
    "I hope you can role-play as a person with worries and communicate with an AI assistant. "
    "Here is your character card:'"
)
OFFICIAL_EN_AFTER = (
    "\n' Please simulate a natural human conversation as much as possible. Avoid behaving like a "
    "machine and refrain from mentioning that you are an AI assistant. Gradually reveal your worries "
    "throughout our multiple conversations."
)
OFFICIAL_EN_OPENER = (
    "Hello, I'm your personal assistant. You can confide in me about any worries or concerns you may have!"
)
OFFICIAL_ZH_BEFORE = "我希望你扮演成一名有烦恼的人与一个AI助手交流，以下是你的角色卡：“"
OFFICIAL_ZH_AFTER = (
    "\n 请尽可能模拟真实人类口语对话，不要表现得像一个机器，不要提及你是一名AI助手，"
    "在多次对话的交流中一次一次展现你的烦恼。"
)
OFFICIAL_ZH_OPENER = "你好，我是您的私人助手，您有任何烦恼都可以向我诉说！"

requires_cards = pytest.mark.skipif(
    not (data_dir() / "esc_eval" / "card_high_en.json").is_file(),
    reason="released role cards missing: run `make data`",
)
requires_dialogues = pytest.mark.skipif(
    not ((data_dir() / "esconv").is_dir() and (data_dir() / "smile" / "data").is_dir()),
    reason="ESConv / Smile data missing: run `make data`",
)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def compose_interact(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(TEST_CONF_DIR), version_base="1.3"):
        return compose(
            config_name="interact", overrides=[f"hydra.searchpath=[file://{CONF_DIR}]", *overrides]
        )


def missing_keys(node: DictConfig, prefix: str = "") -> set[str]:
    """Dotted paths of the `???` values under `node`."""
    found: set[str] = set()
    for key in node:
        path = f"{prefix}{key}"
        if OmegaConf.is_missing(node, key):
            found.add(path)
        elif OmegaConf.is_dict(node[key]):
            found |= missing_keys(node[key], f"{path}.")
    return found


ALL_OPTIONS = [(g, o) for g in GROUPS for o in options(g)]


# --- configs -------------------------------------------------------------------------------------


def test_every_paper_model_and_roleplayer_has_a_config() -> None:
    assert set(options("roleplayer")) == ROLEPLAYER_CONFIGS
    targets = [compose_interact([f"target={t}"]).target for t in options("target")]
    validation = {f"Canned {kind} replies (validation)" for kind in ("supportive", "dismissive")}
    assert {t.display_name for t in targets} == PAPER_TARGETS | {
        "Tiny (test)",
        "SmolLM2-135M-Instruct",
        "Your chatbot (OpenAI-compatible API)",
    } | validation


def test_default_composition_is_tiny() -> None:
    cfg = compose_interact([])
    assert cfg.roleplayer.name == "tiny" and cfg.target.name == "tiny"
    assert cfg.roleplayer.backend.model.tiny.vocab_size > 0  # conf/model/tiny.yaml reused, not copied
    assert cfg.target.backend.model == cfg.roleplayer.backend.model


@pytest.mark.parametrize(("group", "option"), ALL_OPTIONS)
def test_option_composes_and_resolves(group: str, option: str) -> None:
    node = compose_interact([f"{group}={option}"])[group]
    OmegaConf.to_container(node, resolve=True)  # `???` values may stay missing
    assert missing_keys(node) == MANDATORY.get((group, option), set())
    assert node.name == option
    assert isinstance(node.notes, str) and node.notes.strip()
    assert node.backend.kind in BACKEND_KINDS
    settings = Generation.model_validate(OmegaConf.to_container(node.generation)).settings()
    assert settings.temperature == 0.0 and settings.max_new_tokens > 0
    if group == "roleplayer":
        assert node.prompt in prompt_ids()
        assert node.icl == needs_example(node.prompt)
    else:
        assert node.display_name
        assert node.system_prompt is None or isinstance(node.system_prompt, str)
    if node.backend.kind == "hf":
        model = node.backend.model
        assert (
            model.get("tiny")
            or model.get("packaged")
            or OmegaConf.is_missing(model, "name_or_path")
            or model.name_or_path
            or (group, option) in LOCAL_WEIGHTS_ONLY  # null until a local copy is given
        )
        assert model.dtype in DTYPES
        assert isinstance(model.trust_remote_code, bool)
        assert model.chat_template is None or isinstance(model.chat_template, str)
        assert node.backend.batch_size == "auto" or node.backend.batch_size >= 1
    elif node.backend.kind == "canned":
        assert option in VALIDATION_TARGETS and set(node.backend.replies) == {"en", "zh"}
    elif (group, option) == (
        "target",
        "openai_compatible",
    ):  # the template: the user's server, no key, no price
        assert OmegaConf.is_missing(node.backend, "model") and node.backend.price is None
    else:
        assert node.backend.model and node.backend.api_key_env


@pytest.mark.parametrize("option", ["gpt4_icl", "gpt4_cot", "gpt4_icl_cot"])
def test_gpt4_variants_extend_zero_shot(option: str) -> None:
    base = compose_interact(["roleplayer=gpt4_zero_shot"]).roleplayer
    variant = compose_interact([f"roleplayer={option}"]).roleplayer
    assert variant.backend == base.backend and variant.generation == base.generation
    assert variant.prompt == option


def test_official_system_prompt_default() -> None:
    """Targets get the official script's default system message unless their format has no slot or
    their authors trained them with their own (tests/test_targets.py checks those prompts)."""
    without = {"soulchat", "mechat", "chatcounselor", *VALIDATION_TARGETS}  # chatcounselor: Vicuna's own
    own = {"emollm"}
    for option in options("target"):
        target = compose_interact([f"target={option}"]).target
        if option in own:
            assert target.system_prompt and target.system_prompt != "You are a helpful assistant!"
            continue
        expected = None if option in without else "You are a helpful assistant!"
        assert target.system_prompt == expected, option


def test_custom_chat_templates_render() -> None:
    """Every chat template written in a target config renders a conversation in order."""
    from transformers.utils.chat_template_utils import render_jinja_template

    checked = []
    for option in options("target"):
        target = compose_interact([f"target={option}"]).target
        template = (
            target.backend.get("model", {}).get("chat_template") if target.backend.kind == "hf" else None
        )
        if not template:
            continue
        messages = [
            {"role": "user", "content": "U1"},
            {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "U2"},
        ]
        if target.system_prompt:
            messages.insert(0, {"role": "system", "content": target.system_prompt})
        rendered, _ = render_jinja_template(
            conversations=[messages], chat_template=template, add_generation_prompt=True,
            bos_token="<s>", eos_token="</s>",
        )  # fmt: skip
        text = rendered[0]
        assert text.index("U1") < text.index("A1") < text.index("U2"), option
        if target.system_prompt:
            assert target.system_prompt in text, option
        checked.append(option)
    assert {"vicuna_7b", "wizardlm2_7b", "chatcounselor", "mindchat", "soulchat", "mechat"} <= set(checked)


def test_vicuna_template_is_fastchat_v1_1() -> None:
    from transformers.utils.chat_template_utils import render_jinja_template

    template = compose_interact(["target=vicuna_7b"]).target.backend.model.chat_template
    messages = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "how"},
    ]
    rendered, _ = render_jinja_template(
        conversations=[messages],
        chat_template=template,
        add_generation_prompt=True,
        bos_token="<s>",
        eos_token="</s>",
    )
    assert rendered[0] == "<s>SYS USER: hi ASSISTANT: hello</s>USER: how ASSISTANT:"


@pytest.mark.parametrize(("group", "option"), ALL_OPTIONS)
def test_backend_constructs_without_loading(
    group: str, option: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    try:
        from esc.chat.build import backend_settings, build_backend
    except ImportError as err:
        pytest.skip(f"chat backends not available yet ({err})")
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a backend constructor loaded a model or tokenizer")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    node = compose_interact([f"{group}={option}"])[group]
    placeholders = MANDATORY.get((group, option), set())
    if (group, option) in LOCAL_WEIGHTS_ONLY:
        placeholders = {*placeholders, "backend.model.name_or_path"}
    (tmp_path / "config.json").write_text("{}")  # a local model directory
    adapter = Path(__file__).parent / "fixtures" / "internlm2_tiny" / "adapter_a"  # a PEFT adapter
    for key in placeholders:  # a value of the key's type: a model or adapter folder, a server's URL
        value = "http://127.0.0.1:9/v1" if key.endswith("base_url") else "/nonexistent/placeholder"
        value = (
            str(adapter)
            if key.endswith("adapter")
            else str(tmp_path)
            if key.endswith("name_or_path")
            else value
        )
        OmegaConf.update(node, key, value, merge=False)
    backend_cfg = OmegaConf.to_container(node.backend, resolve=True)
    if backend_cfg.get("api_key_env"):
        monkeypatch.setenv(backend_cfg["api_key_env"], "sk-test-not-a-key")
    try:
        backend = build_backend(backend_settings(backend_cfg, f"{group}.backend"), key=f"{group}.backend")
    except AssertionError as err:
        pytest.skip(f"the {backend_cfg['kind']} backend is not lazy: {err}")
    try:
        assert backend.identity()["kind"] == backend_cfg["kind"]
    finally:
        backend.close()


# --- prompts -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cards() -> dict[str, str]:
    from esc.cards import load_cards

    try:
        return {lang: load_cards(language=lang, limit=1)[0].to_text() for lang in ("en", "zh")}
    except UserError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def examples() -> dict[str, str]:
    try:
        return {lang: example_dialogue(lang) for lang in ("en", "zh")}
    except UserError as err:
        pytest.skip(str(err))


def test_prompt_ids_and_versions() -> None:
    assert set(prompt_ids()) == ROLEPLAYER_PROMPTS
    for prompt_id in prompt_ids():
        version = prompt_version(prompt_id)
        assert isinstance(version, int) and version >= 1
    assert prompt_version("tiny") == prompt_version("esc_role_official")


def test_official_prompt_is_reproduced_exactly() -> None:
    card = "Age: Not mentioned\nGender: Female\nOccupation: Not mentioned\nProblem: P"
    system, opener = render_roleplayer_prompt("esc_role_official", "en", card)
    assert system == OFFICIAL_EN_BEFORE + card + OFFICIAL_EN_AFTER
    assert opener == OFFICIAL_EN_OPENER
    card_zh = "年龄：青年\n性别：未提及\n职业：未提及\n问题：P"
    system, opener = render_roleplayer_prompt("esc_role_official", "zh", card_zh)
    assert system == OFFICIAL_ZH_BEFORE + card_zh + OFFICIAL_ZH_AFTER
    assert opener == OFFICIAL_ZH_OPENER
    assert render_roleplayer_prompt("tiny", "zh", card_zh) == (system, opener)


def test_figure11_prompt_is_the_training_prompt() -> None:
    """The training samples and roleplayer=esc_role_local render from one registry entry."""
    assert training_prompt_id() == "esc_role_figure11"
    assert compose_interact(["roleplayer=esc_role_local"]).roleplayer.prompt == training_prompt_id()
    assert compose_interact(["roleplayer=esc_role_smollm2"]).roleplayer.prompt == training_prompt_id()
    card = "\n Age: Not mentioned\nGender: Female\nOccupation: Not mentioned\nProblem: P\n"
    for lang in ("en", "zh"):
        system, opener = render_roleplayer_prompt("esc_role_figure11", lang, card)
        assert system == role_player_system_prompt(card, lang)
        assert opener == supporter_opener(lang)
        assert card.strip() in system and card not in system  # the training path strips the card


def _edited_registry(tmp_path: Path, edit: Callable[[dict], None]) -> tuple[Path, Path]:
    """Copies of the prompt file (after `edit(data)`) and of the checksum table in tmp_path."""
    data = yaml.safe_load(PROMPTS_FILE.read_text(encoding="utf-8"))
    edit(data)
    prompts_file, checksums_file = tmp_path / "roleplayer.yaml", tmp_path / "checksums.json"
    prompts_file.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    checksums_file.write_text(CHECKSUMS_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    return prompts_file, checksums_file


def test_every_text_and_version_is_recorded_in_the_checksum_table() -> None:
    registry = load_registry()
    table = json.loads(CHECKSUMS_FILE.read_text(encoding="utf-8"))
    for prompt_id, entry in registry["roleplayer"].items():
        if entry["kind"] != "alias":
            assert table["roleplayer"][prompt_id][str(entry["version"])] == texts_checksum(entry), prompt_id
    training = registry["training"]
    assert table["training"][str(training["version"])] == texts_checksum(training)
    for history in [*table["roleplayer"].values(), table["training"]]:  # versions 1..n, none skipped
        assert sorted(map(int, history)) == list(range(1, len(history) + 1))


@pytest.mark.parametrize(
    ("section", "path"),
    [
        ("roleplayer.esc_role_figure11", ("roleplayer", "esc_role_figure11", "en")),
        ("roleplayer.esc_role_official", ("roleplayer", "esc_role_official", "zh")),
        ("roleplayer.gpt4_icl_cot", ("roleplayer", "gpt4_icl_cot", "en")),
        ("training", ("training", "card", "zh")),
        ("training", ("training", "scene_start", "zh")),
    ],
)
def test_a_text_change_without_a_version_bump_is_refused(
    tmp_path: Path, section: str, path: tuple[str, ...]
) -> None:
    def change_text(data: dict) -> None:
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = node[path[-1]] + " "

    current = training_texts_version() if section == "training" else prompt_version(path[1])
    changed = rf"{section}: its texts changed but its version \({current}\) did not"
    with pytest.raises(ValueError, match=changed):
        load_registry(*_edited_registry(tmp_path, change_text))

    def change_text_and_bump(data: dict) -> None:
        change_text(data)
        versioned = data["training"] if path[0] == "training" else data["roleplayer"][path[1]]
        versioned["version"] = current + 1

    prompts_file, checksums_file = _edited_registry(tmp_path, change_text_and_bump)
    want = rf'no checksum for {section} version {current + 1}; .* add  "{current + 1}": "[0-9a-f]{{64}}"'
    with pytest.raises(ValueError, match=want):
        load_registry(prompts_file, checksums_file)
    # recording the new version's checksum (the line the error names) makes the file load again
    data = yaml.safe_load(prompts_file.read_text(encoding="utf-8"))
    table = json.loads(checksums_file.read_text(encoding="utf-8"))
    if section == "training":
        table["training"][str(current + 1)] = texts_checksum(data["training"])
    else:
        table["roleplayer"][path[1]][str(current + 1)] = texts_checksum(data["roleplayer"][path[1]])
    checksums_file.write_text(json.dumps(table), encoding="utf-8")
    assert load_registry(prompts_file, checksums_file)


def test_a_shared_text_change_demands_a_bump_of_every_entry_that_uses_it(tmp_path: Path) -> None:
    """A YAML anchor (here the Table 12 CoT note) is part of every entry that refers to it."""

    def change_note(data: dict) -> None:
        note = data["roleplayer"]["_baichuan_cot_note"]  # the same object in every entry using it
        note["en"] += " "
        data["roleplayer"]["baichuan_npc_cot"]["version"] = 2

    prompts_file, checksums_file = _edited_registry(tmp_path, change_note)
    table = json.loads(checksums_file.read_text(encoding="utf-8"))
    registry_texts = yaml.safe_load(prompts_file.read_text(encoding="utf-8"))["roleplayer"]
    table["roleplayer"]["baichuan_npc_cot"]["2"] = texts_checksum(registry_texts["baichuan_npc_cot"])
    checksums_file.write_text(json.dumps(table), encoding="utf-8")
    with pytest.raises(ValueError, match=r"roleplayer.baichuan_npc_icl_cot: its texts changed"):
        load_registry(prompts_file, checksums_file)


@requires_cards
@requires_dialogues
@pytest.mark.parametrize("prompt_id", sorted(ROLEPLAYER_PROMPTS))
@pytest.mark.parametrize("language", ["en", "zh"])
def test_every_prompt_renders(
    prompt_id: str, language: str, cards: dict[str, str], examples: dict[str, str]
) -> None:
    card = cards[language]
    example = examples[language] if needs_example(prompt_id) else None
    system, opener = render_roleplayer_prompt(prompt_id, language, card, example)
    assert opener.strip()
    if prompt_id.startswith("baichuan_npc"):
        profile = json.loads(system)
        assert list(profile) == ["basic_info", "reply_restrict", "opener", "dialogue_sample"]
        assert profile["basic_info"] == card
        assert profile["dialogue_sample"] == example  # None unless ICL
        assert ("English" if language == "en" else "中文") in profile["reply_restrict"]
        assert ("中文" if language == "en" else "English") not in profile["reply_restrict"]
        assert profile["opener"]
    else:
        assert card.strip() in system
        if example is not None:
            assert example in system
        assert "{card}" not in system and "{dialogue}" not in system
    if language == "zh":
        assert "你" in system
    if needs_example(prompt_id):
        with pytest.raises(ValueError, match="needs an example dialogue"):
            render_roleplayer_prompt(prompt_id, language, card, None)


def test_an_unknown_prompt_or_an_icl_flag_that_does_not_match_it_is_refused_by_the_settings() -> None:
    from esc.config_rules import load_section
    from esc.evaluate.sides import RoleplayerSettings

    node = conf_node("roleplayer", overrides=["roleplayer=tiny"], config_name="evaluate")
    with pytest.raises(ConfigError, match="config `roleplayer.prompt`: unknown role-player prompt 'no_such'"):
        load_section("roleplayer", RoleplayerSettings, {**node, "prompt": "no_such"})
    with pytest.raises(ConfigError, match="config `roleplayer.icl`: must be true: .* gpt4_icl is an ICL"):
        load_section("roleplayer", RoleplayerSettings, {**node, "prompt": "gpt4_icl", "icl": False})


def test_braces_in_the_card_are_kept() -> None:
    card = "Problem: a {dialogue} and a {card} in the text"
    system, _ = render_roleplayer_prompt("gpt4_icl", "en", card, "seeker: hi")
    assert card in system and system.count("seeker: hi") == 1


@requires_dialogues
def test_example_dialogue_is_figure_11_and_cut_at_turn_boundaries() -> None:
    full = example_dialogue("en", max_chars=100_000)
    lines = full.split("\n")
    assert lines[:3] == [
        "seeker: hello",
        "supporter: Hi, how are you today?",
        "seeker: could be better how are u",
    ]
    assert "seeker: i cant afford a house" in lines
    assert example_dialogue_source("en").startswith("esconv/train/")
    assert all(line.startswith(("seeker: ", "supporter: ")) for line in lines)
    speakers = [line.split(":")[0] for line in lines]
    assert all(a != b for a, b in zip(speakers, speakers[1:], strict=False))  # speakers alternate
    for limit in (50, 300, 1000):
        cut = example_dialogue("en", max_chars=limit)
        assert len(cut) <= limit and full.startswith(cut) and cut.split("\n") == lines[: cut.count("\n") + 1]
    assert len(example_dialogue("en", max_chars=5)) == 5  # a first turn longer than the limit is cut
    zh = example_dialogue("zh")
    assert zh.startswith("求助者：") and "\n咨询师：" in zh
    assert example_dialogue_source("zh") == "smile/0"
    assert example_dialogue("zh") == zh  # deterministic
