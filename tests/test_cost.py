"""Cost before you spend it (issue 23): requests, tokens and dollars printed before an API run, the
estimate in the manifest, and `max_cost` refusing a run over budget before any file is written."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from omegaconf import open_dict

import tests.scripted_backend  # noqa: F401  (registers backend kind "scripted")
from esc.chat.build import backend_settings, build_backend
from esc.chat.cost import (
    MESSAGE_TOKENS,
    REQUEST_TOKENS,
    CostEstimate,
    CostPart,
    bound_tokens,
    check_budget,
    count_prompt,
)
from esc.chat.settings import Price
from esc.config_schema import validate
from esc.dialogues.record import Dialogue, Turn
from esc.errors import ConfigError
from esc.evaluate.run import evaluate
from esc.rank.run import rank
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.safety_checklist import question_keys
from tests.helpers import compose, evaluate_config, run_job
from tests.scripted_backend import ScriptedBackend

PRICE = {"prompt": 0.03, "completion": 0.06}  # gpt-4-0613's, USD per 1K tokens
CARD = {
    "base": "Age: 30\nGender: Female\nOccupation: Teacher\nProblem: Argues with her husband about money.",
    "res": "家庭生活",
    "source": "ESconv",
    "language": "english",
}
IDS = (32999, 33000, 33001)


@pytest.fixture
def cards(tmp_path: Path) -> Path:
    path = tmp_path / "cards.json"
    path.write_text(json.dumps([{**CARD, "id": i} for i in IDS], ensure_ascii=False), encoding="utf-8")
    return path


def priced_cfg(out: Path, cards: Path, *overrides: str, rp: dict | None = None, target: dict | None = None):
    """Scripted role-player and target (priced unless `rp` / `target` say otherwise; a node with its
    own `kind` replaces the scripted one) on the 3 cards."""
    return evaluate_config(
        out,
        f"cards.paths=[{cards}]",
        "cards.languages=[en]",
        *overrides,
        roleplayer_backend={"kind": "scripted", "label": "seeker", "price": PRICE, **(rp or {})},
        target_backend=target
        if target and "kind" in target
        else {"kind": "scripted", "label": "helper", "price": PRICE, **(target or {})},
    )


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


# --- the rule and the arithmetic --------------------------------------------------------------------


def test_the_token_bound_and_the_backend_count() -> None:
    assert bound_tokens("abcdefgh") == 8  # a token holds at least one byte
    assert bound_tokens("我很难过") == 12 and bound_tokens("ok 好") == 6  # UTF-8 bytes
    messages = [{"role": "system", "content": "one two three"}, {"role": "user", "content": "four"}]
    assert count_prompt(build_backend(backend_settings({"kind": "scripted"})), messages) == (
        4,
        True,
    )  # it counts words, offline
    unpriced = build_backend(backend_settings({"kind": "scripted"}))
    unpriced.counts_tokens_offline = False  # as an hf model, whose count would load the model
    assert count_prompt(unpriced, messages) == (REQUEST_TOKENS + 13 + 4 + 2 * MESSAGE_TOKENS, False)


def test_parts_add_up_and_the_budget_refuses_one_line() -> None:
    target = CostPart("target gpt4", Price.model_validate(PRICE))
    target.add(1000, 100, requests=2)
    judge = CostPart("judge tiny", None)
    judge.add(500, 8, counted=False)
    total = CostEstimate.total([CostEstimate([target], "a"), None, CostEstimate([judge], "b")])
    assert total is not None and total.requests == 3 and total.prompt_tokens == 1500
    assert total.usd == pytest.approx(0.03 + 0.006)  # the unpriced part adds no dollars
    assert CostEstimate.total([None, None]) is None
    text = total.summary()
    assert "target gpt4: 2 requests, 1,000 prompt + <=100 completion tokens, $0.0360" in text
    assert "judge tiny: 1 request, <=500 prompt" in text and "no price" in text
    assert "upper bound" in text and "max_cost" in text
    check_budget(total, None)  # no budget
    check_budget(total, 0.036)  # at the budget
    with pytest.raises(ConfigError, match=r"config `max_cost`: this run would cost up to \$0.0360") as err:
        check_budget(total, 0.01)
    assert "\n" not in str(err.value)


# --- evaluate.py ----------------------------------------------------------------------------------


def test_evaluate_counts_cards_x_turns_x_sides_and_records_the_estimate(
    tmp_path: Path, cards: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    turns, rp_max, target_max = 2, 32, 32  # the tiny configs' max_new_tokens
    ScriptedBackend.instances.clear()
    run_job("evaluate", priced_cfg(out, cards, f"dialogue.turns={turns}"))
    printed = capsys.readouterr().out
    estimate = manifest(out)["cost_estimate"]
    parts = {p["label"]: p for p in estimate["parts"]}
    assert estimate["requests"] == len(IDS) * turns * 2  # cards x turns x sides
    assert parts["role-player tiny"]["requests"] == parts["target tiny"]["requests"] == len(IDS) * turns
    assert f"Cost estimate ({len(IDS)} dialogues x {turns} turns)" in printed
    assert f"target tiny: {len(IDS) * turns} requests" in printed and "~" not in printed

    # by hand: each prompt as the backend counts it, earlier turns at max_new_tokens (+ the frame)
    seeker, helper = ScriptedBackend.instances[-2:]
    first_rp, first_target = seeker.calls[0][0], helper.calls[0][0]
    rp_base = seeker.count_tokens(first_rp)
    target_base = helper.count_tokens(first_target[:1])  # its system prompt
    turn_rp, turn_target = rp_max + MESSAGE_TOKENS, target_max + MESSAGE_TOKENS
    assert parts["role-player tiny"]["prompt_tokens"] == len(IDS) * (2 * rp_base + turn_rp + turn_target)
    assert parts["target tiny"]["prompt_tokens"] == len(IDS) * (
        (target_base + turn_rp) + (target_base + 2 * turn_rp + turn_target)
    )
    assert parts["target tiny"]["completion_tokens"] == len(IDS) * turns * target_max  # the upper bound
    usd = sum(p["prompt_tokens"] * 0.03 / 1000 + p["completion_tokens"] * 0.06 / 1000 for p in parts.values())
    assert estimate["usd"] == pytest.approx(usd)
    # what was really sent stays under the estimate; the real cost is in the manifest's usage
    assert sum(len(batch) for batch in seeker.calls + helper.calls) == estimate["requests"]
    usage = manifest(out)["usage"]
    assert 0 < usage["target"]["cost_usd"] <= parts["target tiny"]["usd"]


def test_a_rerun_counts_only_the_cards_not_done(
    tmp_path: Path, cards: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    run_job("evaluate", priced_cfg(out, cards, f"cards.ids=[{IDS[0]}]", "dialogue.turns=1"))
    capsys.readouterr()
    run_job("evaluate", priced_cfg(out, cards, "dialogue.turns=1"))
    assert "2 dialogues x 1 turns, 1 already done" in capsys.readouterr().out
    assert manifest(out)["cost_estimate"]["requests"] == 2 * 2


def test_written_emotion_ratings_are_counted(tmp_path: Path, cards: Path) -> None:
    """A role-player that writes its rating (an API: method parse): one after the seeker's first
    message and one after every reply."""
    out = tmp_path / "out"
    run_job("evaluate", priced_cfg(out, cards, "dialogue.turns=2", "trajectory.enabled=true"))
    parts = {p["label"]: p for p in manifest(out)["cost_estimate"]["parts"]}
    assert parts["emotion ratings (role-player tiny)"]["requests"] == len(IDS) * (2 + 1)
    assert manifest(out)["cost_estimate"]["requests"] == len(IDS) * (2 * 2 + 3)


def test_a_priced_observer_alone_is_estimated(tmp_path: Path, cards: Path) -> None:
    """Local (unpriced) sides and an API observer: its written ratings are the money."""
    out = tmp_path / "out"
    cfg = priced_cfg(out, cards, "dialogue.turns=2", "trajectory.enabled=true", "trajectory.rater=observer",
                     rp={"price": None}, target={"price": None})  # fmt: skip
    with open_dict(cfg):
        cfg.trajectory.observer = {"name": "watcher", "backend": {"kind": "scripted", "price": PRICE}}
    evaluate(cfg, validate(cfg, "evaluate"))
    estimate = manifest(out)["cost_estimate"]
    parts = {p["label"]: p for p in estimate["parts"]}
    assert parts["emotion ratings (observer)"]["requests"] == len(IDS) * (2 + 1)
    assert parts["emotion ratings (observer)"]["completion_tokens"] == len(IDS) * 3 * 48  # its max_new_tokens
    assert estimate["usd"] == parts["emotion ratings (observer)"]["usd"]


def test_over_max_cost_is_refused_before_any_request_or_file(
    tmp_path: Path, cards: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    ScriptedBackend.instances.clear()
    cfg = priced_cfg(out, cards, "max_cost=0.001")
    with pytest.raises(
        ConfigError, match=r"config `max_cost`: this run would cost up to \$0\.\d+ \(30 requests"
    ):
        evaluate(cfg, validate(cfg, "evaluate"))
    assert "Cost estimate" in capsys.readouterr().out  # printed first: where the money would go
    assert all(not backend.calls for backend in ScriptedBackend.instances)
    assert not out.exists() or not any(out.rglob("*.json*"))  # no dialogue, manifest or settings


def test_an_unpriced_run_prints_no_estimate(
    tmp_path: Path, cards: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    run_job("evaluate", priced_cfg(out, cards, "max_cost=0", rp={"price": None}, target={"price": None}))
    assert "Cost estimate" not in capsys.readouterr().out
    assert "cost_estimate" not in manifest(out)


def test_an_api_target_over_budget_gets_no_chat_request(
    tmp_path: Path, cards: Path, capsys: pytest.CaptureFixture
) -> None:
    """The openai backend through the fake server: its prompts are bounded by their bytes (<=), and a
    run over budget sends nothing but the readiness check."""
    from tests.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(build_backend(backend_settings({"kind": "scripted", "label": "served"}))) as server:
        api = {"kind": "openai", "model": "tiny", "base_url": server.url, "api_key_env": None, "price": PRICE}
        cfg = priced_cfg(tmp_path / "out", cards, "max_cost=0.01", rp={"price": None}, target=api)
        with pytest.raises(ConfigError, match="max_cost"):
            evaluate(cfg, validate(cfg, "evaluate"))
        assert server.requests == 0
    printed = capsys.readouterr().out
    assert "role-player tiny: 15 requests" in printed and "no price" in printed
    assert "target tiny: 15 requests, <=" in printed and "one token per UTF-8 byte" in printed


# --- rank.py --------------------------------------------------------------------------------------


def _dialogue(card: int, texts: Sequence[str]) -> Dialogue:
    d = Dialogue(card, "en", "seeker", "bot", "sys", "Hello, I'm your assistant.", None, status="complete")
    d.turns = [Turn("roleplayer" if i % 2 == 0 else "target", text, "stop") for i, text in enumerate(texts)]
    return d


def _dialogues(root: Path, n: int = 2) -> Path:
    path = root / "run" / "dialogues" / "bot__seeker__en.jsonl"
    path.parent.mkdir(parents=True)
    dialogues = [_dialogue(1000 + i, ["I feel stuck.", "Tell me more.", "Work.", "I see."]) for i in range(n)]
    path.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in dialogues))
    return root / "run"


def rank_cfg(out: Path, dialogues: Path, *overrides: str, price: dict | None = PRICE):
    """judge=gpt4 (prompt paper, max_new_tokens 8) on a priced scripted backend."""
    cfg = compose(
        ["judge=gpt4", f"dialogues={dialogues}", "cache=off", "scoring.progress=false",
         "leaderboard.bootstrap=10", "leaderboard.charts=false", "safety.bootstrap=10", *overrides],
        output_dir=out, config_name="rank",
    )  # fmt: skip
    with open_dict(cfg):
        cfg.judge.backend = {"kind": "scripted", "label": "judge", "price": price}
    return cfg


def test_rank_score_counts_items_and_records_the_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    run_job("rank", rank_cfg(out, _dialogues(tmp_path)))
    estimate = manifest(out)["cost_estimate"]
    assert estimate["requests"] == 2 * len(DIMENSION_KEYS)  # dialogues x dimensions
    assert estimate["completion_tokens"] == 2 * len(DIMENSION_KEYS) * 8  # judge.max_new_tokens
    assert f"judge gpt4: {2 * len(DIMENSION_KEYS)} requests" in capsys.readouterr().out
    run_job("rank", rank_cfg(out, _dialogues(tmp_path / "more", 3)))  # the same two dialogues and a third
    assert manifest(out)["cost_estimate"]["requests"] == len(DIMENSION_KEYS)  # only the third is judged


def test_rank_safety_counts_replies_x_questions(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_job("rank", rank_cfg(out, _dialogues(tmp_path), "mode=safety"))
    assert manifest(out)["cost_estimate"]["requests"] == 2 * 2 * len(question_keys())  # dialogues x replies


def test_rank_over_max_cost_writes_no_score(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="config `max_cost`"):
        run_job("rank", rank_cfg(out, _dialogues(tmp_path), "max_cost=0.0001"))
    assert "Cost estimate" in capsys.readouterr().out
    assert not list(out.rglob("*.jsonl")) and not (out / "manifest.json").exists()


def test_rank_with_an_unpriced_judge_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    run_job("rank", rank_cfg(out, _dialogues(tmp_path), "max_cost=0", price=None))
    assert "Cost estimate" not in capsys.readouterr().out and "cost_estimate" not in manifest(out)


def test_dollars_keep_two_significant_digits_below_a_hundredth_of_a_cent() -> None:
    """Issue 36: `max_cost=0.00001` printed "over the budget of $0.0000"."""
    from esc.chat.cost import usd

    assert [usd(x) for x in (12.345, 0.5, 0.0001, 0.00001, 0.0000123, 0)] == [
        "$12.35", "$0.5000", "$0.0001", "$0.000010", "$0.000012", "$0.0000"
    ]  # fmt: skip


# --- issue 62: a budget that cannot be checked, a negative price, a refused start's folder ----------


def tree(folder: Path) -> dict[str, bytes] | None:
    """Every file and folder under `folder` (a folder as None, a file by its bytes); None when
    `folder` does not exist."""
    if not folder.exists():
        return None
    found = sorted(folder.rglob("*"))
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in found}


def api_backend(server, price: dict | None = None) -> dict:
    return {"kind": "openai", "model": "tiny", "base_url": server.url, "api_key_env": None, "price": price}


def test_max_cost_on_an_api_side_without_a_price_is_refused(
    tmp_path: Path, cards: Path, capsys: pytest.CaptureFixture
) -> None:
    """A side that sends requests to a server and has no price: max_cost cannot be checked, so the
    run is refused before any chat request or file, naming the price to set; a local side without a
    price (here the scripted role-player, in this process) needs none."""
    from tests.fake_openai_server import FakeOpenAIServer

    out = tmp_path / "out"
    with FakeOpenAIServer(build_backend(backend_settings({"kind": "scripted", "label": "served"}))) as server:
        cfg = priced_cfg(out, cards, "max_cost=1", rp={"price": None}, target=api_backend(server))
        with pytest.raises(ConfigError, match=r"config `max_cost`: cannot be checked") as err:
            evaluate(cfg, validate(cfg, "evaluate"))
        assert server.requests == 0
    message = str(err.value)
    assert "target.backend.price" in message and "max_cost=null" in message, message
    assert "{model: tiny, prompt: 0, completion: 0}" in message and "\n" not in message
    assert "roleplayer.backend.price" not in message  # the scripted role-player runs in this process
    printed = capsys.readouterr().out
    assert "target tiny: 15 requests" in printed and "no price" in printed  # the estimate, unpriced
    assert tree(out) is None


def test_an_api_side_without_a_price_and_no_budget_prints_its_requests(
    tmp_path: Path, cards: Path, capsys: pytest.CaptureFixture
) -> None:
    from tests.fake_openai_server import FakeOpenAIServer

    out = tmp_path / "out"
    with FakeOpenAIServer(build_backend(backend_settings({"kind": "scripted", "label": "served"}))) as server:
        run_job(
            "evaluate",
            priced_cfg(out, cards, "dialogue.turns=1", rp={"price": None}, target=api_backend(server)),
        )
    printed = capsys.readouterr().out
    assert "Cost estimate (3 dialogues x 1 turns): 6 requests" in printed and "no price" in printed
    assert manifest(out)["cost_estimate"]["usd"] is None


def test_rank_max_cost_with_an_unpriced_api_judge_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from tests.fake_openai_server import FakeOpenAIServer

    out = tmp_path / "out"
    with FakeOpenAIServer(build_backend(backend_settings({"kind": "scripted", "label": "served"}))) as server:
        cfg = rank_cfg(out, _dialogues(tmp_path), "max_cost=5")
        with open_dict(cfg):
            cfg.judge.backend = api_backend(server)
        with pytest.raises(ConfigError, match=r"config `max_cost`: cannot be checked.*judge\.backend\.price"):
            rank(cfg, validate(cfg, "rank"))
        assert server.requests == 0
    assert tree(out) is None


@pytest.mark.parametrize("field", ["prompt", "completion"])
def test_a_negative_price_is_refused_naming_its_key(tmp_path: Path, cards: Path, field: str) -> None:
    """A negative price made the estimate negative ("at most $-50"), so max_cost never refused."""
    price = {**PRICE, field: -1.0}
    out = tmp_path / "out"
    named = rf"config `target\.backend\.price\.{field}`: must be greater than or equal to 0, got -1"
    with pytest.raises(ConfigError, match=named):  # the backend's settings (`Price`) refuse it
        run_job("evaluate", priced_cfg(out, cards, "max_cost=1", target={"price": price}))
    assert tree(out) is None
    with pytest.raises(ConfigError, match=rf"config `judge\.backend\.price\.{field}`"):
        backend_settings({"kind": "scripted", "price": price}, "judge.backend")  # a node made in code too


def test_rank_refused_by_max_cost_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    """Issue 62: a start refused by max_cost left OUT with `.lock` and an empty `scores/`."""
    dialogues = _dialogues(tmp_path)
    out = tmp_path / "new"
    with pytest.raises(ConfigError, match="config `max_cost`"):
        run_job("rank", rank_cfg(out, dialogues, "max_cost=0.0001"))
    assert tree(out) is None  # a folder the run made is gone again

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="config `max_cost`"):
        run_job("rank", rank_cfg(out, dialogues, "max_cost=0.0001"))
    assert tree(out) == {"notes.txt": b"mine"}

    out = tmp_path / "judged"
    run_job("rank", rank_cfg(out, dialogues))
    before = tree(out)
    with pytest.raises(ConfigError, match="config `max_cost`"):  # a third dialogue to judge
        run_job("rank", rank_cfg(out, _dialogues(tmp_path / "more", 3), "max_cost=0.0001"))
    assert tree(out) == before
