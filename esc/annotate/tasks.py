"""Annotation tasks out, people's labels in.

Export (`export_tasks`) writes a task folder:

- ``tasks.jsonl``: the canonical list, one task per line ({task_id, kind, language, text, payload});
  every import is checked against it;
- ``blind-key-salt``: a random secret (owner-readable only) that salts the rating pages' keys
  (`task_key`); it never reaches the pages;
- ``tasks.csv``: one row per task, the text and an empty column per field (plus ``annotator``), to
  fill in a spreadsheet;
- ``labelstudio/config.xml`` + ``labelstudio/tasks.json``: a Label Studio project (the labeling
  interface, one Choices block per field with each value's rule as its hint, and the tasks).

Import (`import_labels`) reads filled CSV or JSON-lines files (``task_id``, ``annotator`` and one
column per field), Label Studio JSON exports, or the JSONL files the rating pages export (`esc
annotate site`, `esc.annotate.rating_site`: records of format ``esc-rating/1``, each naming its task
by `task_key` and the task file by its checksum), and returns one `Label` per (task, annotator,
field), each recording the checksum of the task file it was made on. An unknown task id, a field the
kind does not have or a value out of range stops with one line naming the file and record; nothing
is written until every file has been read.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import secrets
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config

from esc.annotate.human_scores import Annotation
from esc.annotate.kinds import KINDS, TaskKind, task_kind
from esc.dialogues.record import dialogue_lines
from esc.dialogues.store import read_dialogues
from esc.errors import DataError, UserError
from esc.jsonl import atomic_write_bytes, atomic_write_text, find_jsonl_files, read_json, read_jsonl
from esc.runinfo import Record, record_problem
from esc.scoring.rubrics import DIMENSION_KEYS, SCORES


class Message(Record):
    """One line of a task's dialogue, as a judge reads it (`esc.dialogues.record.dialogue_lines`)."""

    role: str  # user (the seeker) | assistant
    content: str


class Payload(Record):
    """What a task was made from, as ``tasks.jsonl`` holds it: a dialogue task's card id, role-player,
    target and lines (a role-play task's also the text of the card played); a card task's: the card
    (`RoleCard.to_dict`). `to_dict` writes the fields set, in this order."""

    card_id: int | None = None
    roleplayer: str | None = None
    target: str | None = None
    dialogue: list[Message] = []
    card: str | dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


@with_config(ConfigDict(extra="forbid"))
@dataclasses.dataclass(frozen=True)
class Task:
    task_id: str
    kind: str
    language: str
    text: str  # what the annotator reads
    payload: Payload  # what the task was made from (dialogue lines, card fields, ...)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "kind": self.kind, "language": self.language, "text": self.text,
            "payload": self.payload.to_dict(),
        }  # fmt: skip


#: reads a task of tasks.jsonl back (the fields as written, a JSON object's payload typed)
TASK = TypeAdapter(Task)


@dataclasses.dataclass(frozen=True)
class Label:
    task_id: str
    kind: str
    annotator: str
    field: str
    value: str
    #: the checksum of the task file it was made on (None: a labels file written before it was recorded)
    tasks_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: the records the rating pages export (`esc.annotate.rating_site`)
RATING_FORMAT = "esc-rating/1"


#: the task folder's private file: the random salt of its blind keys, never written into the pages
SALT_FILE = "blind-key-salt"  # not a dotfile: `cp TASKS/*` and archives keep it


def task_key(tasks_sha256: str, task_id: str, salt: str | None = None) -> str:
    """The opaque name of a task on the rating pages: nothing of its id (the target's name) shows.
    Salted with the task folder's secret (`SALT_FILE`), since the page holds the checksum and task ids
    can be guessed (target names, card ids); `salt=None` is the unsalted key of a folder exported before
    salts were kept (its ratings still import)."""
    text = f"{tasks_sha256}:{task_id}" if salt is None else f"{salt}:{tasks_sha256}:{task_id}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def task_folder(tasks: Path) -> Path:
    """The task folder of `tasks` (the folder, or its tasks.jsonl)."""
    tasks = Path(tasks)
    return tasks if tasks.is_dir() else tasks.parent


