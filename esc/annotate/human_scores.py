"""Human annotations: 0-4 scores people gave dialogues on the 7 dimensions (ESC-RANK's training
data and the reference of every agreement figure).

File format, JSON lines, one annotation per line:

    {"dialogue_id": "esconv/train/12", "language": "en",
     "dialogue": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}],
     "dimension": "empathy", "score": 3, "annotator": "seeker", "source": "esconv",
     "input": "en:32025", "system": "llama3_8b_instruct"}

`role` is "user" for the person seeking help (ESC-Role) and "assistant" for the chatbot. `input`
(optional) names what the dialogue was made from, such as its role card: the dialogues of one input
are not independent, so intervals resample inputs, and the correlation's sample level correlates
within an input across `system`s (optional: the chatbot that spoke). Without them each dialogue is
its own input and one system. A bad file
stops with one line naming the file and line: not JSON, a missing field, an unknown dimension, a
score that is not an integer 0-4, a (dialogue, dimension, annotator) given twice, an empty file.

The paper's 59,654 annotations are not public. `build-esconv` derives a real, smaller set from the
ESConv seekers' own ratings (ESConv and FailedESConv; CC BY-NC 4.0); see `esconv_annotations`.

    esc annotate build-esconv     # -> data/annotations/esconv_ratings.jsonl
    esc annotate stats FILE
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.corpora import SEEKER
from esc.corpora.esconv import (
    SPLITS,
    EsconvDialogue,
    esconv_path,
    failed_esconv_path,
    read_esconv,
    read_failed_esconv,
)
from esc.errors import DataError, UserError
from esc.jsonl import atomic_write_text, read_jsonl
from esc.paths import data_dir
from esc.scoring.rubrics import DIMENSION_KEYS, SCORES, dimension, label

log = logging.getLogger(__name__)

ROLES = ("user", "assistant")
RATIOS = (7, 1, 2)  # train : val : test by dialogue (paper §3.4)


@dataclasses.dataclass(frozen=True)
class Annotation:
    dialogue_id: str
    language: str
    lines: tuple[tuple[str, str], ...]  # (role, text), role "user" or "assistant"
    dimension: str
    score: int
    annotator: str
    source: str | None = None
    input: str | None = None  # what the dialogue was made from (a role card); None: the dialogue
    system: str | None = None  # the chatbot that spoke; None: one system

    @property
    def unit(self) -> str:
        """The independent unit: the input, else the dialogue."""
        return self.input or self.dialogue_id

    def to_dict(self) -> dict[str, Any]:
        out = {
            "dialogue_id": self.dialogue_id,
            "language": self.language,
            "dialogue": [{"role": r, "content": t} for r, t in self.lines],
            "dimension": self.dimension,
            "score": self.score,
            "annotator": self.annotator,
            "source": self.source,
        }
        out.update({k: v for k, v in (("input", self.input), ("system", self.system)) if v is not None})
        return out


def _parse(record: Any, path: Path, where: str) -> Annotation:
    if not isinstance(record, dict):
        raise DataError(path, where, f"expected a JSON object, got {type(record).__name__}")
    for key in ("dialogue_id", "language", "dialogue", "dimension", "score", "annotator"):
        if key not in record:
            raise DataError(path, where, f"missing field `{key}`")
    try:
        key = dimension(record["dimension"]).key
    except UserError as err:
        raise DataError(path, where, str(err)) from None
    score = record["score"]
    if isinstance(score, bool) or not isinstance(score, int) or score not in SCORES:
        raise DataError(path, where, f"score must be an integer 0-4, got {score!r}")
    dialogue = record["dialogue"]
    if not isinstance(dialogue, list) or not dialogue:
        raise DataError(path, where, "`dialogue` must be a non-empty list of {role, content}")
    lines = []
    for i, turn in enumerate(dialogue):
        if (
            not isinstance(turn, dict)
            or turn.get("role") not in ROLES
            or not isinstance(turn.get("content"), str)
        ):
            raise DataError(path, where, f"dialogue[{i}] must be {{role: user|assistant, content: text}}")
        lines.append((turn["role"], turn["content"]))
    if record["language"] not in ("en", "zh"):
        raise DataError(path, where, f"language must be en or zh, got {record['language']!r}")
    optional = {}
    for name in ("input", "system"):
        value = record.get(name)
        if value is not None and not isinstance(value, (str, int)):
            raise DataError(path, where, f"`{name}` must be a text or a number, got {type(value).__name__}")
        optional[name] = None if value is None else str(value)
    return Annotation(
        str(record["dialogue_id"]),
        record["language"],
        tuple(lines),
        key,
        score,
        str(record["annotator"]),
        record.get("source"),
        **optional,
    )


def read_annotations(path: Path) -> list[Annotation]:
    """Every annotation of a JSONL file, validated (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: annotation file not found (build one: esc annotate)")
    annotations: list[Annotation] = []
    seen: dict[tuple[str, str, str], int] = {}
    for lineno, record in read_jsonl(path):
        ann = _parse(record, path, f"line {lineno}")
        key = (ann.dialogue_id, ann.dimension, ann.annotator)
        if key in seen:
            raise DataError(
                path,
                f"line {lineno}",
                f"duplicate of line {seen[key]} (same dialogue, dimension and annotator: {key})",
            )
        seen[key] = lineno
        annotations.append(ann)
    if not annotations:
        raise DataError(path, None, "no annotations (empty file)")
    return annotations


def write_annotations(annotations: Iterable[Annotation], path: Path) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(ann.to_dict(), ensure_ascii=False) + "\n" for ann in annotations]
    atomic_write_text(path, "".join(lines))
    return len(lines)


