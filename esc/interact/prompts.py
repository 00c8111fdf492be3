"""Versioned role-player prompts: the system message and opener that make a model play the help-seeker.

The texts live in `roleplayer_prompts.yaml` next to this file; every entry has a `version` that is
bumped whenever its text changes (dialogue files record the id and version). Where each text
comes from:

- ``esc_role_official`` (and ``tiny``, an alias of it): the official ESC-Eval evaluation script,
  haidequanbu/ESC-Eval ``evaluate.py``, English and Chinese, quoted exactly with its quoting of the
  card (``card:'<card>\\n' Please ...`` and ``角色卡：“<card>\\n 请...``) and its supporter opener.
  The role card is inserted as given, not stripped, as the script inserts the released ``base``.
- ``esc_role_figure11``: the ESC-Role *training* prompt and opener of :mod:`esc.sft.prompts`
  (paper Figure 11), imported from there, so an adapter trained by ``train.py +exp=esc_role`` sees
  at evaluation exactly what it saw in training.
- ``gpt4_zero_shot`` / ``gpt4_icl`` / ``gpt4_cot`` / ``gpt4_icl_cot``: paper Table 11 (English
  verbatim); the Chinese versions are our translations.
- ``baichuan_npc_zero_shot`` / ``_icl`` / ``_cot`` / ``_icl_cot``: paper Table 12. The system
  message is a JSON object with the fields basic_info (the card), reply_restrict (the "Note"
  text), opener (the character's opening line, "I have some trouble to share.") and
  dialogue_sample (null, or the example dialogue). For Chinese cards the note "Make sure to use
  English throughout the entire conversation" becomes "use Chinese"; the Chinese notes are ours.

Table 11 and 12 entries do not say what the supporter says first; they use the official opener.

The ICL example (paper Appendix B.1: one-shot, truncated for length) is a fixed dialogue:
English, the ESConv training dialogue of the paper's Figure 11 (found by its text "i cant afford
a house"; the first training dialogue if absent); Chinese, the first Smile dialogue (0.json).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import yaml

from esc.errors import ConfigError, UserError
from esc.sft import prompts as training_prompts

PROMPTS_FILE = Path(__file__).with_name("roleplayer_prompts.yaml")
LANGUAGES = ("en", "zh")
KINDS = ("template", "training", "baichuan_npc_json", "alias")
KEY = "roleplayer.prompt"
_PLACEHOLDER = re.compile(r"\{(card|dialogue)\}")

# The ICL example: the dialogue of paper Figure 11 (ESConv train), else the first ESConv train
# dialogue; the first Smile dialogue for Chinese. Speaker labels as in the paper's Figure 10.
EXAMPLE_ESCONV_TEXT = "i cant afford a house"
EXAMPLE_LABELS = {"en": ("seeker: ", "supporter: "), "zh": ("求助者：", "咨询师：")}


@functools.cache
def _registry() -> dict[str, dict[str, Any]]:
    """All entries of the prompt file (keys starting with "_" hold YAML anchors only), checked."""
    data = yaml.safe_load(PROMPTS_FILE.read_text(encoding="utf-8"))
    entries = {k: v for k, v in data.items() if not str(k).startswith("_")}
    for prompt_id, entry in entries.items():
        _check_entry(prompt_id, entry, entries)
    return entries


def _check_entry(prompt_id: str, entry: dict[str, Any], entries: dict[str, Any]) -> None:
    where = f"{PROMPTS_FILE.name}: entry {prompt_id!r}"
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind should be one of {KINDS}, got {kind!r}")
    if kind == "alias":
        if entries.get(entry.get("of"), {}).get("kind") in (None, "alias"):
            raise ValueError(f"{where}: `of` must name a non-alias entry")
        return
    version = entry.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{where}: version must be an integer >= 1, got {version!r}")
    if not isinstance(entry.get("icl"), bool):
        raise ValueError(f"{where}: icl must be true or false")
    if kind == "training":
        return
    texts = ["opener"] + (["reply_restrict", "npc_opener"] if kind == "baichuan_npc_json" else [])
    for name in texts:
        if set(entry.get(name) or {}) != set(LANGUAGES):
            raise ValueError(f"{where}: `{name}` needs exactly the languages {LANGUAGES}")
    if kind == "template":
        for lang in LANGUAGES:
            found = set(_PLACEHOLDER.findall(entry.get(lang) or ""))
            want = {"card", "dialogue"} if entry["icl"] else {"card"}
            if found != want:
                raise ValueError(
                    f"{where}: the {lang} template has placeholders {sorted(found)}, expected {sorted(want)}"
                )


def prompt_ids() -> list[str]:
    """The ids `render_roleplayer_prompt` accepts."""
    return sorted(_registry())


def _entry(prompt_id: str) -> dict[str, Any]:
    entries = _registry()
    if prompt_id not in entries:
        raise ConfigError(KEY, f"unknown role-player prompt {prompt_id!r}; known: {', '.join(prompt_ids())}")
    entry = entries[prompt_id]
    if entry["kind"] == "alias":
        entry = entries[entry["of"]]
    if entry["kind"] == "training":
        _check_training_version(prompt_id, entry)
    return entry


def _check_training_version(prompt_id: str, entry: dict[str, Any]) -> None:
    current = training_prompts.PROMPTS["version"]
    if entry["training_prompts_version"] != current:
        raise ConfigError(
            KEY,
            f"{prompt_id}: esc/sft/prompts.py is at version {current} but {PROMPTS_FILE.name} records "
            f"{entry['training_prompts_version']}; bump the entry's `version` and set its "
            "`training_prompts_version` to match",
        )


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
    prompt_id: str, language: str, card_text: str, example_dialogue: str | None = None
) -> tuple[str, str]:
    """(system message content, supporter opener) for a role card in `language` ("en" or "zh").

    `example_dialogue` is required by the ICL variants (see `example_dialogue()`) and ignored by
    the others. Raises ConfigError naming `roleplayer.prompt` for an unknown id, an unknown
    language or a missing example.
    """
    entry = _entry(prompt_id)
    if language not in LANGUAGES:
        raise ConfigError(KEY, f"{prompt_id} has no {language!r} version (have: {', '.join(LANGUAGES)})")
    if entry["icl"] and example_dialogue is None:
        raise ConfigError(KEY, f"{prompt_id} is an ICL prompt and needs an example dialogue")
    if entry["kind"] == "training":
        return (
            training_prompts.role_player_system_prompt(card_text, language),
            training_prompts.supporter_opener(language),
        )
    opener = entry["opener"][language]
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


# --- the one-shot ICL example -----------------------------------------------------------------


def _merge(turns: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Join consecutive utterances of one speaker with a space (as Figure 11 shows them)."""
    merged: list[tuple[int, str]] = []
    for speaker, text in turns:
        text = " ".join(text.split())
        if not text:
            continue
        if merged and merged[-1][0] == speaker:
            merged[-1] = (speaker, f"{merged[-1][1]} {text}")
        else:
            merged.append((speaker, text))
    return merged