def read_salt(tasks: Path) -> str | None:
    """The salt of a task folder's blind keys (None: a folder exported before salts were kept)."""
    path = task_folder(tasks) / SALT_FILE
    if not path.is_file():
        return None
    salt = path.read_text(encoding="utf-8").strip()
    if len(salt) < 32 or not all(c in "0123456789abcdef" for c in salt):
        raise DataError(path, None, "not a blind-key salt (64 hex digits written by `esc annotate export`)")
    return salt


def write_salt(folder: Path) -> None:
    """A random salt in the task folder, readable by its owner only; a folder's salt is kept (an
    export with --force into it writing the same tasks keeps its pages' keys)."""
    path = Path(folder) / SALT_FILE
    if path.is_file():
        read_salt(folder)  # a file there that is no salt is refused
        return
    atomic_write_bytes(path, (secrets.token_hex(32) + "\n").encode("ascii"), mode=0o600)


# --- making tasks ------------------------------------------------------------------------------------


def dialogue_tasks(
    dialogue_files: Sequence[Path],
    kind: str = "dialogue",
    card_texts: Mapping[tuple[int, str], str] | None = None,
) -> list[Task]:
    """One task per complete dialogue of evaluate.py's files: the chatbot's side is scored
    (``dialogue``) or the role-player's (``roleplay``, with the card it played: `card_texts` by
    (card id, language), as `RoleCard.to_text` writes them). The dialogue is what a judge reads
    (`esc.dialogues.record.dialogue_lines`: the opener, then the turns), so labels train ESC-RANK on
    the text it scores."""

    speaker = {"user": "Seeker (role-player)", "assistant": "AI assistant"}
    tasks = []
    for path in dialogue_files:
        for lineno, d in enumerate(read_dialogues(path), start=1):
            if d.status != "complete":
                continue
            lines = dialogue_lines(d, path, lineno)
            text = "\n".join(f"{speaker[role]}: {content}" for role, content in lines)
            played: dict[str, Any] = {
                "card_id": d.card_id,
                "roleplayer": d.roleplayer,
                "target": d.target,
                "dialogue": [Message(role=role, content=content) for role, content in lines],
            }
            if kind == "roleplay":  # the card matters for thematic consistency and completeness
                card = (card_texts or {}).get((d.card_id, d.language))
                if card is None:
                    raise UserError(
                        f"{path} [line {lineno}]: card {d.card_id} ({d.language}) is in none of the "
                        "card files given (--cards)"
                    )
                played["card"] = card
                text = f"[The role card the seeker plays]\n{card}\n\n[Dialogue]\n{text}"
            task_id = f"{kind}:{d.target}:{d.roleplayer}:{d.language}:{d.card_id}"
            tasks.append(Task(task_id, kind, d.language, text, Payload(**played)))
    return tasks


def card_tasks(cards: Iterable[Any]) -> list[Task]:
    """One task per role card (`esc.cards.RoleCard`)."""
    return [
        Task(f"card:{c.language}:{c.id}", "card", c.language, c.to_text(), Payload(card=c.to_dict()))
        for c in cards
    ]


def sample_tasks(tasks: Sequence[Task], n: int, seed: int = 0) -> list[Task]:
    """`n` of the dialogue tasks, stratified by target and language: each (target, language) gets
    an equal share (the remainder to the first strata in sorted order; a stratum with fewer tasks
    gives its unused share to the others), drawn within it by a seeded hash of the task id, so the
    same call picks the same tasks on every machine. Kept in the tasks' order."""
    if n < 1:
        raise UserError(f"--sample must be at least 1, got {n}")
    strata: dict[tuple[str, str], list[Task]] = {}
    for task in tasks:
        strata.setdefault((str(task.payload.target), task.language), []).append(task)
    for members in strata.values():
        members.sort(key=lambda t: hashlib.sha256(f"sample:{seed}:{t.task_id}".encode()).hexdigest())
    quota = {key: 0 for key in strata}
    left = min(n, len(tasks))
    while left:  # one more to each stratum with tasks to spare, in sorted order, until n
        for key in sorted(strata):
            if left and quota[key] < len(strata[key]):
                quota[key] += 1
                left -= 1
    chosen = {t.task_id for key, members in strata.items() for t in members[: quota[key]]}
    return [t for t in tasks if t.task_id in chosen]


