"""Load, check and render the prompt registry `roleplayer.yaml` (see its header for the format).

One file holds every role-player prompt (system message + supporter opener) and every other text of
the ESC-Role training samples, so the training data (esc/esc_role_samples) and the evaluation (esc/evaluate)
render from the same entries: the ESConv and Smile samples use the entry that
``training.roleplayer_prompt`` names (``esc_role_figure11``, paper Figure 11), which is the
`roleplayer.prompt` of ``conf/roleplayer/esc_role_local.yaml``.

Where each role-player text comes from:

- ``esc_role_official`` (and ``tiny``, an alias of it): the official ESC-Eval evaluation script,
  haidequanbu/ESC-Eval ``evaluate.py``, English and Chinese, quoted exactly with its quoting of the
  card (``card:'<card>\\n' Please ...`` and ``角色卡：“<card>\\n 请...``) and its supporter opener.
  The role card is inserted as given, not stripped, as the script inserts the released ``base``.
- ``esc_role_figure11``: the ESC-Role *training* prompt and opener (paper Figure 11; Chinese ours).
  The card is stripped of surrounding whitespace, as in the training data.
- ``gpt4_zero_shot`` / ``gpt4_icl`` / ``gpt4_cot`` / ``gpt4_icl_cot``: paper Table 11 (English
  verbatim); the Chinese versions are our translations.
- ``baichuan_npc_zero_shot`` / ``_icl`` / ``_cot`` / ``_icl_cot``: paper Table 12. The system
  message is a JSON object with the fields basic_info (the card), reply_restrict (the "Note"
  text), opener (the character's opening line, "I have some trouble to share.") and
  dialogue_sample (null, or the example dialogue). For Chinese cards the note "Make sure to use
  English throughout the entire conversation" becomes "use Chinese"; the Chinese notes are ours.

Table 11 and 12 entries do not say what the supporter says first; they use the official opener.

Versions: every role-player entry and the `training` section have a `version`, and
``checksums.json`` records the sha256 of the texts of every version ever released. Loading fails
when a text no longer matches the checksum recorded for its version (a text changed without a
version bump) or when a version has no checksum yet (the error names the line to add).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import string
from pathlib import Path
from typing import Any, Literal

import yaml

from esc.errors import UserError

Language = Literal["en", "zh"]
LANGUAGES: tuple[Language, ...] = ("en", "zh")
PROMPTS_FILE = Path(__file__).with_name("roleplayer.yaml")
CHECKSUMS_FILE = Path(__file__).with_name("checksums.json")
KINDS = ("template", "baichuan_npc_json", "alias")
KEY = "roleplayer.prompt"
_PLACEHOLDER = re.compile(r"\{(card|dialogue)\}")

# The texts of the `training` section and the str.format fields each must use.
TRAINING_FIELDS: dict[str, set[str]] = {
    "card": {"age", "gender", "occupation", "problem"},
    "not_mentioned": set(),
    "roleplay_system": {"role"},
    "character_system": {"role", "work", "profile"},
    "scene_start": set(),
}


# --- loading and checking ------------------------------------------------------------------------


def texts_checksum(texts: dict[str, Any]) -> str:
    """sha256 of an entry's (or the training section's) contents without its `version`: what must not
    change unless the version does. Canonical JSON (sorted keys, UTF-8), so YAML layout is free."""
    body = {k: v for k, v in texts.items() if k != "version"}
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def load_registry(prompts_file: Path = PROMPTS_FILE, checksums_file: Path = CHECKSUMS_FILE) -> dict[str, Any]:
    """Read and check a prompt file: {"roleplayer": {id: entry}, "training": section}.

    Raises ValueError for a malformed file or a text that does not match the checksum recorded
    for its version in `checksums_file`.
    """
    data = yaml.safe_load(Path(prompts_file).read_text(encoding="utf-8"))
    name = Path(prompts_file).name
    if not isinstance(data, dict) or set(data) != {"roleplayer", "training"}:
        raise ValueError(f"{name}: the top level must have exactly the sections `roleplayer` and `training`")
    entries = {k: v for k, v in data["roleplayer"].items() if not str(k).startswith("_")}
    for prompt_id, entry in entries.items():
        _check_entry(f"{name}: roleplayer.{prompt_id}", entry, entries)
    training = data["training"]
    _check_training(f"{name}: training", training, entries)
    _check_checksums(entries, training, Path(checksums_file))
    return {"roleplayer": entries, "training": training}


def _check_version(where: str, version: Any) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{where}: version must be an integer >= 1, got {version!r}")


def _check_languages(where: str, texts: Any, required: bool = True) -> None:
    if not isinstance(texts, dict) or not texts or not set(texts) <= set(LANGUAGES):
        raise ValueError(f"{where}: needs a text per language, languages drawn from {LANGUAGES}")
    if required and set(texts) != set(LANGUAGES):
        raise ValueError(f"{where}: needs exactly the languages {LANGUAGES}")
    if not all(isinstance(t, str) and t for t in texts.values()):
        raise ValueError(f"{where}: every text must be a non-empty string")


def _check_entry(where: str, entry: dict[str, Any], entries: dict[str, Any]) -> None:
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind should be one of {KINDS}, got {kind!r}")
    if kind == "alias":
        if entries.get(entry.get("of"), {}).get("kind") in (None, "alias"):
            raise ValueError(f"{where}: `of` must name a non-alias entry")
        return
    _check_version(where, entry.get("version"))
    if not isinstance(entry.get("icl"), bool):
        raise ValueError(f"{where}: icl must be true or false")
    if not isinstance(entry.get("strip_card", False), bool):
        raise ValueError(f"{where}: strip_card must be true or false")
    texts = ["opener"] + (["reply_restrict", "npc_opener"] if kind == "baichuan_npc_json" else [])
    for text in texts:
        _check_languages(f"{where}.{text}", entry.get(text))
    if kind == "template":
        for lang in LANGUAGES:
            found = set(_PLACEHOLDER.findall(entry.get(lang) or ""))
            want = {"card", "dialogue"} if entry["icl"] else {"card"}
            if found != want:
                raise ValueError(
                    f"{where}: the {lang} template has placeholders {sorted(found)}, expected {sorted(want)}"
                )


def _check_training(where: str, training: Any, entries: dict[str, Any]) -> None:
    if not isinstance(training, dict):
        raise ValueError(f"{where}: must be a mapping")
    _check_version(where, training.get("version"))
    target = entries.get(training.get("roleplayer_prompt"), {})
    if target.get("kind") != "template" or target.get("icl"):
        raise ValueError(f"{where}.roleplayer_prompt must name a non-ICL template entry of `roleplayer`")
    extra = set(training) - set(TRAINING_FIELDS) - {"version", "roleplayer_prompt"}
    if extra:
        raise ValueError(f"{where}: unknown text(s) {sorted(extra)}; known: {sorted(TRAINING_FIELDS)}")
    for text, fields in TRAINING_FIELDS.items():
        _check_languages(f"{where}.{text}", training.get(text), required=False)
        for lang, template in training[text].items():
            found = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
            if found != fields:
                raise ValueError(f"{where}.{text}.{lang}: fields {sorted(found)}, expected {sorted(fields)}")


def _check_checksums(entries: dict[str, Any], training: dict[str, Any], checksums_file: Path) -> None:
    """Every versioned text must have the checksum recorded for its version (see the module doc)."""
    recorded = json.loads(checksums_file.read_text(encoding="utf-8"))
    versioned = {f"roleplayer.{k}": v for k, v in entries.items() if v["kind"] != "alias"}
    versioned["training"] = training
    for name, texts in versioned.items():
        check_recorded(name, texts, recorded, checksums_file.name, PROMPTS_FILE.name)


def check_recorded(
    name: str, texts: dict[str, Any], recorded: dict[str, Any], checksums_name: str, prompts_name: str
) -> None:
    """ValueError unless `texts` (with its `version`) match the checksum `recorded` holds for
    `name` ("section" or "section.id") at that version; the message names the line to add."""
    section, _, prompt_id = name.partition(".")
    history = recorded.get(section, {})
    history = history.get(prompt_id, {}) if prompt_id else history
    version, checksum = str(texts["version"]), texts_checksum(texts)
    if version not in history:
        raise ValueError(
            f"{checksums_name}: no checksum for {name} version {version}; if this version is new, "
            f'add  "{version}": "{checksum}"  under {name} (keep the older versions\' lines)'
        )
    if history[version] != checksum:
        raise ValueError(
            f"{name}: its texts changed but its version ({version}) did not; bump `version` in "
            f'{prompts_name} and add  "<new version>": "{checksum}"  under {name} in {checksums_name}'
        )


def checked_question_texts(
    name: str, texts: dict[str, Any], source: Path, checksums_file: Path = CHECKSUMS_FILE
) -> str:
    """The sha256 of a question file's texts (`texts`, with its `version`), after checking it
    against the line `checksums_file` records for `name` ("section" or "section.id") at that
    version: one versioning scheme for every question file (role-player, emotion, rubrics, safety,
    pairwise, role-play metrics). A UserError naming `source` and the line to add otherwise."""
    if not isinstance(texts.get("version"), int):
        raise UserError(f"{source}: {name} needs an integer `version`")
    try:
        recorded = json.loads(Path(checksums_file).read_text(encoding="utf-8"))
        check_recorded(name, texts, recorded, Path(checksums_file).name, Path(source).name)
    except ValueError as err:
        raise UserError(f"{source}: {err}") from None
    return texts_checksum(texts)


@functools.cache
def _registry() -> dict[str, Any]:
    return load_registry()


# --- role-player prompts (evaluation and training) -----------------------------------------------


def prompt_ids() -> list[str]:
    """The ids `render_roleplayer_prompt` accepts (the values of `roleplayer.prompt`)."""
    return sorted(_registry()["roleplayer"])


def prompt_problem(prompt_id: Any) -> str | None:
    """a role-player prompt of esc/prompts/roleplayer.yaml"""
    if prompt_id in _registry()["roleplayer"]:
        return None
    return f"unknown role-player prompt {prompt_id!r}; known: {', '.join(prompt_ids())}"


def _entry(prompt_id: str) -> dict[str, Any]:
    """A prompt's entry (`prompt_id` one of `prompt_ids`: `roleplayer.prompt`, checked by its settings)."""
    entries = _registry()["roleplayer"]
    entry = entries[prompt_id]
    return entries[entry["of"]] if entry["kind"] == "alias" else entry