def _esconv_example() -> tuple[str, list[tuple[int, str]]]:
    from esc.paths import data_dir
    from esc.sft.esconv import esconv_path
    from esc.sft.sample import get_field, read_jsonl

    path = esconv_path(data_dir(), "train")
    chosen = None
    for index, (lineno, record) in enumerate(read_jsonl(path)):
        dialog = get_field(record, "dialog", list, path, f"line {lineno}")
        if chosen is None:
            chosen = (index, dialog)  # fallback: the first training dialogue
        if any(u.get("speaker") == "usr" and EXAMPLE_ESCONV_TEXT in str(u.get("text", "")) for u in dialog):
            chosen = (index, dialog)
            break
    if chosen is None:
        raise UserError(f"{path}: no ESConv dialogue to use as the ICL example; run `make data`")
    index, dialog = chosen
    turns = [(0 if u.get("speaker") == "usr" else 1, str(u.get("text", ""))) for u in dialog]
    return f"esconv/train/{index}", turns


def _smile_example() -> tuple[str, list[tuple[int, str]]]:
    from esc.paths import data_dir
    from esc.sft.sample import get_field, read_json
    from esc.sft.smile import smile_dir, smile_files

    path = smile_files(smile_dir(data_dir()))[0]
    data = read_json(path)
    turns = [
        (0 if get_field(u, "role", str, path, k) == "client" else 1, get_field(u, "content", str, path, k))
        for k, u in enumerate(data)
    ]
    return f"smile/{path.stem}", turns


@functools.cache
def _example(language: str) -> tuple[str, tuple[str, ...]]:
    if language not in LANGUAGES:
        raise ConfigError(
            KEY, f"no example dialogue for language {language!r} (have: {', '.join(LANGUAGES)})"
        )
    source, turns = _esconv_example() if language == "en" else _smile_example()
    labels = EXAMPLE_LABELS[language]
    return source, tuple(labels[speaker] + text for speaker, text in _merge(turns))


def example_dialogue_source(language: str) -> str:
    """Which dialogue the ICL example is, e.g. "esconv/train/327" or "smile/0"."""
    return _example(language)[0]


def example_dialogue(language: str, max_chars: int = 3000) -> str:
    """The fixed one-shot ICL example in `language`, one "seeker: ..." / "supporter: ..." line per turn
    (Chinese: "求助者：..." / "咨询师：..."), cut to at most `max_chars` characters at a turn boundary.

    The first turn is always kept; if it alone is longer than `max_chars` it is cut to fit with "…".
    Raises UserError if the data is missing (`make data`).
    """
    if max_chars < 1:
        raise ConfigError("max_chars", f"must be at least 1, got {max_chars}")
    lines = _example(language)[1]
    kept: list[str] = []
    size = 0
    for line in lines:
        extra = len(line) + (1 if kept else 0)
        if kept and size + extra > max_chars:
            break
        kept.append(line)
        size += extra
    if size > max_chars:
        kept[0] = kept[0][: max_chars - 1] + "…"
    return "\n".join(kept)