# --- export ------------------------------------------------------------------------------------------


def gather_tasks(
    kind: str, dialogues: Sequence[str] | None, cards: Sequence[Any] | None, language: str | None
) -> list[Task]:
    """The tasks of one kind: `card` from the cards; `dialogue` and `roleplay` from the dialogue files
    or evaluate.py folders (`roleplay` also shows the judge the card each role-player played)."""
    if kind == "card":
        return card_tasks(cards or [])
    if not dialogues:
        raise UserError(f"export {kind} needs --dialogues (evaluate.py output folders or files)")
    files = find_jsonl_files(dialogues, "dialogues", "dialogue files")
    card_texts = {(c.id, c.language): c.to_text() for c in cards or []} if kind == "roleplay" else None
    return [t for t in dialogue_tasks(files, kind, card_texts) if not language or t.language == language]


def export_tasks(tasks: Sequence[Task], out: Path) -> dict[str, Path]:
    """Write the task folder (see the module docstring); returns the files written."""
    if not tasks:
        raise UserError("no tasks to export (no complete dialogue or card found)")
    kinds = {t.kind for t in tasks}
    if len(kinds) != 1:
        raise UserError(f"one kind of task per folder, got {sorted(kinds)}")
    kind = task_kind(kinds.pop())
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise UserError("two tasks have the same id (the same dialogue or card given twice?)")
    out = Path(out)
    (out / "labelstudio").mkdir(parents=True, exist_ok=True)
    write_salt(out)  # the folder's blind keys
    files = {
        "tasks": out / "tasks.jsonl",
        "csv": out / "tasks.csv",
        "labelstudio_config": out / "labelstudio" / "config.xml",
        "labelstudio_tasks": out / "labelstudio" / "tasks.json",
    }
    atomic_write_text(
        files["tasks"], "".join(json.dumps(t.to_dict(), ensure_ascii=False) + "\n" for t in tasks)
    )
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["task_id", "annotator", *[f.name for f in kind.fields], "text"])
    for t in tasks:
        writer.writerow([t.task_id, "", *[""] * len(kind.fields), t.text])
    atomic_write_text(files["csv"], buffer.getvalue())
    atomic_write_text(files["labelstudio_config"], labelstudio_config(kind))
    ls_tasks = [{"data": {"task_id": t.task_id, "language": t.language, "text": t.text}} for t in tasks]
    atomic_write_text(files["labelstudio_tasks"], json.dumps(ls_tasks, ensure_ascii=False, indent=1) + "\n")
    return files


def labelstudio_config(kind: TaskKind) -> str:
    """A Label Studio labeling interface: the task text, then one single-choice block per field,
    each value with its rule as hint."""
    lines = [
        "<View>",
        f"  <Header value={quoteattr(kind.instructions)}/>",
        '  <Text name="text" value="$text"/>',
    ]
    for field in kind.fields:
        lines.append(f"  <Header value={quoteattr(f'{field.title}: {field.guide}')}/>")
        lines.append(
            f'  <Choices name="{field.name}" toName="text" choice="single" required="true" showInline="true">'
        )
        for value, hint in zip(field.values, field.hints or [""] * len(field.values), strict=True):
            lines.append(f"    <Choice value={quoteattr(value)} hint={quoteattr(hint)}/>")
        lines.append("  </Choices>")
    lines.append("</View>")
    return "\n".join(lines) + "\n"


def user_file(path: Path) -> Path:
    """`path` if it is a file; otherwise a UserError that just says so (these files are the user's
    own, not data that `make data` fetches)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a folder, not a file")
    if not path.is_file():
        raise UserError(f"{path}: file not found; check the path")
    return path


def read_tasks(path: Path) -> dict[str, Task]:
    """The tasks of a task folder's ``tasks.jsonl``, by id."""
    path = Path(path)
    if path.is_dir():
        path = path / "tasks.jsonl"
    path = user_file(path)
    tasks = {}
    for lineno, record in read_jsonl(path):
        try:
            task = TASK.validate_python(record)
        except ValidationError as err:
            raise DataError(path, f"line {lineno}", f"not a task record: {record_problem(err)}") from None
        tasks[task.task_id] = task
    if not tasks:
        raise DataError(path, None, "no tasks (empty file)")
    return tasks


