"""Dialogue text for training the tiny model's tokenizer, read through the ESC-Role data readers.

Using the training samples themselves (role-card prompts included) keeps the tokenizer's merges
on the text the tiny model will actually see.
"""

from __future__ import annotations

from collections.abc import Iterator

from esc.corpora.smile import smile_dir
from esc.esc_role_samples.esconv import read_esconv_splits
from esc.esc_role_samples.smile import read_smile
from esc.paths import data_dir


def english_texts() -> Iterator[str]:
    """ESConv dialogues (train, valid, test) in file order."""
    if not (data_dir() / "esconv").is_dir():
        return
    for sample in read_esconv_splits(data_dir()):
        yield from (message["content"] for message in sample.messages)


def chinese_texts() -> Iterator[str]:
    """Smile dialogues in id order."""
    if not smile_dir(data_dir()).is_dir():
        return
    for sample in read_smile(smile_dir(data_dir())):
        yield from (message["content"] for message in sample.messages)