def prompt_version(prompt_id: str) -> int:
    """The version of a prompt's texts (an alias has its target's version)."""
    return int(_entry(prompt_id)["version"])


def needs_example(prompt_id: str) -> bool:
    """Whether the prompt embeds the one-shot example dialogue (an ICL variant)."""
    return bool(_entry(prompt_id)["icl"])


def _fill(template: str, values: dict[str, str]) -> str:
    """Replace {card} and {dialogue} in one pass, so braces inside the values are left alone."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def render_roleplayer_prompt(
    prompt_id: str, language: str, card_text: str, example_dialogue: str | None = None,
    seeker: str = "",
) -> tuple[str, str]:  # fmt: skip
    """(system message content, supporter opener) for a role card in `language` ("en" or "zh").

    `example_dialogue` is required by the ICL variants (see `example_dialogue()`; a role-player
    with one has `icl: true`, checked by its settings) and ignored by the others.
    `seeker`: a seeker profile's instruction in `language` (`esc.prompts.seekers.instruction`),
    one more line of the card: put after the card's text (stripped first where the entry strips
    it), on a line of its own, wherever the entry puts the card (a template's {card}, Baichuan-NPC's
    `basic_info`). Empty (the cooperative seeker): the card alone, as before profiles existed.
    """
    entry = _entry(prompt_id)
    if entry["icl"] and example_dialogue is None:
        raise ValueError(f"{prompt_id} is an ICL prompt and needs an example dialogue")
    opener = entry["opener"][language]
    if entry.get("strip_card", False):
        card_text = card_text.strip()
    if seeker:  # on a line of its own: one newline between them, none added to a card ending in one
        card_text = card_text + ("" if card_text.endswith("\n") else "\n") + seeker
    if entry["kind"] == "baichuan_npc_json":
        profile = {
            "basic_info": card_text,
            "reply_restrict": entry["reply_restrict"][language],
            "opener": entry["npc_opener"][language],
            "dialogue_sample": example_dialogue if entry["icl"] else None,
        }
        return json.dumps(profile, ensure_ascii=False), opener
    values = {"card": card_text, "dialogue": example_dialogue if entry["icl"] else ""}
    return _fill(entry[language], values), opener


# --- the texts of the ESC-Role training samples -------------------------------------------------


def training_prompt_id() -> str:
    """The role-player entry whose system prompt and opener the ESConv / Smile samples use."""
    return str(_registry()["training"]["roleplayer_prompt"])


def training_texts_version() -> int:
    """The version of the `training` section (card layout, role-play instructions, ...)."""
    return int(_registry()["training"]["version"])


def _training_language(what: str, language: str, have: Any = LANGUAGES) -> None:
    if language not in have:
        raise UserError(f"prompt `{what}` has no {language!r} version (have: {sorted(have)})")


def role_player_system_prompt(card_text: str, language: str) -> str:
    """Training system prompt: the role-player acts as the seeker described by `card_text`
    (the `training_prompt_id()` entry, card stripped)."""
    _training_language(training_prompt_id(), language)
    return render_roleplayer_prompt(training_prompt_id(), language, card_text)[0]


def supporter_opener(language: str) -> str:
    """The supporter's first message of the training prompt (Figure 11), used as the first user turn."""
    _training_language(training_prompt_id(), language)
    return str(_entry(training_prompt_id())["opener"][language])


def training_text(name: str, language: str, **fields: str) -> str:
    """Format a text of the `training` section by name (e.g. `roleplay_system`, `character_system`)."""
    training = _registry()["training"]
    if name not in TRAINING_FIELDS:
        raise UserError(f"unknown training text {name!r}; known: {', '.join(sorted(TRAINING_FIELDS))}")
    _training_language(name, language, training[name])
    return training[name][language].format(**fields)


def format_card(
    language: str,
    problem: str,
    age: str | None = None,
    gender: str | None = None,
    occupation: str | None = None,
) -> str:
    """Render a role card with the Age/Gender/Occupation/Problem lines; missing fields are 'not mentioned'."""
    missing = training_text("not_mentioned", language)
    return training_text(
        "card",
        language,
        age=age or missing,
        gender=gender or missing,
        occupation=occupation or missing,
        problem=problem.strip(),
    )
