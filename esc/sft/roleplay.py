"""General role-play readers (RoleBench, CharacterEval, your own chat files): the role-player is a
named character.

These samples keep ESC-Role's general role-playing ability. The paper (section 2.3.1) mixed in five
multi-turn role-play dialogue datasets from Hugging Face that it does not name; what is here:

- CharacterEval (JSON array of `{id, role, novel_name, context}` + `character_profiles.json`;
  Chinese, multi-turn scenes from novels and scripts): system = the character's profile rendered as
  "key：value" lines + instruction. Context lines "名字：台词" spoken by the target role are assistant
  turns (name prefix removed); all other lines are user turns, kept with their speaker prefix;
  consecutive lines of the same side are merged. A scene that opens with the character gets a
  "（场景开始）" user turn first. Examples contained in a longer example of the same character, where
  the character never speaks (the benchmark's first-reply cases) or whose profile is missing are
  skipped. Ids "charactereval/{id}"; examples of one scene share `group` so the val split keeps
  the scene together.
- RoleBench (`{role, question, generated: [...]}` JSON lines; English and Chinese, single-turn
  question/answer pairs in character): a *session* is `turns` consecutive records of one role in
  file order, asked one after the other: system = a short role instruction, then question,
  `generated[0]`, question, `generated[0]`, ... So the model learns to stay in character over
  several turns with its own earlier answers in the context. The questions of a session are
  independent of each other: a stand-in for multi-turn role-play dialogue, not the real thing.
  `turns: 1` gives the single-turn samples of earlier versions. Ids
  "rolebench-{lang}/{subset}/{file stem}/{role}/{k}" (k-th session of the role in the file).
- Your own multi-turn role-play data (`files`): JSON lines in the OpenAI `messages` format
  (`{"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}`) or the ShareGPT
  format (`{"conversations": [{"from": "system"|"human"|"gpt", "value": ...}, ...]}`), such as the
  Hugging Face role-play datasets the paper used. The assistant is the character. Ids
  "{name}/{line number}".
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.errors import DataError
from esc.jsonl import get_field, read_json, read_jsonl
from esc.prompts import training_text
from esc.sft.sample import Role, Sample, shape_dialogue

log = logging.getLogger(__name__)

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


def read_rolebench(path: Path, language: str, turns: int = 1) -> list[Sample]:
    """Read one RoleBench JSON-lines file as sessions of `turns` question/answer pairs per role
    (see the module docstring); records with an empty `generated` list are skipped."""
    path = Path(path)
    subset = path.parent.name
    tag = f"rolebench-{language}/{subset}/{path.stem}"
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
    samples: list[Sample] = []
    for role, pairs in by_role.items():
        system = training_text("roleplay_system", language, role=role)
        for k, start in enumerate(range(0, len(pairs), turns)):
            session: list[tuple[Role, str]] = []
            for question, answer in pairs[start : start + turns]:
                session += [("user", question), ("assistant", answer)]
            messages = shape_dialogue(system, session, first_user=None)
            if messages is not None:
                samples.append(Sample(f"{tag}/{role}/{k}", "rolebench", language, None, messages))  # type: ignore[arg-type]
    return samples


_CHAT_ROLES: dict[str, Role] = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "character": "assistant",
}


def read_chat_file(path: Path, language: str, name: str) -> list[Sample]:
    """Role-play dialogues from a JSON-lines file in the `messages` or ShareGPT format (see the
    module docstring); DataError naming file and line for a record of neither shape."""
    path = Path(path)
    samples: list[Sample] = []
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
            role = _CHAT_ROLES.get(speaker)
            if role is None:
                raise DataError(
                    path,
                    f"{where}, message {k}",
                    f"unknown speaker {speaker!r}; known: {sorted(_CHAT_ROLES)}",
                )
            if role == "system":
                system = f"{system}\n{text}".strip()
            else:
                turns.append((role, text))
        messages = shape_dialogue(system, turns, first_user=None)
        if messages is None:
            continue
        if not system:  # no system message: the chat starts with its first turn
            messages = messages[1:]
        samples.append(Sample(f"{name}/{lineno}", name, language, None, messages))  # type: ignore[arg-type]
    if not samples:
        raise DataError(path, None, "no dialogue with an assistant turn")
    return samples


def render_profile(profile: dict[str, Any]) -> str:
    """Render a CharacterEval profile dict as "key：value" lines (lists joined by 、, dicts by ；)."""

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "；".join(f"{k}：{value(x)}" for k, x in v.items())
        if isinstance(v, list):
            return "、".join(value(x) for x in v)
        return str(v).strip()

    return "\n".join(f"{k}：{value(v)}" for k, v in profile.items())


def _split_line(line: str) -> tuple[str | None, str]:
    """Split "名字：台词" into (speaker, text); (None, line) when there is no speaker prefix."""
    for colon in _COLONS:
        name, sep, text = line.partition(colon)
        if sep and name.strip() and len(name) <= 20:
            return name.strip(), text
    return None, line


def _scene_key(context: str) -> str:
    """Scene id of a CharacterEval context: a short hash of its first line (examples of one scene
    share it; over the 4,564 released examples this matches grouping by shared lines, 1,557 vs 1,554)."""
    first = context.split("\n", 1)[0]
    return hashlib.sha256(first.encode("utf-8")).hexdigest()[:12]


def _drop_prefixes(contexts: list[str]) -> set[str]:
    """The contexts that are a prefix of (or equal to) another context in the list."""
    ordered = sorted(set(contexts))
    return {a for a, b in zip(ordered, ordered[1:], strict=False) if b.startswith(a)}


def read_charactereval(data_path: Path, profiles_path: Path) -> list[Sample]:
    """Read CharacterEval examples with their character profiles (see the module docstring).

    The benchmark has several examples per scene, most a prefix of another one for the same
    character; an example whose context is a prefix of a longer context of the same character
    (or repeats one) is dropped, so no assistant turn is learned twice. Samples carry
    `group` = "charactereval/scene/<hash>".
    """
    data_path, profiles_path = Path(data_path), Path(profiles_path)
    profiles = read_json(profiles_path)
    if not isinstance(profiles, dict):
        raise DataError(
            profiles_path, None, f"expected a JSON object name -> profile, got {type(profiles).__name__}"
        )
    records = read_json(data_path)
    if not isinstance(records, list):
        raise DataError(data_path, None, f"expected a JSON array of examples, got {type(records).__name__}")
    parsed: list[tuple[int | str, str, str, str]] = []
    for index, record in enumerate(records):
        parsed.append(
            (
                get_field(record, "id", (int, str), data_path, index),
                get_field(record, "role", str, data_path, index),
                get_field(record, "novel_name", str, data_path, index),
                get_field(record, "context", str, data_path, index),
            )
        )
    by_role: dict[str, list[str]] = defaultdict(list)
    for _, role, _, context in parsed:
        by_role[role].append(context)
    covered = {role: _drop_prefixes(contexts) for role, contexts in by_role.items()}
    samples: list[Sample] = []
    seen: set[tuple[str, str]] = set()
    missing_profile = no_reply = redundant = 0
    for ex_id, role, work, context in parsed:
        if context in covered[role] or (role, context) in seen:
            redundant += 1
            continue
        seen.add((role, context))
        profile = profiles.get(role)
        if not isinstance(profile, dict):
            missing_profile += 1
            continue
        turns: list[tuple[Role, str]] = []
        for line in context.split("\n"):
            speaker, text = _split_line(line)
            turns.append(("assistant", text) if speaker == role else ("user", line))
        profile_text = render_profile(profile)
        system = training_text("character_system", "zh", role=role, work=work, profile=profile_text)
        messages = shape_dialogue(system, turns, first_user=training_text("scene_start", "zh"))
        if messages is None:
            no_reply += 1
            continue
        group = f"charactereval/scene/{_scene_key(context)}"
        samples.append(Sample(f"charactereval/{ex_id}", "charactereval", "zh", None, messages, group))
    log.info(
        "charactereval: %d samples; skipped %d contained in a longer context of the same character, "
        "%d without a profile, %d where the character never speaks",
        len(samples),
        redundant,
        missing_profile,
        no_reply,
    )
    return samples


def read_roleplay(
    root: Path,
    languages: tuple[str, ...] | list[str] = ("en", "zh"),
    rolebench_turns: int = 1,
    files: Sequence[Mapping[str, Any]] = (),
) -> list[Sample]:
    """All general role-play samples under the data directory `root` for the given languages:
    RoleBench (sessions of `rolebench_turns`), CharacterEval, and `files` ({path, language, name?})."""
    root = Path(root)
    samples: list[Sample] = []
    for language in ("en", "zh"):
        if language not in languages:
            continue
        for rel in ROLEBENCH_FILES[language]:
            samples.extend(read_rolebench(root / rel, language, rolebench_turns))
    if "zh" in languages:
        samples.extend(read_charactereval(root / CHARACTEREVAL_DATA, root / CHARACTEREVAL_PROFILES))
    for spec in files:
        if spec["language"] in languages:
            path = Path(spec["path"])
            samples.extend(read_chat_file(path, spec["language"], spec.get("name") or path.stem))
    return samples
