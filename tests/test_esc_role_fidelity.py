"""ESC-Role data as the paper builds it (issue 9): no learned turn recites its card, the authors'
Chinese prompt for training and evaluation alike, the paper's mix ratio, multi-turn role play."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esc.corpora.roleplay import ROLEBENCH_FILES
from esc.corpora.smile import smile_dir
from esc.errors import ConfigError, DataError
from esc.esc_role_samples import echo
from esc.esc_role_samples.echo import card_echo_turns, echoes_card
from esc.esc_role_samples.mixture import PAPER_ROLEPLAY_RATIO, build_samples
from esc.esc_role_samples.roleplay import chat_file_samples, rolebench_samples
from esc.esc_role_samples.sample import esc_sample
from esc.esc_role_samples.smile import read_smile
from esc.esc_role_samples.tokenize import IGNORE_INDEX, encode_chat
from esc.paths import data_dir
from esc.prompts import render_roleplayer_prompt
from tests.helpers import compose
from tests.test_esc_role_data import mixture, tokenizer  # noqa: F401  (fixture)

ROOT = data_dir()
ESC_SOURCES = ("esconv", "smile")
needs_all = pytest.mark.skipif(
    not all((ROOT / d).is_dir() for d in ("esconv", "smile", "roleplay")),
    reason="ESConv / Smile / role-play data missing: run `make data`",
)


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def recites(card: str, turn: str, width: int = 12) -> bool:
    """Whether half of the turn's `width`-character windows occur in the card, or a short turn is
    the card's problem line: computed independently of `esc.esc_role_samples.echo` (windows, not matched
    blocks). Short generic turns ("i feel depressed") are only flagged when they are the problem."""
    c, t = _fold(card), _fold(turn)
    if len(t) < 2 * width:
        problem_line = card.rsplit("Problem:", 1)[-1].rsplit("问题：", 1)[-1].split("\n", 1)[0]
        return t == _fold(problem_line)
    windows = [t[i : i + width] for i in range(len(t) - width + 1)]
    return sum(w in c for w in windows) >= 0.5 * len(windows)


# --- the card is never the first learned turn ------------------------------------------------------


@needs_all
def test_no_sample_of_the_whole_mixture_learns_to_recite_its_card_first() -> None:
    cfg = compose([]).data  # the default mixture, every source, every sample
    train, val = build_samples(cfg)
    esc = [s for s in train + val if s.source in ESC_SOURCES]
    assert len(esc) > 3000
    reciting = []
    for s in esc:
        card = s.messages[0]["content"]
        first = s.learned_turns()[0]
        if recites(card, s.messages[first]["content"]):
            reciting.append((s.id, s.messages[first]["content"][:80]))
    assert not reciting, reciting[:5]
    # Smile cards are the client's first message: that message stays in the context, unlearned
    smile = [s for s in esc if s.source == "smile"]
    held = [s for s in smile if 2 in s.hold_out]  # messages: system, opener, first client turn
    assert len(held) > 0.95 * len(smile)
    for s in held[:50]:  # the card's problem is the message (cut to 200 characters)
        assert _fold(s.messages[2]["content"])[:100] in _fold(s.messages[0]["content"])


def test_echo_rule_on_written_cases() -> None:
    card = "Age: young\nProblem: My fiance and I are splitting up after 5 years and I feel lost."
    assert echoes_card(card, "My fiance and I are splitting up after 5 years")
    assert echoes_card(card, "yes.   MY FIANCE and I are splitting up")  # case and spaces folded
    assert not echoes_card(card, "yes")  # short turns share little by chance
    assert not echoes_card(card, "We broke up. Five years together, and now I have to start over alone.")
    long_card = "问题：" + "我最近因为工作压力很大，每天晚上都睡不着，白天没有精神，领导还总是批评我。" * 3
    assert echoes_card(long_card, "你好。" + long_card[3:90] + "你能帮帮我吗？我真的不知道该怎么办了。" * 5)
    messages = [
        {"role": "system", "content": card},
        {"role": "user", "content": "My fiance and I are splitting up"},  # the supporter: never held out
        {"role": "assistant", "content": "my fiance and I are splitting up after 5 years"},
        {"role": "user", "content": "I'm sorry."},
        {"role": "assistant", "content": "thanks"},
    ]
    assert card_echo_turns(card, messages) == (2,)


def full_rule(card: str, turn: str) -> bool:
    """The echo rule on difflib's count alone (what `echoes_card` decided before its bound)."""
    problem = echo.card_problem(card)
    return echo.is_echo(echo.shared_chars(problem, turn), len(echo._fold(problem)), len(echo._fold(turn)))


