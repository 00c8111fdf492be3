"""ESC-Role samples from SmileChat (Chinese; `esc.corpora.smile` reads the files): the client,
the seeker, is the role-player (`assistant`).

Role card: Smile has no metadata, and the paper's cards came from GPT-4 reading the dialogue
(section 2.3.1, Figure 7 prompt). By default the card's problem line is the client's first message,
cut to `CARD_PROBLEM_CHARS` characters (with "…" when cut):

    年龄：未提及
    性别：未提及
    职业：未提及
    问题：<client's first message>

That first message then recites the card, so it is held out of the learned turns
(`esc.esc_role_samples.echo`): it stays in the context, the model learns the client's later turns. With a card
file (`cards`: JSON lines {"id": "smile/<file stem>", "card": "<card text>"}, e.g. cards extracted
by an LLM), the card comes from the file and every client turn is learned unless it echoes that
card; dialogues without a card in the file are skipped.
"""

from __future__ import annotations

from pathlib import Path

from esc.corpora import SEEKER
from esc.corpora.smile import read_smile_dialogue, smile_files
from esc.errors import DataError
from esc.esc_role_samples.sample import Role, Sample, esc_sample
from esc.jsonl import get_field, read_jsonl, require_file
from esc.prompts import format_card

SOURCE = "smile"
CARD_PROBLEM_CHARS = 200


def smile_card(first_client_message: str) -> str:
    """Chinese role card whose problem is the (truncated) first client message."""
    text = " ".join(first_client_message.split())
    if len(text) > CARD_PROBLEM_CHARS:
        text = text[:CARD_PROBLEM_CHARS] + "…"
    return format_card("zh", text)


def read_card_file(path: Path) -> dict[str, str]:
    """Cards by sample id from a JSON-lines file of {"id": ..., "card": ...}; DataError naming the
    line for a malformed or repeated record."""
    path = Path(path)
    cards: dict[str, str] = {}
    for lineno, record in read_jsonl(path):
        sample_id = get_field(record, "id", str, path, f"line {lineno}")
        card = get_field(record, "card", str, path, f"line {lineno}")
        if not card.strip():
            raise DataError(path, f"line {lineno}", f"empty card for {sample_id!r}")
        if sample_id in cards:
            raise DataError(path, f"line {lineno}", f"a second card for {sample_id!r}")
        cards[sample_id] = card
    return cards


def read_smile_file(path: Path, cards: dict[str, str] | None = None) -> Sample | None:
    """Read one Smile dialogue file; id "smile/{file stem}". None if the client never speaks, or if
    `cards` is given and has no card for it."""
    path = Path(path)
    turns: list[tuple[Role, str]] = [
        ("assistant" if speaker == SEEKER else "user", text) for speaker, text in read_smile_dialogue(path)
    ]
    sample_id = f"{SOURCE}/{path.stem}"
    if cards is not None:
        card = cards.get(sample_id)
        if card is None:
            return None
    else:
        first_client = next((text for role, text in turns if role == "assistant" and text.strip()), None)
        if first_client is None:
            return None
        card = smile_card(first_client)
    return esc_sample(sample_id, SOURCE, "zh", None, card, turns)


def read_smile(paths: Path | list[Path], card_file: Path | None = None) -> list[Sample]:
    """Read Smile dialogues from a directory or an explicit list of files, in a stable order; with
    `card_file`, their cards from it (see the module docstring)."""
    files = smile_files(paths) if isinstance(paths, (str, Path)) else [require_file(Path(p)) for p in paths]
    cards = read_card_file(card_file) if card_file else None
    samples = [read_smile_file(f, cards) for f in files]
    return [s for s in samples if s is not None]
