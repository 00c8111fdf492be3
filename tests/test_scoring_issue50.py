"""Issue 50, scoring: what a new user met. A judge with no valid judgment exits 1 and says why; the
API cost estimate bounds what a run spends, at a price that names its model; `mode=leaderboard` on
a loose score file builds its site; the tiny judge's first run in a fresh cache resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from omegaconf import open_dict

from esc.chat.build import backend_settings, build_backend
from esc.errors import ConfigError
from esc.scoring.rubrics import DIMENSION_KEYS
from tests.helpers import compose, evaluate_config, requires_data
from tests.test_bad_inputs import _dialogue_line, run_in_process

PRICE = {"prompt": 0.03, "completion": 0.06}


def _dialogues(root: Path, n: int = 2) -> Path:
    path = root / "run" / "dialogues" / "tiny__tiny__en.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(_dialogue_line(32999 + i) for i in range(n)), encoding="utf-8")
    return root / "run"


def _score_file(path: Path, statuses: list[str]) -> Path:
    """A rank.py score file of one dialogue, its dimensions judged with `statuses` in turn."""
    records = []
    for key, status in zip(DIMENSION_KEYS, statuses, strict=False):
        valid = status == "valid"
        records.append(
            {"dialogue_id": "tiny__tiny__en/32999", "dimension": key, "language": "en", "judge": "tiny",
             "prompt": {"style": "official", "version": 2}, "status": status, "score": 2 if valid else None,
             "error": None if valid else f"only 1.20e-04 of the probability is on the 5 answers ({key})",
             "target": "tiny", "roleplayer": "tiny", "card_id": 32999, "content_sha": "c0ffee"}
        )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _leaderboard(tmp_path: Path, scores: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    argv = ["rank.py", f"hydra.run.dir={tmp_path / 'out'}", "mode=leaderboard", f"scores=[{scores}]",
            "leaderboard.bootstrap=10", "leaderboard.charts=false"]  # fmt: skip
    return run_in_process(argv, monkeypatch, capsys)


# --- a judge with no valid judgment ------------------------------------------------------------------


@requires_data
def test_a_judge_with_no_valid_judgment_exits_1_after_writing_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The reported run: every answer under judge.min_answer_mass. Exit 0 with an all-n/a board and
    the reason only in the score file, before; now the console says it, and the exit code is 1."""
    out = tmp_path / "out"
    argv = ["rank.py", f"hydra.run.dir={out}", "judge=tiny", f"dialogues={_dialogues(tmp_path)}",
            "judge.min_answer_mass=0.5", "leaderboard.bootstrap=10", "leaderboard.charts=false"]  # fmt: skip
    code, stderr, stdout = run_in_process(argv, monkeypatch, capsys)
    assert code == 1, stderr[-1500:]
    last = stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: no valid judgment: 14 of 14 judgments by judge 'tiny' are invalid")
    assert "of the probability is on the 5 answers (< 0.5)" in last and "Traceback" not in stderr
    assert "0 valid, 14 invalid" in stdout  # the summary first
    for written in ("leaderboard.md", "scores/tiny__tiny__en__tiny.jsonl", "report/index.html"):
        assert (out / written).is_file(), written
    assert json.loads((out / "manifest.json").read_text())["no_valid_judgments"] == last.removeprefix(
        "error: "
    )


def test_some_invalid_judgments_are_a_warning_with_the_count_and_the_first_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    scores = _score_file(tmp_path / "in" / "scores" / "a.jsonl", ["valid", "invalid", "valid", "invalid"])
    code, stderr, stdout = _leaderboard(tmp_path, scores, monkeypatch, capsys)
    assert code == 0, stderr[-1500:]
    warning = "[WARNING] - 2 of 4 judgments by judge 'tiny' are invalid (first: tiny__tiny__en/32999, "
    assert warning + "diversity: only 1.20e-04" in stdout + stderr  # Hydra's console log


def test_a_leaderboard_of_only_invalid_judgments_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    scores = _score_file(tmp_path / "in" / "scores" / "a.jsonl", ["invalid"] * 3)
    code, stderr, _ = _leaderboard(tmp_path, scores, monkeypatch, capsys)
    assert code == 1 and "3 of 3 judgments by judge 'tiny' are invalid" in stderr.splitlines()[-1]
    assert (tmp_path / "out" / "leaderboard.md").is_file()


# --- mode=leaderboard on a score file outside a rank.py folder ---------------------------------------


def test_a_leaderboard_of_a_loose_score_file_builds_its_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`scores=[FILE.jsonl]` (documented) with the file in no `scores/` folder: the site was refused
    (its folder is no rank.py folder) and only logged."""
    scores = _score_file(tmp_path / "copied" / "llama3.jsonl", ["valid"] * 7)
    code, stderr, stdout = _leaderboard(tmp_path, scores, monkeypatch, capsys)
    assert code == 0, stderr[-1500:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest.get("site_error") is None and Path(manifest["site"]).is_file()
    assert f"report: {tmp_path / 'out' / 'report' / 'index.html'}" in stdout


# --- the tiny judge's revision -----------------------------------------------------------------------


@requires_data
def test_the_first_tiny_judge_run_in_a_fresh_cache_records_its_revision_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A fresh clone builds the tiny model on first use: the folder recorded `revision: null` (taken
    before the build) and its rerun, which saw the built model's hash, was refused. The build into
    the fresh cache copies this machine's build (the same files; training them again takes ~30 s)."""
    import esc.models.tiny as tiny

    built = tiny.ensure_tiny_model()  # the shared cache's, before the fresh one is set
    copy = lambda spec, out: [shutil.copy2(f, out) for f in built.iterdir() if f.name != "build.json"]  # noqa: E731
    monkeypatch.setattr(tiny, "_train_tokenizer", copy)
    monkeypatch.setattr(tiny, "_init_model", lambda spec, out: None)
    monkeypatch.setenv("ESC_CACHE_DIR", str(tmp_path / "cache"))  # nothing built there yet
    out = tmp_path / "out"
    argv = ["rank.py", f"hydra.run.dir={out}", "judge=tiny", f"dialogues={_dialogues(tmp_path, 1)}",
            "dimensions=[fluency]", "leaderboard.bootstrap=10", "leaderboard.charts=false"]  # fmt: skip
    for _ in range(2):
        code, stderr, _ = run_in_process(argv, monkeypatch, capsys)
        assert code == 0, stderr[-1500:]
    assert (tmp_path / "cache" / "tiny" / built.name / "build.json").is_file()  # built on first use
    resolved = json.loads((out / "settings.json").read_text())["rank.score"]["resolved"]["judge"]
    assert resolved["revision"].startswith("sha256:") and resolved["revision_source"] == "content"


