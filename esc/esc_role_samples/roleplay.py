"""General role-play samples (RoleBench, CharacterEval, your own chat files): the role-player is a
named character. The files are read by `esc.corpora.roleplay`; this module builds the samples.

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

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.corpora.roleplay import (
    CHARACTEREVAL_DATA,
    CHARACTEREVAL_PROFILES,
    ROLEBENCH_FILES,
    contained_contexts,
    read_charactereval,
    read_chat_file,
    read_rolebench,
    render_profile,
    scene_key,
    split_line,
)
from esc.errors import DataError
from esc.esc_role_samples.sample import Role, Sample, shape_dialogue
from esc.prompts import training_text

log = logging.getLogger(__name__)


def rolebench_samples(path: Path, language: str, turns: int = 1) -> list[Sample]:
    """One RoleBench JSON-lines file as sessions of `turns` question/answer pairs per role (see the
    module docstring)."""
    path = Path(path)
    tag = f"rolebench-{language}/{path.parent.name}/{path.stem}"
    samples: list[Sample] = []
    for role, pairs in read_rolebench(path).items():
        system = training_text("roleplay_system", language, role=role)
        for k, start in enumerate(range(0, len(pairs), turns)):
            session: list[tuple[Role, str]] = []
            for question, answer in pairs[start : start + turns]:
                session += [("user", question), ("assistant", answer)]
            messages = shape_dialogue(system, session, first_user=None)
            if messages is not None:
                samples.append(Sample(f"{tag}/{role}/{k}", "rolebench", language, None, messages))  # type: ignore[arg-type]
    return samples


def chat_file_samples(path: Path, language: str, name: str) -> list[Sample]:
    """Role-play dialogues of a chat file (the assistant is the character); DataError when none has
    an assistant turn."""
    path = Path(path)
    samples: list[Sample] = []
    for chat in read_chat_file(path):
        messages = shape_dialogue(chat.system, chat.turns, first_user=None)
        if messages is None:
            continue
        if not chat.system:  # no system message: the chat starts with its first turn
            messages = messages[1:]
        samples.append(Sample(f"{name}/{chat.lineno}", name, language, None, messages))  # type: ignore[arg-type]
    if not samples:
        raise DataError(path, None, "no dialogue with an assistant turn")
    return samples


def charactereval_samples(data_path: Path, profiles_path: Path) -> list[Sample]:
    """CharacterEval examples with their character profiles (see the module docstring).

    An example whose context is a prefix of a longer context of the same character (or repeats
    one) is dropped, so no assistant turn is learned twice. Samples carry
    `group` = "charactereval/scene/<hash>".
    """
    scenes, profiles = read_charactereval(data_path, profiles_path)
    by_role: dict[str, list[str]] = defaultdict(list)
    for scene in scenes:
        by_role[scene.role].append(scene.context)
    covered = {role: contained_contexts(contexts) for role, contexts in by_role.items()}
    samples: list[Sample] = []
    seen: set[tuple[str, str]] = set()
    missing_profile = no_reply = redundant = 0
    for scene in scenes:
        role, context = scene.role, scene.context
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
            speaker, text = split_line(line)
            turns.append(("assistant", text) if speaker == role else ("user", line))
        system = training_text(
            "character_system", "zh", role=role, work=scene.work, profile=render_profile(profile)
        )
        messages = shape_dialogue(system, turns, first_user=training_text("scene_start", "zh"))
        if messages is None:
            no_reply += 1
            continue
        group = f"charactereval/scene/{scene_key(context)}"
        samples.append(Sample(f"charactereval/{scene.id}", "charactereval", "zh", None, messages, group))
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
            samples.extend(rolebench_samples(root / rel, language, rolebench_turns))
    if "zh" in languages:
        samples.extend(charactereval_samples(root / CHARACTEREVAL_DATA, root / CHARACTEREVAL_PROFILES))
    for spec in files:
        if spec["language"] in languages:
            path = Path(spec["path"])
            samples.extend(chat_file_samples(path, spec["language"], spec.get("name") or path.stem))
    return samples
