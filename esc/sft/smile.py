"""SmileChat reader (Chinese; one JSON file per dialogue): client = seeker = `assistant`.

Role card: no metadata exists, so until an LLM card extractor exists the card's problem line is
the client's first message, cut to `CARD_PROBLEM_CHARS` characters (with "…" when cut):

    年龄：未提及
    性别：未提及
    职业：未提及
    问题：<client's first message>

This leaks the first seeker turn into the card; it is a stand-in for GPT-4 extraction.
"""

from __future__ import annotations

from pathlib import Path

from esc.errors import DataError, UserError
from esc.prompts import format_card, role_player_system_prompt
from esc.sft.sample import Role, Sample, esc_dialogue, get_field, read_json, require_file

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


def read_smile_file(path: Path) -> Sample | None:
    """Read one Smile dialogue file; id "smile/{file stem}". None if the client never speaks."""
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
    first_client = next((text for role, text in turns if role == "assistant" and text.strip()), None)
    if first_client is None:
        return None
    messages = esc_dialogue(role_player_system_prompt(smile_card(first_client), "zh"), turns, "zh")
    if messages is None:
        return None
    return Sample(f"{SOURCE}/{path.stem}", SOURCE, "zh", None, messages)


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


def read_smile(paths: Path | list[Path]) -> list[Sample]:
    """Read Smile dialogues from a directory or an explicit list of files, in a stable order."""
    files = smile_files(paths) if isinstance(paths, (str, Path)) else [require_file(Path(p)) for p in paths]
    samples = [read_smile_file(f) for f in files]
    return [s for s in samples if s is not None]
