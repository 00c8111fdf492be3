"""Seeker profiles (`seekers.yaml`, see its header): how hard the help-seeker is to help.

A profile is an instruction the role-player reads as one more line of its role card (inserted by
`esc.prompts.registry.render_roleplayer_prompt`, after the card, for every kind of role-player
prompt) and a yes/no adherence question about one seeker turn. `cooperative`, the default, has an
empty instruction and no question: its dialogues are those of a run made before profiles existed,
and its records carry no `meta.seeker` (`record_identity` is None for it).

Every profile is versioned; `checksums.json` records the checksum of each version's texts
(`seekers` > name), and loading refuses a text changed without a new version with one line naming
this file, the profile and the line to add (`checked_question_texts`, as every question file).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import yaml

from esc.errors import UserError
from esc.prompts.registry import CHECKSUMS_FILE, LANGUAGES, checked_question_texts

SEEKERS_FILE = Path(__file__).with_name("seekers.yaml")
COOPERATIVE = "cooperative"  # the default: today's seeker, which adds nothing to any prompt
KEY = "seeker.name"
_KEYS = {"version", "instruction", "question"}


def load_seekers(path: Path = SEEKERS_FILE, checksums_file: Path = CHECKSUMS_FILE) -> dict[str, Any]:
    """Read and check the file: name -> profile. A UserError naming the file (and the profile) for a
    malformed file or a text that does not match the checksum recorded for its version."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or set(data) != {"profiles"} or not isinstance(data["profiles"], dict):
        raise UserError(f"{path}: the top level must be exactly `profiles`, a mapping of name to profile")
    profiles = data["profiles"]
    if COOPERATIVE not in profiles:
        raise UserError(f"{path}: the profile `{COOPERATIVE}` (the default) is missing")
    for name, profile in profiles.items():
        _check_profile(path, str(name), profile)
        checked_question_texts(f"seekers.{name}", profile, path, checksums_file)
    return profiles


def _check_profile(path: Path, name: str, profile: Any) -> None:
    where = f"{path}: seekers.{name}"
    if not isinstance(profile, dict) or set(profile) != _KEYS:
        raise UserError(f"{where}: must hold exactly {sorted(_KEYS)}")
    texts = {"instruction": profile["instruction"], "question": profile["question"]}
    for field, value in texts.items():
        if value is None and field == "question":
            continue
        if not isinstance(value, dict) or set(value) != set(LANGUAGES):
            raise UserError(f"{where}.{field}: needs exactly the languages {LANGUAGES}")
        if not all(isinstance(text, str) for text in value.values()):
            raise UserError(f"{where}.{field}: every text must be a string")
    instructions = profile["instruction"].values()
    if name == COOPERATIVE:
        if any(instructions) or profile["question"] is not None:
            raise UserError(f"{where}: the cooperative seeker adds no text (empty instructions, no question)")
        return
    if not all(text.strip() for text in instructions):
        raise UserError(f"{where}.instruction: every language needs a text (only `{COOPERATIVE}` adds none)")
    if profile["question"] is None or not all(q.strip() for q in profile["question"].values()):
        raise UserError(f"{where}.question: every language needs the adherence question")


@functools.cache
def _profiles() -> dict[str, dict[str, Any]]:
    return load_seekers(SEEKERS_FILE, CHECKSUMS_FILE)  # the module's files when first asked


def profile_names() -> list[str]:
    """Every profile `seeker.name` accepts (the files of conf/seeker/), cooperative first."""
    return sorted(_profiles(), key=lambda name: (name != COOPERATIVE, name))


def profile_problem(name: Any) -> str | None:
    """a seeker profile of esc/prompts/seekers.yaml"""
    if name in _profiles():
        return None
    return f"unknown seeker profile {name!r}; known: {', '.join(profile_names())}"


def profile_version(name: str) -> int:
    return int(_profiles()[name]["version"])


def instruction(name: str, language: str) -> str:
    """The profile's line of the role card in `language`; "" for the cooperative seeker."""
    return str(_profiles()[name]["instruction"][language])


def adherence_question(name: str, language: str) -> str | None:
    """The yes/no question about one seeker turn that says whether the profile was played; None for
    the cooperative seeker (the baseline every other profile's question is also asked of)."""
    question = _profiles()[name]["question"]
    return None if question is None else str(question[language])


def profile_settings(name: str) -> dict[str, Any] | None:
    """What a run folder's fingerprint records of the profile (name, version); None for the
    cooperative seeker, so a folder made before profiles resumes as it always did."""
    return None if name == COOPERATIVE else {"name": name, "version": profile_version(name)}


def record_identity(name: str, language: str) -> dict[str, Any] | None:
    """What a dialogue record names in `meta.seeker`: the profile, its version and the sha256 of its
    instruction as inserted for the card's language; None for the cooperative seeker (no key: its
    records are what they were before profiles)."""
    settings = profile_settings(name)
    if settings is None:
        return None
    text = instruction(name, language)
    return {**settings, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def described(identity: dict[str, Any] | None) -> str:
    """A profile as an error line names it: `resistant (version 1)`, or `cooperative`."""
    if not identity:
        return COOPERATIVE
    return f"{identity.get('name')} (version {identity.get('version')})"
