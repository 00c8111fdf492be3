"""A refused or failed start leaves the run folder as it was (esc.rundir, docs/runs.md).

A rerun into a folder with other settings is refused before any work; Hydra's record of the job
(`.hydra/`), the log, the settings and the manifest are written only once the folder has accepted
the run, so the refused rerun changes no byte of the folder. A start that crashes before any work
puts the folder's records back, so it pins no settings and the corrected rerun runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from esc.rundir import SETTINGS_FILE
from tests.helpers import FAST_TRAIN, requires_data
from tests.test_bad_inputs import EN_CARD, _dialogue_line, run_in_process

pytestmark = requires_data  # the tiny model's tokenizer is trained on the third-party data


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` by its sha256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """A card file and an evaluate.py-like folder of one dialogue (for rank.py)."""
    (tmp_path / "cards.json").write_text(json.dumps([EN_CARD], ensure_ascii=False), encoding="utf-8")
    dialogues = tmp_path / "run" / "dialogues"
    dialogues.mkdir(parents=True)
    (dialogues / "tiny__tiny__en.jsonl").write_text(_dialogue_line(32999), encoding="utf-8")
    return tmp_path


def _argv(job: str, inputs: Path, out: Path) -> list[str]:
    if job == "evaluate.py":
        return [
            job, f"hydra.run.dir={out}", "roleplayer=tiny", "target=tiny", "cards.languages=[en]",
            f"cards.paths=[{inputs}/cards.json]", "dialogue.turns=1", "cache.enabled=false",
            "engine.progress=false",
        ]  # fmt: skip
    if job == "train.py":
        return [job, f"hydra.run.dir={out}", *FAST_TRAIN, "trainer.max_steps=1"]
    return [
        job, f"hydra.run.dir={out}", "judge=tiny", f"dialogues={inputs}/run", "dimensions=[empathy]",
        "scoring.progress=false", "leaderboard.charts=false", "leaderboard.bootstrap=10",
    ]  # fmt: skip


#: per entry point, an override that changes the folder's settings, and the key the refusal names
OTHER_SETTINGS = {
    "evaluate.py": ("dialogue.turns=2", "dialogue.turns"),
    "train.py": ("peft.r=4", "peft.r"),
    "rank.py": ("judge.prompt=paper", "judge.prompt"),
}


@pytest.mark.parametrize("job", sorted(OTHER_SETTINGS))
def test_a_refused_rerun_changes_no_byte_of_the_folder(
    job: str, inputs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = inputs / "out"
    code, stderr, _ = run_in_process(_argv(job, inputs, out), monkeypatch, capsys)
    assert code == 0, stderr[-2000:]
    assert (out / ".hydra" / "config.yaml").is_file() and (out / SETTINGS_FILE).is_file()
    before = tree(out)

    override, key = OTHER_SETTINGS[job]
    code, stderr, _ = run_in_process([*_argv(job, inputs, out), override], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in stderr, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {out} was written with {key}="), last
    assert tree(out) == before  # .hydra/, the log, settings, manifest: every byte as it was


def _boom(*args: object, **kwargs: object) -> None:
    raise RuntimeError("the Trainer could not start")


def test_a_start_that_crashes_before_any_work_pins_no_settings(
    inputs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A bad precision is a one-line error before the folder is touched; a crash the config checks
    cannot foresee (here the Trainer) puts the folder back as it was: a first run leaves no settings
    behind, so a rerun with other settings runs; a rerun into a good folder leaves it byte for byte."""
    import pytorch_lightning as pl

    out = inputs / "out"
    train = _argv("train.py", inputs, out)
    code, stderr, _ = run_in_process([*train, "trainer.precision=banana"], monkeypatch, capsys)
    assert code == 2 and stderr.strip().splitlines()[-1].startswith("error: config `trainer.precision`")
    assert not out.exists() or tree(out) == {}

    with monkeypatch.context() as patch:
        patch.setattr(pl.Trainer, "__init__", _boom)
        with pytest.raises(Exception, match="could not start"):  # Hydra wraps it
            run_in_process([*train, "peft.r=4"], monkeypatch, capsys)
    assert tree(out) == {}  # no settings, manifest or log, nor the lock file (issue 62)

    code, stderr, _ = run_in_process(train, monkeypatch, capsys)  # other settings than the crashed start
    assert code == 0, stderr[-2000:]
    before = tree(out)
    with monkeypatch.context() as patch:
        patch.setattr(pl.Trainer, "__init__", _boom)
        with pytest.raises(Exception, match="could not start"):  # Hydra wraps it
            run_in_process(train, monkeypatch, capsys)
    assert tree(out) == before


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["max_cost=0.000001"], "over the budget of $0.0000010"),
        (["judge.backend.price=null", "max_cost=5"], "cannot be checked"),
    ],
)
def test_a_start_refused_by_max_cost_leaves_no_folder(
    overrides: list[str],
    said: str,
    inputs: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Issue 62: rank.py refused by `max_cost` (checked once the mode has planned its score files,
    in the accepted folder) exited 2 leaving OUT with `.lock` and an empty `scores/`."""
    import tests.scripted_backend  # noqa: F401  (registers backend kind "scripted")
    from esc.chat.build import backend_settings, build_backend
    from tests.fake_openai_server import FakeOpenAIServer

    out = inputs / "out"
    with FakeOpenAIServer(
        build_backend(backend_settings({"kind": "scripted"})), served_models=["gpt-4-0613"]
    ) as server:
        argv = [
            "rank.py", f"hydra.run.dir={out}", "judge=gpt4", f"judge.backend.base_url={server.url}",
            "judge.backend.api_key_env=null", f"dialogues={inputs}/run", "scoring.progress=false", *overrides,
        ]  # fmt: skip
        code, stderr, _ = run_in_process(argv, monkeypatch, capsys)
        assert server.requests == 0
    assert code == 2 and "Traceback" not in stderr, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: config `max_cost`: ") and said in last, last
    assert not out.exists(), sorted(str(p.relative_to(out)) for p in out.rglob("*"))
