"""Help-seeking posts: one text per record, each with the id the dataset gives it.

- PsyQA (Sun et al. 2021, Chinese): the public sample `psyqa/PsyQA_example.json` or the full set;
  question and description joined;
- EPITOME (Sharma et al. 2020, English Reddit): the seeker posts of its three CSV files, each post once;
- ChatCounselor's counselling questions (English): `question.jsonl`, the first of each record's turns.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from esc.errors import DataError
from esc.jsonl import get_field, read_json, read_jsonl, require_file

EPITOME_FILES = ("emotional-reactions-reddit.csv", "explorations-reddit.csv", "interpretations-reddit.csv")


def psyqa_path(root: Path) -> Path:
    return Path(root) / "psyqa" / "PsyQA_example.json"


def epitome_dir(root: Path) -> Path:
    return Path(root) / "epitome"


def chatcounselor_path(root: Path) -> Path:
    return Path(root) / "chatcounselor_counselling_bench" / "question.jsonl"


def read_psyqa(path: Path) -> Iterator[tuple[str, str]]:
    """(questionID, question + newline + description), stripped, in file order."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, "expected a JSON list of questions")
    for index, record in enumerate(data):
        question = get_field(record, "question", str, path, index).strip()
        description = str(record.get("description") or "").strip()
        yield str(record.get("questionID", index)), f"{question}\n{description}".strip()


def read_epitome(folder: Path) -> Iterator[tuple[str, str]]:
    """(sp_id, seeker post), stripped: each post once (the three files share posts), empty ones left out."""
    seen: set[str] = set()
    for name in EPITOME_FILES:
        path = require_file(Path(folder) / name)
        with path.open(encoding="utf-8", newline="") as fh:
            for row_no, row in enumerate(csv.DictReader(fh), start=2):
                if "sp_id" not in row or "seeker_post" not in row:
                    raise DataError(path, f"row {row_no}", "missing column sp_id or seeker_post")
                if row["sp_id"] in seen or not row["seeker_post"].strip():
                    continue
                seen.add(row["sp_id"])
                yield row["sp_id"], row["seeker_post"].strip()


def read_chatcounselor(path: Path) -> Iterator[tuple[str, str]]:
    """(question_id, the question's text), stripped, in line order."""
    path = Path(path)
    for lineno, record in read_jsonl(path):
        turns = get_field(record, "turns", list, path, f"line {lineno}")
        if not turns or not isinstance(turns[0], str) or not turns[0].strip():
            raise DataError(path, f"line {lineno}", "`turns` must start with the question's text")
        yield str(record.get("question_id", lineno)), turns[0].strip()