# --- import ------------------------------------------------------------------------------------------


def _check(tasks: dict[str, Task], path: Path, where: str, task_id: Any, annotator: Any,
           values: dict[str, Any], tasks_sha256: str | None = None) -> list[Label]:  # fmt: skip
    task_id = str(task_id or "").strip()
    if task_id not in tasks:
        raise DataError(path, where, f"unknown task id {task_id!r} (not in the exported tasks.jsonl)")
    annotator = str(annotator or "").strip()
    if not annotator:
        raise DataError(path, where, "no annotator given (column `annotator`)")
    if len(annotator.splitlines()) != 1:
        raise DataError(path, where, f"annotator {annotator!r} is not a name (one line of text)")
    kind = task_kind(tasks[task_id].kind)
    labels = []
    for name, raw in values.items():
        if raw is None or str(raw).strip() == "":
            continue  # left empty: not labelled
        try:
            field = kind.field(name)
        except KeyError:
            raise DataError(
                path, where, f"field {name!r} is not one of {[f.name for f in kind.fields]}"
            ) from None
        value = field.parse(raw)
        if value is None:
            raise DataError(path, where, f"{name}: {raw!r} is not one of {list(field.values)}")
        labels.append(Label(task_id, kind.name, annotator, name, value, tasks_sha256))
    return labels


