"""The prompt registry (esc/prompts) renders exactly what the two registries it replaced rendered.

`fixtures/roleplayer_prompts_before.json` was written by the old modules (esc/esc_role_samples/prompts.py and
esc/evaluate/prompts.py + roleplayer_prompts.yaml), before they were merged: every role-player
prompt for synthetic cards in both languages (whitespace and braces included), the training
texts, and, as sha256 only (third-party data is never committed), the renderings of the first
released cards and of the real ICL example dialogues.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from esc.errors import UserError
from esc.paths import data_dir
from esc.prompts import (
    example_dialogue,
    example_dialogue_source,
    format_card,
    needs_example,
    prompt_ids,
    prompt_version,
    render_roleplayer_prompt,
    role_player_system_prompt,
    supporter_opener,
    training_text,
    training_texts_version,
)

FIXTURE = Path(__file__).parent / "fixtures" / "roleplayer_prompts_before.json"
BEFORE = json.loads(FIXTURE.read_text(encoding="utf-8"))
LANGS = ("en", "zh")


def sha(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, ensure_ascii=False).encode("utf-8")).hexdigest()


def render_all(cards: dict[str, list[str]], examples: dict[str, str]) -> dict[str, list[list[str]]]:
    rendered = {}
    for pid in prompt_ids():
        for lang in LANGS:
            example = examples[lang] if needs_example(pid) else None
            renders = [render_roleplayer_prompt(pid, lang, card, example) for card in cards[lang]]
            rendered[f"{pid}/{lang}"] = [list(r) for r in renders]
    return rendered


def test_roleplayer_prompts_are_unchanged_byte_for_byte() -> None:
    assert {pid: prompt_version(pid) for pid in prompt_ids()} == BEFORE["versions"]
    assert render_all(BEFORE["cards"], BEFORE["examples"]) == BEFORE["roleplayer"]


def test_training_texts_are_unchanged_byte_for_byte() -> None:
    before, cards = BEFORE["training"], BEFORE["cards"]
    assert training_texts_version() == before["version"]
    for lang in LANGS:
        systems = [role_player_system_prompt(card, lang) for card in cards[lang]]
        assert systems == before[f"role_player_system/{lang}"]
        assert supporter_opener(lang) == before[f"supporter_opener/{lang}"]
        assert [
            format_card(lang, "  a problem {x}\n"),
            format_card(lang, "p", age="30", gender="F", occupation="dev"),
            format_card(lang, "p", age="", gender=None, occupation="x"),
        ] == before[f"format_card/{lang}"]
        roleplay = training_text("roleplay_system", lang, role="Sherlock {Holmes}")
        assert roleplay == before[f"roleplay_system/{lang}"]
    profile = "性格：{顽皮}\n能力：七十二变"
    character = training_text("character_system", "zh", role="孙悟空", work="西游记", profile=profile)
    assert character == before["character_system/zh"]
    assert training_text("scene_start", "zh") == before["scene_start/zh"]


def test_card_whitespace_is_stripped_for_training_and_kept_for_the_official_prompt() -> None:
    card = BEFORE["cards"]["en"][1]
    assert card != card.strip()
    training = role_player_system_prompt(card, "en")
    assert card.strip() in training and card not in training
    assert card in render_roleplayer_prompt("esc_role_official", "en", card)[0]


def test_training_language_errors_are_user_errors() -> None:
    with pytest.raises(UserError, match="no 'fr' version"):
        role_player_system_prompt("x", "fr")
    with pytest.raises(UserError, match="no 'fr' version"):
        supporter_opener("fr")
    with pytest.raises(UserError, match="character_system` has no 'en' version"):
        training_text("character_system", "en", role="r", work="w", profile="p")
    with pytest.raises(UserError, match="unknown training text"):
        training_text("nope", "en")
    # the evaluation path renders a card's language (en or zh, the card files'); its prompt id is
    # `roleplayer.prompt`, checked by `RoleplayerSettings` (tests/test_interact_configs.py)


@pytest.mark.skipif(
    not (data_dir() / "esc_eval" / "card_high_en.json").is_file()
    or not (data_dir() / "esconv").is_dir()
    or not (data_dir() / "smile" / "data").is_dir(),
    reason="released cards / ESConv / Smile missing: run `make data`",
)
def test_released_cards_and_icl_examples_render_unchanged() -> None:
    from esc.cards import load_cards

    data = BEFORE["data"]
    real = {lang: [c.to_text() for c in load_cards(language=lang, limit=2)] for lang in LANGS}
    if {lang: [sha(c) for c in real[lang]] for lang in LANGS} != data["cards_sha256"]:
        pytest.skip("the released card files differ from those the fixture was made with")
    examples = {lang: example_dialogue(lang) for lang in LANGS}
    rendered = render_all(real, examples)
    assert {k: sha(v) for k, v in rendered.items()} == data["roleplayer_sha256"]
    for lang in LANGS:
        assert sha([role_player_system_prompt(c, lang) for c in real[lang]]) == data["training_sha256"][lang]
        assert example_dialogue_source(lang) == data["example_dialogue"][lang]["source"]
        for n, digest in data["example_dialogue"][lang]["sha256"].items():
            assert sha(example_dialogue(lang, int(n))) == digest