# --- the cost estimate bounds the spending -----------------------------------------------------------


def _parts(manifest: dict) -> dict[str, dict]:
    return {p["label"]: p for p in manifest["cost_estimate"]["parts"]}


@requires_data
def test_what_a_run_spends_stays_under_its_estimate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Both sides of evaluate.py (English and Chinese cards, 3 turns) and then judge=gpt4 on those
    dialogues, all through the fake OpenAI server, which reports the tokens the served model read.
    The estimate was $1.30 where $1.378 was spent: its rule undercounted prompts."""
    from esc.config_schema import validate
    from esc.evaluate.run import evaluate
    from esc.rank.run import rank
    from tests.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        api = {"kind": "openai", "model": "tiny", "base_url": server.url, "api_key_env": None,
               "price": {"model": "tiny", **PRICE}}  # fmt: skip
        run = tmp_path / "evaluate"
        played = evaluate_config(run, "cards.languages=[en,zh]", "dialogue.turns=3", target_backend=api,
                                 roleplayer_backend=api)  # fmt: skip
        evaluate(played, validate(played, "evaluate"))
        manifest = json.loads((run / "manifest.json").read_text())
        parts = _parts(manifest)
        for side, label in (("roleplayer", "role-player tiny"), ("target", "target tiny")):
            spent = manifest["usage"][side]
            assert spent["requests"] == parts[label]["requests"] == 6 * 3
            assert 0 < spent["prompt_tokens"] <= parts[label]["prompt_tokens"], side
            assert spent["completion_tokens"] <= parts[label]["completion_tokens"], side
            assert spent["cost_usd"] <= parts[label]["usd"], side

        cfg = compose(["judge=gpt4", f"dialogues={run}", "cache=off", "scoring.progress=false",
                       "leaderboard.bootstrap=10", "leaderboard.charts=false"],
                      output_dir=tmp_path / "rank", config_name="rank")  # fmt: skip
        with open_dict(cfg):
            cfg.judge.backend = {**cfg.judge.backend, **api}
        rank(cfg, validate(cfg, "rank"))
    manifest = json.loads((tmp_path / "rank" / "manifest.json").read_text())
    part, spent = _parts(manifest)["judge gpt4"], manifest["usage"]["gpt4"]
    assert spent["requests"] == part["requests"] == 6 * len(DIMENSION_KEYS)
    assert 0 < spent["prompt_tokens"] <= part["prompt_tokens"]
    assert spent["cost_usd"] <= part["usd"]
    assert "judge gpt4: 42 requests, <=" in capsys.readouterr().out


def test_the_estimate_names_whose_price_it_used() -> None:
    from esc.chat.cost import CostEstimate, CostPart
    from esc.chat.settings import Price

    part = CostPart("target gpt4", Price.model_validate({"model": "gpt-4-0613", **PRICE}))
    part.add(1000, 100)
    anonymous = CostPart("judge mine", Price.model_validate(PRICE))
    anonymous.add(1000, 100)
    text = CostEstimate([part, anonymous]).summary()
    assert (
        "target gpt4: 1 request, 1,000 prompt + <=100 completion tokens, $0.0360 at gpt-4-0613's price"
        in text
    )
    assert "judge mine: 1 request, 1,000 prompt + <=100 completion tokens, $0.0360 at a price that " in text


def test_a_config_from_gpt4_yaml_with_another_model_is_refused_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """judge=gpt4 pointed at another model keeps gpt4.yaml's price table: refused, naming the key,
    before a chat request (the price would make the estimate and `max_cost` wrong)."""
    from esc.config_schema import validate
    from esc.rank.run import rank
    from tests.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(
        build_backend(backend_settings({"kind": "scripted", "label": "served"})), model_name="gpt-4o"
    ) as server:
        cfg = compose(["judge=gpt4", f"dialogues={_dialogues(tmp_path)}", "cache=off",
                       "scoring.progress=false", "judge.backend.model=gpt-4o",
                       f"judge.backend.base_url={server.url}", "judge.backend.api_key_env=null"],
                      output_dir=tmp_path / "out", config_name="rank")  # fmt: skip
        refused = (
            r"config `judge.backend.price`: is the price of 'gpt-4-0613', but the backend asks for model "
        )
        refused += "'gpt-4o'"
        with pytest.raises(ConfigError, match=refused):
            rank(cfg, validate(cfg, "rank"))
        assert server.requests == 0
    assert not list((tmp_path / "out").rglob("*.jsonl"))