# --- ESConv: the seekers' own ratings, mapped to the dimensions they measure -------------------------


def _feedback_overall(ratings: Sequence[int]) -> int | None:
    """Mean per-turn feedback (1-5) -> 0-4, half up; None without ratings."""
    if not ratings:
        return None
    return int(sum(ratings) / len(ratings) - 1 + 0.5)


def esconv_annotations(root: Path | None = None, max_lines: int | None = 12) -> list[Annotation]:
    """Annotations from the ESConv seekers' ratings (ESConv, FailedESConv), 1-5 mapped to 0-4:

    - `empathy` <- the post-chat survey's empathy rating ("the supporter understood/empathised");
    - `fluency` <- the survey's relevance rating: the coherence half of the fluency rubric
      ("dialogue content unrelated to the user's questions"); sentence fluency is not rated;
    - `overall` <- the mean of the seeker's per-turn feedback ("how helpful was this"), over the
      turns shown to the judge, as the closest thing to the paper's "would I use it" preference.

    `diversity`, `suggestion`, `humanoid` and `skill` have no human ratings here and get none.
    Dialogues are cut to their first `max_lines` utterances (12: the length of an ESC-Eval dialogue,
    opener + 5 exchanges + 1) so that prompts fit small judges; the survey ratings describe the whole
    chat, a limit of this proxy. Missing ratings (-1 in ESConv) give no annotation.
    """
    root = Path(root or data_dir())
    out: list[Annotation] = []
    for split in SPLITS:
        for d in read_esconv(esconv_path(root, split), split):
            out += _seeker_ratings(d, max_lines, strip=False, source="esconv")
    for d in read_failed_esconv(failed_esconv_path(root)):  # its texts carry stray spaces
        out += _seeker_ratings(d, max_lines, strip=True, source="failedesconv")
    return out


def _seeker_ratings(d: EsconvDialogue, max_lines: int | None, strip: bool, source: str) -> list[Annotation]:
    """The annotations of one dialogue, its first `max_lines` utterances shown; the per-turn
    feedback counts over the shown turns only."""
    shown = d.utterances[:max_lines] if max_lines else d.utterances
    lines = [
        ("user" if u.speaker == SEEKER else "assistant", u.text.strip() if strip else u.text) for u in shown
    ]
    feedback = [u.feedback for u in shown if u.feedback is not None]
    ratings = {"empathy": d.survey.get("empathy"), "fluency": d.survey.get("relevance")}
    return _annotations(d.id, lines, ratings, feedback, source)


