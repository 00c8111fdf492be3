"""SmileChat (Qiu et al. 2023): Chinese counselling dialogues, one JSON list of utterances per
file (`smile/data/<n>.json`), `client` = seeker, `counselor` = supporter."""

from __future__ import annotations

from pathlib import Path

from esc.corpora import SEEKER, SUPPORTER
from esc.errors import DataError, UserError
from esc.jsonl import get_field, read_json

_SPEAKERS = {"client": SEEKER, "counselor": SUPPORTER}


def smile_dir(root: Path) -> Path:
    """Directory of the Smile dialogue files under the data directory `root`."""
    return Path(root) / "smile" / "data"


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


def read_smile_dialogue(path: Path) -> tuple[tuple[str, str], ...]:
    """(SEEKER | SUPPORTER, text) of every utterance of one Smile file, texts as the file has them;
    a DataError naming the file and utterance for anything else."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, f"expected a JSON list of utterances, got {type(data).__name__}")
    turns = []
    for k, utt in enumerate(data):
        role = get_field(utt, "role", str, path, k)
        content = get_field(utt, "content", str, path, k)
        if role not in _SPEAKERS:
            raise DataError(path, k, f"role should be client/counselor, got {role!r}")
        turns.append((_SPEAKERS[role], content))
    return tuple(turns)
