"""The fixed one-shot example dialogue of the ICL role-player prompts (paper Appendix B.1).

One-shot, truncated for length: English, the ESConv training dialogue of the paper's Figure 11
(found by its text "i cant afford a house"; the first training dialogue if absent); Chinese, the
first Smile dialogue (0.json). Speaker labels as in the paper's Figure 10.
"""

from __future__ import annotations

import functools

from esc.errors import ConfigError, UserError
from esc.prompts.registry import KEY, LANGUAGES

# The ICL example: the dialogue of paper Figure 11 (ESConv train), else the first ESConv train
# dialogue; the first Smile dialogue for Chinese. Speaker labels as in the paper's Figure 10.
EXAMPLE_ESCONV_TEXT = "i cant afford a house"
EXAMPLE_LABELS = {"en": ("seeker: ", "supporter: "), "zh": ("求助者：", "咨询师：")}


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
    from esc.jsonl import get_field, read_jsonl
    from esc.paths import data_dir
    from esc.sft.esconv import esconv_path

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
    from esc.jsonl import get_field, read_json
    from esc.paths import data_dir
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
