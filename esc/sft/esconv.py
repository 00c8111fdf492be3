"""ESConv reader (FADO re-format, JSON lines): the seeker is the role-player (`assistant`).

Role card: the paper extracted cards with GPT-4 (section 2.3.1); here the card is built from the
dialogue's own metadata in the ESC-Eval card layout:

    Age: Not mentioned
    Gender: Not mentioned
    Occupation: Not mentioned
    Problem: {situation} (Problem type: {problem_type}; emotion: {emotion_type})

The ESConv `situation` is the seeker's own first-person summary, written before the chat. Some
seekers paste it as their first message; such a turn recites the card and is held out of the
learned turns (`esc.sft.echo`).
"""

from __future__ import annotations

from pathlib import Path

from esc.errors import DataError
from esc.jsonl import get_field, read_jsonl
from esc.prompts import format_card
from esc.sft.sample import Role, Sample, esc_sample

SOURCE = "esconv"
SPLITS = ("train", "valid", "test")
_SPEAKERS: dict[str, Role] = {"usr": "assistant", "sys": "user"}


def esconv_path(root: Path, split: str) -> Path:
    """Path of the FADO-reformatted ESConv split file under the data directory `root`."""
    return Path(root) / "esconv" / "fado_reformat" / f"{split}_rl.txt"


def esconv_card(situation: str, problem_type: str, emotion_type: str) -> str:
    """English role card from ESConv metadata (see the module docstring)."""
    problem = f"{situation.strip()} (Problem type: {problem_type.strip()}; emotion: {emotion_type.strip()})"
    return format_card("en", problem)


def read_esconv(path: Path, split: str | None = None) -> list[Sample]:
    """Read one ESConv `*_rl.txt` file; ids are "esconv/{split}/{record_index}" (0-based line order).

    `split` defaults to the file name's prefix (e.g. "train" for train_rl.txt) and is kept as
    `split_hint`. Dialogues without any seeker turn are skipped.
    """
    path = Path(path)
    split = split or path.name.split("_")[0]
    samples: list[Sample] = []
    for index, (lineno, record) in enumerate(read_jsonl(path)):
        where = f"line {lineno}"
        situation = get_field(record, "situation", str, path, where)
        problem_type = get_field(record, "problem_type", str, path, where)
        emotion_type = get_field(record, "emotion_type", str, path, where)
        dialog = get_field(record, "dialog", list, path, where)
        turns: list[tuple[Role, str]] = []
        for k, utt in enumerate(dialog):
            text = get_field(utt, "text", str, path, f"{where}, dialog[{k}]")
            speaker = get_field(utt, "speaker", str, path, f"{where}, dialog[{k}]")
            if speaker not in _SPEAKERS:
                raise DataError(path, f"{where}, dialog[{k}]", f"speaker should be usr/sys, got {speaker!r}")
            turns.append((_SPEAKERS[speaker], text))
        card = esconv_card(situation, problem_type, emotion_type)
        sample = esc_sample(f"{SOURCE}/{split}/{index}", SOURCE, "en", split, card, turns)
        if sample is not None:
            samples.append(sample)
    return samples


def read_esconv_splits(root: Path, splits: tuple[str, ...] | list[str] = SPLITS) -> list[Sample]:
    """Read the given ESConv splits (default all three) from the data directory `root`."""
    samples: list[Sample] = []
    for split in splits:
        samples.extend(read_esconv(esconv_path(root, split), split))
    return samples