def test_the_bound_never_changes_a_decision() -> None:
    """`covered_chars` bounds `shared_chars` from above, so checking it first skips difflib only
    where no echo is possible: on random texts of a small alphabet (long shared stretches are
    common) and on ESConv's seeker turns against their cards."""
    import random

    rng = random.Random(0)
    pairs = []
    for _ in range(400):
        a = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 120)))
        b = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 120)))
        pairs.append(("Problem: " + a, b))
    if (ROOT / "esconv").is_dir():
        from esc.corpora.esconv import SEEKER, esconv_path, read_esconv
        from esc.esc_role_samples.esconv import esconv_card

        for n, d in enumerate(read_esconv(esconv_path(ROOT, "train"), "train")):
            if n == 120:
                break
            card = esconv_card(d.situation, d.problem_type, d.emotion_type)
            pairs += [(card, u.text) for u in d.utterances if u.speaker == SEEKER]
    bounded = 0
    for card, turn in pairs:
        problem = echo.card_problem(card)
        assert echo.covered_chars(problem, turn) >= echo.shared_chars(problem, turn), (card, turn)
        assert echoes_card(card, turn) == full_rule(card, turn), (card, turn)
        sizes = len(echo._fold(problem)), len(echo._fold(turn))
        bounded += not echo.is_echo(echo.covered_chars(problem, turn), *sizes)
    assert sum(map(lambda p: full_rule(*p), pairs)) > 0 and bounded > len(pairs) // 2  # both kinds seen


def test_a_held_out_turn_is_context_without_labels(tokenizer) -> None:  # noqa: F811
    sample = esc_sample(
        "x/1",
        "smile",
        "zh",
        None,
        "问题：我失业了，很难过",
        [("assistant", "我失业了，很难过"), ("user", "我理解。"), ("assistant", "谢谢")],
    )
    assert sample is not None and sample.hold_out == (2,)
    enc = encode_chat(tokenizer, sample.messages, 4096, sample.hold_out)
    learned = tokenizer.decode(
        [t for t, lab in zip(enc["input_ids"], enc["labels"], strict=True) if lab != IGNORE_INDEX]
    )
    context = tokenizer.decode(enc["input_ids"])
    assert "我失业了，很难过<|im_end|>" in context  # still in the conversation
    assert learned == "谢谢<|im_end|>"  # only the later turn is learned
    only_echo = esc_sample(
        "x/2", "smile", "zh", None, "问题：我失业了，很难过", [("assistant", "我失业了，很难过")]
    )
    assert encode_chat(tokenizer, only_echo.messages, 4096, only_echo.hold_out) is None  # nothing to learn


@needs_all
def test_the_echo_ablation_learns_the_reciting_turns_again() -> None:
    base = mixture(
        {
            "sources": {"smile": {"enabled": True, "max_samples": 40}},
            "roleplay_ratio": 0,
            "val_fraction": 0,
        }
    )
    held, _ = build_samples(base)
    learned, _ = build_samples({**base, "hold_out_card_echo": False})
    assert sum(bool(s.hold_out) for s in held) > 30
    assert not any(s.hold_out for s in learned)
    with pytest.raises(ConfigError, match="data.hold_out_card_echo"):
        build_samples({**base, "hold_out_card_echo": "yes"})


@needs_all
def test_smile_cards_from_a_card_file(tmp_path: Path) -> None:
    files = sorted(smile_dir(ROOT).glob("*.json"))[:3]
    cards = tmp_path / "cards.jsonl"
    card = "年龄：青年\n性别：女\n职业：学生\n问题：学业压力大，和父母关系紧张。"
    cards.write_text(json.dumps({"id": f"smile/{files[0].stem}", "card": card}, ensure_ascii=False) + "\n")
    samples = read_smile(files, card_file=cards)
    assert [s.id for s in samples] == [f"smile/{files[0].stem}"]  # dialogues without a card are skipped
    assert card in samples[0].messages[0]["content"]
    assert samples[0].learned_turns()[0] == 2  # the first client message is learned: it is not the card
    cards.write_text(cards.read_text() + json.dumps({"id": f"smile/{files[0].stem}", "card": "x"}) + "\n")
    with pytest.raises(DataError, match=r"cards.jsonl.*line 2.*a second card"):
        read_smile(files, card_file=cards)


# --- one prompt per language for training and evaluation --------------------------------------------


@needs_all
@pytest.mark.parametrize("language", ["en", "zh"])
def test_esc_role_local_trains_and_evaluates_with_the_same_prompt(language: str, tmp_path: Path) -> None:
    from esc.cards import load_cards
    from esc.config_schema import validate
    from esc.evaluate.run import DialogueFactory, EvaluateSettings

    adapter = tmp_path / "adapter"  # a PEFT folder's shape, which validation checks; nothing loads it here
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    cfg = compose(
        ["roleplayer=esc_role_local", f"roleplayer.backend.adapter={adapter}", "target=tiny"],
        output_dir=tmp_path,
        config_name="evaluate",
    )
    card = load_cards(language=language, limit=1)[0]
    run = validate(cfg, "evaluate")[EvaluateSettings]
    evaluation = DialogueFactory(run.roleplayer, run.target, run.seeker, {})(card).roleplayer_view()
    training = esc_sample("x/1", "esconv", language, None, card.to_text(), [("assistant", "hi")])
    assert training.messages[:2] == evaluation[:2]  # system prompt with the card, then the opener
    if language == "zh":  # the authors' own Chinese prompt and opener (official evaluate.py), not ours
        assert evaluation[:2] == [
            {
                "role": "system",
                "content": render_roleplayer_prompt("esc_role_official", "zh", card.to_text())[0],
            },
            {"role": "user", "content": "你好，我是您的私人助手，您有任何烦恼都可以向我诉说！"},
        ]


