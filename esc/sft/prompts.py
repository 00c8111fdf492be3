"""Versioned prompt texts for ESC-Role training data (paper Figure 11, plus role-play instructions).

`PROMPTS` is plain data: bump `version` whenever a text changes, because a trained ESC-Role
checkpoint expects the exact system prompt it was trained with. The English role-player prompt
and supporter opener are quoted verbatim from Figure 11 of the paper (arXiv 2406.14952); the
Chinese versions are our translations (the paper shows only the English case).
"""

from __future__ import annotations

from typing import Any, Literal

from esc.errors import UserError

Language = Literal["en", "zh"]
LANGUAGES: tuple[Language, ...] = ("en", "zh")

PROMPTS: dict[str, Any] = {
    "version": 1,
    # System prompt of the ESC role-player (the seeker). `{card}` is the role card text.
    "role_player_system": {
        "en": (
            "I hope you can role-play as a person with worries and communicate with an AI assistant. "
            "Here is your character card:\n{card}\n"
            "Please simulate a natural human conversation as much as possible. Avoid behaving like a "
            "machine and refrain from mentioning that you are an AI assistant. Gradually reveal your "
            "worries throughout our multiple conversations."
        ),
        "zh": (
            "我希望你能扮演一个有烦恼的人，和一位AI助手交流。以下是你的角色卡：\n{card}\n"
            "请尽可能模拟自然的人类对话，避免表现得像机器，也不要提及你是AI助手。"
            "在我们的多轮对话中逐步透露你的烦恼。"
        ),
    },
    # First supporter turn (a `user` message) when the seeker would otherwise speak first.
    "supporter_opener": {
        "en": (
            "Hello, I'm your personal assistant. "
            "You can confide in me about any worries or concerns you may have!"
        ),
        "zh": "你好，我是你的私人助手。你可以向我倾诉你的任何烦恼和忧虑！",
    },
    # Card layout used until an LLM card extractor exists (same field order as the ESC-Eval cards).
    "card": {
        "en": "Age: {age}\nGender: {gender}\nOccupation: {occupation}\nProblem: {problem}",
        "zh": "年龄：{age}\n性别：{gender}\n职业：{occupation}\n问题：{problem}",
    },
    "not_mentioned": {"en": "Not mentioned", "zh": "未提及"},
    # General role-play (RoleBench): the role-player is the named character, not a seeker.
    "roleplay_system": {
        "en": (
            "You are {role}. Stay in character: reply as {role} would, in {role}'s own voice, "
            "personality and speaking style, and never mention that you are an AI."
        ),
        "zh": "你是{role}。请始终保持角色：以{role}的身份、性格和说话风格来回答，不要提及你是AI。",
    },
    # CharacterEval: profile lines + instruction. `{profile}` is the rendered profile.
    "character_system": {
        "zh": (
            "你是{role}，来自《{work}》。以下是你的人物资料：\n{profile}\n"
            "请始终以{role}的身份、性格和说话风格与其他人物对话，不要提及你是AI。"
        ),
    },
    # User turn inserted when the character speaks first in a CharacterEval scene.
    "scene_start": {"zh": "（场景开始）"},
}


def _lookup(name: str, language: str) -> str:
    """Return the template `name` in `language`; UserError if that language has none."""
    texts = PROMPTS[name]
    if language not in texts:
        raise UserError(f"prompt `{name}` has no {language!r} version (have: {sorted(texts)})")
    return texts[language]


def role_player_system_prompt(card_text: str, language: str) -> str:
    """System prompt that tells the role-player to act as the seeker described by `card_text`."""
    return _lookup("role_player_system", language).format(card=card_text.strip())


def supporter_opener(language: str) -> str:
    """The supporter's first message (Figure 11), used as the first user turn."""
    return _lookup("supporter_opener", language)


def format_card(
    language: str,
    problem: str,
    age: str | None = None,
    gender: str | None = None,
    occupation: str | None = None,
) -> str:
    """Render a role card with the Age/Gender/Occupation/Problem lines; missing fields are 'not mentioned'."""
    missing = _lookup("not_mentioned", language)
    return _lookup("card", language).format(
        age=age or missing,
        gender=gender or missing,
        occupation=occupation or missing,
        problem=problem.strip(),
    )


def prompt(name: str, language: str, **fields: str) -> str:
    """Format any template of `PROMPTS` by name (e.g. `roleplay_system`, `character_system`)."""
    return _lookup(name, language).format(**fields)
