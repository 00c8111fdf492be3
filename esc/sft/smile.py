"""SmileChat reader (Chinese; one JSON file per dialogue): client = seeker = `assistant`.

Role card: Smile has no metadata, and the paper's cards came from GPT-4 reading the dialogue
(section 2.3.1, Figure 7 prompt). By default the card's problem line is the client's first message,
cut to `CARD_PROBLEM_CHARS` characters (with "…" when cut):

    年龄：未提及
    性别：未提及
    职业：未提及
    问题：<client's first message>

That first message then recites the card, so it is held out of the learned turns
(`esc.sft.echo`): it stays in the context, the model learns the client's later turns. With a card
file (`cards`: JSON lines {"id": "smile/<file stem>", "card": "<card text>"}, e.g. cards extracted
by an LLM), the card comes from the file and every client turn is learned unless it echoes that
card; dialogues without a card in the file are skipped.
"""

from __future__ import annotations

from pathlib import Path

from esc.errors import DataError, UserError
from esc.jsonl import get_field, read_json, read_jsonl, require_file
from esc.prompts import format_card
from esc.sft.sample import Role, Sample, esc_sample

SOURCE = "smile"
CARD_PROBLEM_CHARS = 200
_SPEAKERS: dict[str, Role] = {"client": "assistant", "counselor": "user"}


def smile_dir(root: Path) -> Path:
    """Directory of the Smile dialogue files under the data directory `root`."""
    return Path(root) / "smile" / "data"


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
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, f"expected a JSON list of utterances, got {type(data).__name__}")
    turns: list[tuple[Role, str]] = []
    for k, utt in enumerate(data):
        role = get_field(utt, "role", str, path, k)
        content = get_field(utt, "content", str, path, k)
        if role not in _SPEAKERS:
            raise DataError(path, k, f"role should be client/counselor, got {role!r}")
        turns.append((_SPEAKERS[role], content))
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


def smile_files(directory: Path) -> list[Path]:
    """The `*.json` files of `directory`, numeric names in numeric order (stable across machines)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"{directory}: Smile data directory not found; run `make data` (or set ESC_DATA_DIR)")
    files = sorted(
        directory.glob("*.json"),
        key=lambda p: (not p.stem.isdigit(), int(p.stem) if p.stem.isdigit() else 0, p.stem),
    )
    if not files:
        raise UserError(f"{directory}: no Smile *.json files; run `make data`")
    return files


def read_smile(paths: Path | list[Path], card_file: Path | None = None) -> list[Sample]:
    """Read Smile dialogues from a directory or an explicit list of files, in a stable order; with
    `card_file`, their cards from it (see the module docstring)."""
    files = smile_files(paths) if isinstance(paths, (str, Path)) else [require_file(Path(p)) for p in paths]
    cards = read_card_file(card_file) if card_file else None
    samples = [read_smile_file(f, cards) for f in files]
    return [s for s in samples if s is not None]