# --- the paper's mix, multi-turn role play --------------------------------------------------------


def test_the_default_mix_is_the_papers() -> None:
    assert PAPER_ROLEPLAY_RATIO == 3.13  # (14,000 - 3,390) / 3,390
    for exp in ([], ["+exp=train/esc_role"], ["+exp=train/esc_role_smollm2"]):
        assert compose(exp).data.roleplay_ratio == PAPER_ROLEPLAY_RATIO, exp


@needs_all
def test_the_mixture_draws_the_ratio_or_the_whole_pool() -> None:
    cfg = mixture(
        {
            "sources": {
                "esconv": {"enabled": True, "max_samples": 100},
                "roleplay": {"enabled": True, "rolebench_turns": 5},
            },
            "languages": ["en"],
            "val_fraction": 0,
        }
    )
    train, _ = build_samples(cfg)  # conf's ratio: 313 role-play sessions per 100 ESC dialogues
    assert sum(s.source == "rolebench" for s in train) == round(PAPER_ROLEPLAY_RATIO * 100)
    every_esconv = {**cfg["sources"]["esconv"], "max_samples": None}
    whole, _ = build_samples({**cfg, "sources": {**cfg["sources"], "esconv": every_esconv}})
    pool = sum(len(rolebench_samples(ROOT / f, "en", 5)) for f in ROLEBENCH_FILES["en"])
    assert sum(s.source == "rolebench" for s in whole) == pool < round(PAPER_ROLEPLAY_RATIO * 1300)


@needs_all
def test_rolebench_sessions_are_multi_turn_and_use_every_record_once() -> None:
    path = ROOT / ROLEBENCH_FILES["en"][0]
    single = rolebench_samples(path, "en", 1)
    sessions = rolebench_samples(path, "en", 5)
    assert len(sessions) == sum(-(-n // 5) for n in _records_per_role(single).values())
    assert max(len(s.learned_turns()) for s in sessions) == 5
    pairs = [
        (s.messages[k]["content"], s.messages[k + 1]["content"])
        for s in sessions
        for k in range(1, len(s.messages), 2)
    ]
    assert sorted(pairs) == sorted((s.messages[1]["content"], s.messages[2]["content"]) for s in single)
    for s in sessions:  # one role per session, its instruction as the system prompt
        assert s.messages[0]["content"] == single[0].messages[0]["content"].replace(
            _role(single[0]), _role(s)
        )


def _role(sample) -> str:
    return sample.id.split("/")[3]


def _records_per_role(samples) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in samples:
        counts[_role(s)] = counts.get(_role(s), 0) + 1
    return counts


def test_own_role_play_files_in_messages_and_sharegpt_form(tmp_path: Path) -> None:
    path = tmp_path / "rp.jsonl"
    rows = [
        {"messages": [
            {"role": "system", "content": "You are Holmes."},
            {"role": "user", "content": "Who are you?"},
            {"role": "assistant", "content": "Sherlock Holmes."},
            {"role": "user", "content": "Where do you live?"},
            {"role": "assistant", "content": "221B Baker Street."},
        ]},
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Elementary."}]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b = chat_file_samples(path, "en", "mine")
    assert a.id == "mine/1" and [m["role"] for m in a.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert len(a.learned_turns()) == 2
    assert b.messages == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Elementary."}]
    cfg = mixture(
        {
            "sources": {
                "esconv": {"enabled": True, "max_samples": 100},
                "roleplay": {
                    "enabled": True,
                    "files": [{"path": str(path), "language": "en", "name": "mine"}],
                },
            },
            "roleplay_ratio": 100,  # more than the pool: all of it
            "languages": ["en"],
        }
    )
    train, val = build_samples(cfg)
    assert {"mine/1", "mine/2"} <= {s.id for s in train + val}
    path.write_text(
        path.read_text() + json.dumps({"conversations": [{"from": "narrator", "value": "x"}]}) + "\n"
    )
    with pytest.raises(DataError, match=r"rp.jsonl.*line 3, message 0.*unknown speaker 'narrator'"):
        chat_file_samples(path, "en", "mine")
    with pytest.raises(ConfigError, match=r"data.sources.roleplay.files`: item 0: language: is not set"):
        build_samples(
            {
                **cfg,
                "sources": {
                    **cfg["sources"],
                    "roleplay": {**cfg["sources"]["roleplay"], "files": [{"path": str(path)}]},
                },
            }
        )
