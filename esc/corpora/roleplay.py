"""General role-play corpora: RoleBench, CharacterEval, and chat files in the OpenAI `messages` or
ShareGPT format. Each reader returns the dataset's records as plain values, checked, with a
malformed record named by file and record; `esc.esc_role_samples.roleplay` turns them into training samples.

- RoleBench: JSON lines `{role, question, generated: [...]}` (English and Chinese, single-turn
  question/answer pairs in character); `read_rolebench` keeps each role's (question,
  `generated[0]`) pairs in file order, skipping records with an empty `generated` list or a blank
  question or answer.
- CharacterEval: a JSON array of `{id, role, novel_name, context}` and `character_profiles.json`
  (Chinese, multi-turn scenes from novels and scripts; context lines are "名字：台词").
- Chat files: `{"messages": [{"role", "content"}, ...]}` or `{"conversations": [{"from",
  "value"}, ...]}` per line; speakers are mapped to system / user / assistant.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from esc.errors import DataError
from esc.jsonl import get_field, read_json, read_jsonl

Role = Literal["system", "user", "assistant"]

ROLEBENCH_FILES: dict[str, tuple[str, ...]] = {
    "en": (
        "roleplay/rolebench/rolebench-eng/role-generalization/general/test.jsonl",
        "roleplay/rolebench/rolebench-eng/instruction-generalization/role_specific/test.jsonl",
    ),
    "zh": (
        "roleplay/rolebench/rolebench-zh/general/train.jsonl",
        "roleplay/rolebench/rolebench-zh/role_specific/train.jsonl",
    ),
}
CHARACTEREVAL_DATA = "roleplay/charactereval/test_data.jsonl"
CHARACTEREVAL_PROFILES = "roleplay/charactereval/character_profiles.json"
_COLONS = ("：", ":")


def read_rolebench(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Each role's (question, first generated answer) pairs, in file order."""
    path = Path(path)
    by_role: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for lineno, record in read_jsonl(path):
        where = f"line {lineno}"
        role = get_field(record, "role", str, path, where)
        question = get_field(record, "question", str, path, where)
        generated = get_field(record, "generated", list, path, where)
        if not generated:
            continue
        if not isinstance(generated[0], str):
            raise DataError(path, where, f"`generated[0]` should be str, got {type(generated[0]).__name__}")
        if question.strip() and generated[0].strip():
            by_role[role].append((question, generated[0]))
    return dict(by_role)


CHAT_ROLES: dict[str, Role] = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "character": "assistant",
}


@dataclasses.dataclass(frozen=True)
class ChatRecord:
    """One chat of a chat file: its system text (the system messages joined) and its turns."""

    lineno: int
    system: str
    turns: tuple[tuple[Role, str], ...]


def read_chat_file(path: Path) -> list[ChatRecord]:
    """Every record of a JSON-lines chat file in the `messages` or ShareGPT format; DataError naming
    file and line for a record of neither shape or an unknown speaker."""
    path = Path(path)
    chats: list[ChatRecord] = []
    for lineno, record in read_jsonl(path):
        where = f"line {lineno}"
        if isinstance(record, dict) and "messages" in record:
            raw = get_field(record, "messages", list, path, where)
            keys = ("role", "content")
        elif isinstance(record, dict) and "conversations" in record:
            raw = get_field(record, "conversations", list, path, where)
            keys = ("from", "value")
        else:
            raise DataError(path, where, "expected an object with `messages` or `conversations`")
        system = ""
        turns: list[tuple[Role, str]] = []
        for k, message in enumerate(raw):
            speaker = get_field(message, keys[0], str, path, f"{where}, message {k}")
            text = get_field(message, keys[1], str, path, f"{where}, message {k}")
            role = CHAT_ROLES.get(speaker)
            if role is None:
                raise DataError(
                    path,
                    f"{where}, message {k}",
                    f"unknown speaker {speaker!r}; known: {sorted(CHAT_ROLES)}",
                )
            if role == "system":
                system = f"{system}\n{text}".strip()
            else:
                turns.append((role, text))
        chats.append(ChatRecord(lineno, system, tuple(turns)))
    return chats


@dataclasses.dataclass(frozen=True)
class CharacterScene:
    """One CharacterEval example: the character (`role`), its work, and the scene's lines."""

    id: int | str
    role: str
    work: str
    context: str


def read_charactereval(data_path: Path, profiles_path: Path) -> tuple[list[CharacterScene], dict[str, Any]]:
    """The examples, in file order, and the profiles (character name -> profile object)."""
    data_path, profiles_path = Path(data_path), Path(profiles_path)
    profiles = read_json(profiles_path)
    if not isinstance(profiles, dict):
        raise DataError(
            profiles_path, None, f"expected a JSON object name -> profile, got {type(profiles).__name__}"
        )
    records = read_json(data_path)
    if not isinstance(records, list):
        raise DataError(data_path, None, f"expected a JSON array of examples, got {type(records).__name__}")
    scenes = [
        CharacterScene(
            get_field(record, "id", (int, str), data_path, index),
            get_field(record, "role", str, data_path, index),
            get_field(record, "novel_name", str, data_path, index),
            get_field(record, "context", str, data_path, index),
        )
        for index, record in enumerate(records)
    ]
    return scenes, profiles


def render_profile(profile: dict[str, Any]) -> str:
    """Render a CharacterEval profile dict as "key：value" lines (lists joined by 、, dicts by ；)."""

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "；".join(f"{k}：{value(x)}" for k, x in v.items())
        if isinstance(v, list):
            return "、".join(value(x) for x in v)
        return str(v).strip()

    return "\n".join(f"{k}：{value(v)}" for k, v in profile.items())


def split_line(line: str) -> tuple[str | None, str]:
    """Split "名字：台词" into (speaker, text); (None, line) when there is no speaker prefix."""
    for colon in _COLONS:
        name, sep, text = line.partition(colon)
        if sep and name.strip() and len(name) <= 20:
            return name.strip(), text
    return None, line


def scene_key(context: str) -> str:
    """Scene id of a CharacterEval context: a short hash of its first line (examples of one scene
    share it; over the 4,564 released examples this matches grouping by shared lines, 1,557 vs 1,554)."""
    first = context.split("\n", 1)[0]
    return hashlib.sha256(first.encode("utf-8")).hexdigest()[:12]


def contained_contexts(contexts: list[str]) -> set[str]:
    """The contexts that are a prefix of (or equal to) another context in the list: CharacterEval
    has several examples per scene, most a prefix of another one for the same character."""
    ordered = sorted(set(contexts))
    return {a for a, b in zip(ordered, ordered[1:], strict=False) if b.startswith(a)}
