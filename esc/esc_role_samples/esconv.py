"""ESC-Role samples from ESConv (`esc.corpora.esconv` reads the files): the seeker is the role-player.

Role card: the paper extracted cards with GPT-4 (section 2.3.1); here the card is built from the
dialogue's own metadata in the ESC-Eval card layout:

    Age: Not mentioned
    Gender: Not mentioned
    Occupation: Not mentioned
    Problem: {situation} (Problem type: {problem_type}; emotion: {emotion_type})

The ESConv `situation` is the seeker's own first-person summary, written before the chat. Some
seekers paste it as their first message; such a turn recites the card and is held out of the
learned turns (`esc.esc_role_samples.echo`).
"""

from __future__ import annotations

from pathlib import Path

from esc.corpora import SEEKER
from esc.corpora import esconv as corpus
from esc.corpora.esconv import SPLITS, esconv_path
from esc.esc_role_samples.sample import Role, Sample, esc_sample
from esc.prompts import format_card

SOURCE = "esconv"


def esconv_card(situation: str, problem_type: str, emotion_type: str) -> str:
    """English role card from ESConv metadata (see the module docstring)."""
    problem = f"{situation.strip()} (Problem type: {problem_type.strip()}; emotion: {emotion_type.strip()})"
    return format_card("en", problem)


def read_esconv(path: Path, split: str | None = None) -> list[Sample]:
    """ESC-Role samples of one ESConv `*_rl.txt` file (`esc.corpora.esconv`); ids are
    "esconv/{split}/{record_index}" (0-based line order).

    `split` defaults to the file name's prefix (e.g. "train" for train_rl.txt) and is kept as
    `split_hint`. Dialogues without any seeker turn are skipped. The seeker is the role-player
    (`assistant`).
    """
    path = Path(path)
    split = split or path.name.split("_")[0]
    samples: list[Sample] = []
    for dialogue in corpus.read_esconv(path, split):
        turns: list[tuple[Role, str]] = [
            ("assistant" if u.speaker == SEEKER else "user", u.text) for u in dialogue.utterances
        ]
        card = esconv_card(dialogue.situation, dialogue.problem_type, dialogue.emotion_type)
        sample = esc_sample(dialogue.id, SOURCE, "en", split, card, turns)
        if sample is not None:
            samples.append(sample)
    return samples


def read_esconv_splits(root: Path, splits: tuple[str, ...] | list[str] = SPLITS) -> list[Sample]:
    """Read the given ESConv splits (default all three) from the data directory `root`."""
    samples: list[Sample] = []
    for split in splits:
        samples.extend(read_esconv(esconv_path(root, split), split))
    return samples
