"""ESConv (Liu et al. 2021) and FailedESConv: English emotional-support dialogues.

- ESConv, the FADO re-format (`esconv/fado_reformat/{train,valid,test}_rl.txt`, JSON lines): per
  dialogue the seeker's situation summary, problem and emotion type, the post-chat survey (empathy,
  relevance) and the utterances (`usr` = seeker, `sys` = supporter) with the seeker's per-turn
  feedback (`rating`, 1-5).
- FailedESConv (`esconv/FailedESConv.json`, one JSON list): the same fields in the original
  layout (`seeker`/`speaker` vs `supporter`, `content`, `survey_score.seeker`,
  `annotation.feedback`).

Texts are kept as the files have them (no stripping): each reader of a record decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from esc.corpora import SEEKER, SUPPORTER
from esc.errors import DataError
from esc.jsonl import get_field, read_json, read_jsonl

SPLITS = ("train", "valid", "test")

_FADO_SPEAKERS = {"usr": SEEKER, "sys": SUPPORTER}


@dataclasses.dataclass(frozen=True)
class Utterance:
    speaker: str  # SEEKER | SUPPORTER
    text: str
    feedback: int | None = None  # the seeker's rating of the help so far, 1-5 (seeker turns only)


@dataclasses.dataclass(frozen=True)
class EsconvDialogue:
    id: str  # "esconv/{split}/{index}" (0-based line order) or "failedesconv/{index}"
    situation: str  # the seeker's own summary, written before the chat ("" when absent)
    problem_type: str
    emotion_type: str
    utterances: tuple[Utterance, ...]
    survey: dict[str, Any]  # the seeker's post-chat ratings as the file has them: empathy, relevance


def esconv_path(root: Path, split: str) -> Path:
    """Path of the FADO-reformatted ESConv split file under the data directory `root`."""
    return Path(root) / "esconv" / "fado_reformat" / f"{split}_rl.txt"


def failed_esconv_path(root: Path) -> Path:
    return Path(root) / "esconv" / "FailedESConv.json"


def read_esconv(path: Path, split: str | None = None) -> Iterator[EsconvDialogue]:
    """The dialogues of one FADO `*_rl.txt` file, in line order. `split` defaults to the file
    name's prefix ("train" for train_rl.txt) and names the ids."""
    path = Path(path)
    split = split or path.name.split("_")[0]
    for index, (lineno, record) in enumerate(read_jsonl(path)):
        where = f"line {lineno}"
        situation = get_field(record, "situation", str, path, where)
        problem_type = get_field(record, "problem_type", str, path, where)
        emotion_type = get_field(record, "emotion_type", str, path, where)
        utterances = []
        for k, utt in enumerate(get_field(record, "dialog", list, path, where)):
            at = f"{where}, dialog[{k}]"
            text = get_field(utt, "text", str, path, at)
            speaker = get_field(utt, "speaker", str, path, at)
            if speaker not in _FADO_SPEAKERS:
                raise DataError(path, at, f"speaker should be usr/sys, got {speaker!r}")
            feedback = _feedback(utt.get("rating"), path, at) if speaker == "usr" else None
            utterances.append(Utterance(_FADO_SPEAKERS[speaker], text, feedback))
        survey = {"empathy": record.get("empathy"), "relevance": record.get("relevance")}
        yield EsconvDialogue(
            f"esconv/{split}/{index}", situation, problem_type, emotion_type, tuple(utterances), survey
        )


def read_failed_esconv(path: Path) -> Iterator[EsconvDialogue]:
    """The dialogues of FailedESConv.json, in file order."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, "expected a JSON list of dialogues")
    for index, record in enumerate(data):
        utterances = []
        for k, utt in enumerate(get_field(record, "dialog", list, path, index)):
            at = f"{index}, dialog[{k}]"
            seeker = get_field(utt, "speaker", str, path, at) in ("seeker", "speaker")
            text = get_field(utt, "content", str, path, at)
            rating = (utt.get("annotation") or {}).get("feedback") or None  # "" / 0 / absent: none
            feedback = _feedback(rating, path, at) if seeker else None
            utterances.append(Utterance(SEEKER if seeker else SUPPORTER, text, feedback))
        survey = (record.get("survey_score") or {}).get("seeker") or {}
        yield EsconvDialogue(
            f"failedesconv/{index}",
            str(record.get("situation") or ""),
            str(record.get("problem_type") or ""),
            str(record.get("emotion_type") or ""),
            tuple(utterances),
            {"empathy": survey.get("empathy"), "relevance": survey.get("relevance")},
        )


def _feedback(value: Any, path: Path, where: str) -> int | None:
    """A seeker's per-turn rating as an integer (the files hold numbers or digit strings); None when
    absent; a DataError naming the utterance for anything else."""
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DataError(path, where, f"feedback rating should be an integer, got {value!r}") from None