def _read_rows(path: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    if path.suffix == ".csv":
        try:
            text = path.read_bytes().decode("utf-8-sig")  # a spreadsheet's UTF-8 may start with a BOM
        except UnicodeDecodeError as err:
            row = path.read_bytes()[: err.start].count(b"\n") + 1
            raise DataError(
                path, f"row {row}", f"not UTF-8 text (byte {err.start}); save the file as UTF-8 (CSV UTF-8)"
            ) from None
        for row_no, row in enumerate(csv.DictReader(io.StringIO(text, newline="")), start=2):
            yield f"row {row_no}", row
    else:
        for lineno, record in read_jsonl(path):
            if not isinstance(record, dict):
                raise DataError(path, f"line {lineno}", "expected a JSON object")
            yield f"line {lineno}", record


def _labelstudio_labels(tasks: dict[str, Task], path: Path, tasks_sha256: str | None = None) -> list[Label]:
    exported = read_json(path)
    if not isinstance(exported, list):
        raise DataError(path, None, "expected a Label Studio JSON export (a list of tasks)")
    labels = []
    for k, item in enumerate(exported):
        where = f"task {k}"
        if not isinstance(item, dict) or "data" not in item:
            raise DataError(path, where, "not a Label Studio task (no `data`)")
        data = _object(item["data"], path, where, "`data`")
        for j, annotation in enumerate(_list(item.get("annotations"), path, where, "`annotations`")):
            annotation = _object(annotation, path, where, f"annotation {j}")
            if annotation.get("was_cancelled"):
                continue
            who = annotation.get("completed_by")
            who = who.get("email") or who.get("id") if isinstance(who, dict) else who
            values = {}
            for result in _list(annotation.get("result"), path, where, f"annotation {j}: `result`"):
                result = _object(result, path, where, f"annotation {j}: a result")
                value = _object(result.get("value") or {}, path, where, f"{result.get('from_name')}: `value`")
                choices = value.get("choices") or []
                if not isinstance(choices, list) or len(choices) != 1:
                    raise DataError(
                        path, where, f"{result.get('from_name')}: expected one choice, got {choices}"
                    )
                values[result.get("from_name")] = choices[0]
            labels += _check(tasks, path, where, data.get("task_id"), who, values, tasks_sha256)
    return labels


def _object(value: Any, path: Path, where: str, what: str) -> dict[str, Any]:
    """`value` if it is a JSON object; a DataError naming `what` otherwise (an export edited by hand,
    or another tool's)."""
    if not isinstance(value, dict):
        raise DataError(path, where, f"{what} is a JSON {_json_type(value)}, expected an object")
    return value


def _list(value: Any, path: Path, where: str, what: str) -> list[Any]:
    """`value` if it is a JSON list (null: empty); a DataError naming `what` otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DataError(path, where, f"{what} is a JSON {_json_type(value)}, expected a list")
    return value


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _rater(value: Any, path: Path, where: str) -> str:
    """The rater of a rating-page record: a non-empty, single-line string (the pages ask for a name)."""
    if not isinstance(value, str):
        raise DataError(
            path, where, f"`rater` is a JSON {_json_type(value)}, expected a rater's name (a string)"
        )
    if not value.strip() or len(value.splitlines()) != 1:
        raise DataError(path, where, f"`rater` {value!r} is not a rater's name (one line of text)")
    return value.strip()


def _rating_row(
    tasks: dict[str, Task], path: Path, where: str, row: dict[str, Any], tasks_sha256: str | None,
    keys: dict[str, str], skipped: dict[tuple[str, str], tuple[Path, str]], salted: bool = True,
) -> list[Label]:  # fmt: skip
    """The labels of one record the rating pages exported ([] for a skipped dialogue); `skipped`
    collects the (task, rater) skipped, and where."""
    if tasks_sha256 is None or row.get("tasks_sha256") != tasks_sha256:
        raise DataError(
            path, where, "rated on the pages of another task file (tasks_sha256 "
            f"{row.get('tasks_sha256')!r}, this one's is {tasks_sha256!r}): a task changed since its pages "
            "were made; rate the pages of this task folder (esc annotate site TASKS)",
        )  # fmt: skip
    task_id = keys.get(str(row.get("task")))
    if task_id is None:
        lost = "" if salted else f" (the task folder has no {SALT_FILE}: if its pages had one, put it back)"
        raise DataError(path, where, f"task {row.get('task')!r} is none of this task folder's{lost}")
    rater = _rater(row.get("rater"), path, where)
    skip = row.get("skipped", False)
    if not isinstance(skip, bool):
        raise DataError(
            path, where, f"`skipped` is a JSON {_json_type(skip)} ({skip!r}), expected true or false"
        )
    if skip:
        if row.get("scores"):
            raise DataError(path, where, "a dialogue both skipped and rated (`skipped` true, with `scores`)")
        skipped[(task_id, rater)] = (path, where)
        return []
    scores = row.get("scores")
    if not isinstance(scores, dict) or not scores:
        raise DataError(path, where, "a rating without `scores` (and not skipped)")
    return _check(tasks, path, where, task_id, rater, scores, tasks_sha256)


def import_labels(
    tasks: dict[str, Task], files: Sequence[Path], tasks_sha256: str | None = None,
    existing: Sequence[Label] = (), skipped: Counter | None = None, salt: str | None = None,
) -> list[Label]:  # fmt: skip
    """Every label of the given files (CSV, JSON lines, Label Studio JSON, the rating pages' JSONL),
    checked against the tasks; a (task, annotator, field) labelled twice, or already in `existing`,
    is an error naming both places, and so is a dialogue a rater both skipped and rated.
    `tasks_sha256`: the task file's checksum, which a rating page's record must carry and each label
    records; `salt`: the task folder's (`read_salt`), to know its blind keys; `skipped` counts the
    dialogues each rater skipped there."""
    labels: list[Label] = []
    seen: dict[tuple[str, str, str], str] = {
        (x.task_id, x.annotator, x.field): "the labels already imported" for x in existing
    }
    keys = {task_key(tasks_sha256, tid, salt): tid for tid in tasks} if tasks_sha256 else {}
    skips: dict[tuple[str, str], tuple[Path, str]] = {}
    rated: dict[tuple[str, str], str] = {
        (x.task_id, x.annotator): "the labels already imported" for x in existing
    }
    for path in map(user_file, files):
        if path.suffix == ".json":
            found = _labelstudio_labels(tasks, path, tasks_sha256)
            places = [f"{path.name}"] * len(found)
        else:
            found, places = [], []
            fields = {"task_id", "annotator", "text", "kind", "language"}
            for where, row in _read_rows(path):
                form = row.get("format")
                if form not in (None, "", RATING_FORMAT):
                    raise DataError(
                        path, where, f"format {form!r} is not one this version reads ({RATING_FORMAT}): "
                        "rated on pages of a newer or other tool",
                    )  # fmt: skip
                if form == RATING_FORMAT:
                    new = _rating_row(tasks, path, where, row, tasks_sha256, keys, skips, salt is not None)
                else:
                    values = {k: v for k, v in row.items() if k not in fields}
                    new = _check(
                        tasks, path, where, row.get("task_id"), row.get("annotator"), values, tasks_sha256
                    )
                found += new
                places += [f"{path.name} {where}"] * len(new)
        for label, place in zip(found, places, strict=True):
            key = (label.task_id, label.annotator, label.field)
            if key in seen:
                raise DataError(path, place, f"{key} is labelled twice (also in {seen[key]})")
            seen[key] = place
            rated.setdefault((label.task_id, label.annotator), place)
            labels.append(label)
    for (task_id, rater), (path, where) in skips.items():
        if (task_id, rater) in rated:
            raise DataError(
                path, where, f"{rater} skipped a dialogue they also rated (in {rated[(task_id, rater)]}); "
                "keep one of the two",
            )  # fmt: skip
        if skipped is not None:
            skipped[rater] += 1
    if not labels:
        raise UserError("no labels found in the files given (are the field columns filled in?)")
    return labels


def write_labels(labels: Sequence[Label], path: Path) -> None:
    atomic_write_text(Path(path), "".join(json.dumps(x.to_dict(), ensure_ascii=False) + "\n" for x in labels))


def read_labels(path: Path) -> list[Label]:
    """The labels of a labels.jsonl (`import` writes it), each checked against its task kind: a
    value out of range (a dialogue score of 7) or an unknown field is a DataError naming the line."""
    path = user_file(path)
    labels = []
    for lineno, record in read_jsonl(path):
        try:
            label = Label(**record)
        except TypeError as err:
            raise DataError(path, f"line {lineno}", f"not a label record ({err})") from None
        labels.append(_checked_label(label, path, f"line {lineno}"))
    return labels


def _checked_label(label: Label, path: Path, where: str) -> Label:

    if label.kind not in KINDS:
        raise DataError(path, where, f"kind {label.kind!r} is not one of {list(KINDS)}")
    kind = task_kind(label.kind)
    try:
        field = kind.field(label.field)
    except KeyError:
        raise DataError(
            path, where, f"field {label.field!r} is not one of {[f.name for f in kind.fields]}"
        ) from None
    value = field.parse(label.value)
    if value is None:
        raise DataError(path, where, f"{label.field}: {label.value!r} is not one of {list(field.values)}")
    return dataclasses.replace(label, value=value)


def to_esc_rank(labels: Sequence[Label], tasks: dict[str, Task], source: object = "labels") -> list[Any]:
    """Dialogue labels as human annotations for ESC-RANK (`esc.annotate.human_scores.Annotation`):
    `train.py +exp=train/esc_rank data.annotations=FILE` trains on them. Each is checked first: its task
    known, one of the seven dimensions, an integer score 0-4 (`source` names the labels in errors)."""

    out = []
    for n, label in enumerate(labels, start=1):
        if label.kind != "dialogue":
            continue
        where = f"label {n} ({label.task_id}, {label.annotator}, {label.field})"
        task = tasks.get(label.task_id)
        if task is None:
            raise DataError(source, where, "unknown task id (not in the tasks.jsonl given with --tasks)")
        score = _score(label.value)
        if label.field not in DIMENSION_KEYS or score not in SCORES:
            raise DataError(
                source, where, f"{label.field}={label.value!r}: expected one of {list(DIMENSION_KEYS)} "
                f"scored with an integer {min(SCORES)}-{max(SCORES)}",
            )  # fmt: skip
        lines = tuple((m.role, m.content) for m in task.payload.dialogue)
        out.append(
            Annotation(
                task.task_id, task.language, lines, label.field, score, label.annotator,
                source=f"{task.payload.target}/{task.payload.roleplayer}",
                input=f"{task.language}:{task.payload.card_id}",
                system=str(task.payload.target),
            )
        )  # fmt: skip
    return out


def _score(value: str) -> int | None:
    text = str(value).strip()
    return int(text) if text.isdigit() else None
