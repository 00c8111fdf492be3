"""The fixed one-shot example dialogue of the ICL role-player prompts (paper Appendix B.1).

One-shot, truncated for length: English, the ESConv training dialogue of the paper's Figure 11
(found by its text "i cant afford a house"; the first training dialogue if absent); Chinese, the
first Smile dialogue (0.json). Speaker labels as in the paper's Figure 10.
"""

from __future__ import annotations

import functools

from esc.corpora import SEEKER
from esc.corpora.esconv import esconv_path, read_esconv
from esc.corpora.smile import read_smile_dialogue, smile_dir, smile_files
from esc.errors import UserError
from esc.paths import data_dir

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
    path = esconv_path(data_dir(), "train")
    chosen = None
    for dialogue in read_esconv(path, "train"):
        if chosen is None:
            chosen = dialogue  # fallback: the first training dialogue
        if any(u.speaker == SEEKER and EXAMPLE_ESCONV_TEXT in u.text for u in dialogue.utterances):
            chosen = dialogue
            break
    if chosen is None:
        raise UserError(f"{path}: no ESConv dialogue to use as the ICL example; run `make data`")
    return chosen.id, [(0 if u.speaker == SEEKER else 1, u.text) for u in chosen.utterances]


def _smile_example() -> tuple[str, list[tuple[int, str]]]:
    path = smile_files(smile_dir(data_dir()))[0]
    turns = [(0 if speaker == SEEKER else 1, text) for speaker, text in read_smile_dialogue(path)]
    return f"smile/{path.stem}", turns


@functools.cache
def _example(language: str) -> tuple[str, tuple[str, ...]]:
    """The example of a card's language (a card file's languages are en and zh)."""
    source, turns = {"en": _esconv_example, "zh": _smile_example}[language]()
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
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
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
