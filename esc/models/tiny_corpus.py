"""Raw dialogue text for training the tiny model's tokenizer (read straight from `data/`)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from esc.paths import data_dir


def english_texts() -> Iterator[str]:
    """ESConv utterances (train split first) and the English role cards."""
    root = data_dir()
    for split in ("train", "valid", "test"):
        path = root / "esconv" / "fado_reformat" / f"{split}_rl.txt"
        if not path.exists():
            continue
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                record = json.loads(line)
                yield record.get("situation", "")
                yield from (turn["text"] for turn in record.get("dialog", []))
    yield from _card_texts("card_high_en.json")


def chinese_texts() -> Iterator[str]:
    """Smile dialogues (in id order) and the Chinese role cards."""
    yield from _card_texts("card_high_zh.json")
    smile = data_dir() / "smile" / "data"
    if smile.is_dir():
        for path in sorted(smile.glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1):
            for turn in json.loads(path.read_text(encoding="utf-8")):
                yield turn.get("content", "")


def _card_texts(name: str) -> Iterator[str]:
    path = data_dir() / "esc_eval" / name
    if path.exists():
        yield from (card["base"] for card in json.loads(path.read_text(encoding="utf-8")))