def _annotations(
    dialogue_id: str, lines: list[tuple[str, str]], survey: dict[str, Any], feedback: list[int], source: str
) -> list[Annotation]:
    anns = []
    for key, value in survey.items():
        value = int(value) if value not in (None, "", -1, "-1") else None
        if value is not None and 1 <= value <= 5:
            anns.append(Annotation(dialogue_id, "en", tuple(lines), key, value - 1, "seeker", source))
    overall = _feedback_overall(feedback)
    if overall is not None:
        anns.append(Annotation(dialogue_id, "en", tuple(lines), "overall", overall, "seeker", source))
    return anns


# --- splits and summaries ------------------------------------------------------------------------


def split_by_dialogue(
    annotations: Sequence[Annotation], seed: int = 42, ratios: Sequence[int] = RATIOS
) -> dict[str, list[Annotation]]:
    """train / val / test by dialogue (never by row), from sha256(seed:dialogue_id): every
    annotation of a dialogue lands in the same split, on every machine."""
    total = sum(ratios)
    bounds = [sum(ratios[: i + 1]) / total for i in range(len(ratios))]
    splits: dict[str, list[Annotation]] = {"train": [], "val": [], "test": []}
    for ann in annotations:
        digest = hashlib.sha256(f"{seed}:{ann.dialogue_id}".encode()).hexdigest()
        u = int(digest[:12], 16) / float(16**12)
        name = next(n for n, b in zip(splits, bounds, strict=True) if u < b)
        splits[name].append(ann)
    return splits


def human_reference(annotations: Iterable[Annotation]) -> dict[tuple[str, str], int]:
    """(dialogue, dimension) -> the human score: the annotators' median (the lower one on a tie)."""
    scores: dict[tuple[str, str], list[int]] = defaultdict(list)
    for ann in annotations:
        scores[(ann.dialogue_id, ann.dimension)].append(ann.score)
    return {key: sorted(v)[(len(v) - 1) // 2] for key, v in scores.items()}


def stats(annotations: Sequence[Annotation]) -> str:
    lines = [f"{len(annotations)} annotations, {len({a.dialogue_id for a in annotations})} dialogues"]
    for key in DIMENSION_KEYS:
        counts = Counter(a.score for a in annotations if a.dimension == key)
        if counts:
            dist = ", ".join(f"{s}: {counts.get(s, 0)}" for s in SCORES)
            lines.append(f"  {label(key):<12}{sum(counts.values()):>6}  ({dist})")
        else:
            lines.append(f"  {label(key):<12}{'none':>6}  (no human ratings)")
    return "\n".join(lines)


def default_esconv_path() -> Path:
    return data_dir() / "annotations" / "esconv_ratings.jsonl"


def load_annotations(cfg: Mapping[str, Any]) -> list[Annotation]:
    """The configured annotation file; null: the ESConv-derived set, built on first use."""
    path = cfg.get("annotations")
    if not path:
        path = default_esconv_path()
        if not path.is_file():
            log.info("Building %s from the ESConv seekers' ratings", path)
            write_annotations(esconv_annotations(), path)
    return read_annotations(Path(str(path)))


def selected(cfg: Mapping[str, Any], annotations: Sequence[Annotation]) -> list[Annotation]:
    dims = cfg["dimensions"]
    keys = (
        set(DIMENSION_KEYS) if dims in (None, "all") else {dimension(d, "data.dimensions").key for d in dims}
    )
    languages = set(cfg["languages"])
    return [a for a in annotations if a.dimension in keys and a.language in languages]


def splits(cfg: Mapping[str, Any]) -> dict[str, list[Annotation]]:
    """train / val / test annotations of the configured dimensions and languages: `split` (the ratios,
    checked with the config: `data.split`, `agreement.split_ratios`) and `seed` as conf/ sets them."""
    return split_by_dialogue(selected(cfg, load_annotations(cfg)), cfg["seed"], list(cfg["split"]))
