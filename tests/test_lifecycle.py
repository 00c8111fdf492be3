"""One job lifecycle (`esc.lifecycle`): the status a run ends with, what a stop records, what an
entry point prints and the exit code it ends with; and every job uses it."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from esc.errors import IncompleteRun
from esc.lifecycle import JobResult, job_run, report
from tests.helpers import REPO_ROOT, compose, requires_data


@dataclasses.dataclass
class Done(JobResult):
    failed: int = 0

    def summary(self) -> str:
        return f"{self.failed} failed"

    def incomplete(self) -> str | None:
        return f"{self.failed} failed; rerun to retry them" if self.failed else None


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.parametrize(("failed", "status"), [(0, "completed"), (2, "completed_with_failures")])
def test_the_result_decides_the_status(tmp_path: Path, failed: int, status: str) -> None:
    with job_run(tmp_path, "demo", {"a": 1}, {"seed": 3}, seed=3) as job:
        (tmp_path / "output.txt").write_text("work")
        job.complete(Done(str(tmp_path), failed), extra="x")
    record = manifest(tmp_path)
    assert record["status"] == status and record["extra"] == "x" and record["seed"] == 3
    assert record["end_time"] and json.loads((tmp_path / "settings.json").read_text()) == {"demo": {"a": 1}}


@pytest.mark.parametrize(
    ("error", "status"), [(KeyboardInterrupt(), "interrupted"), (ValueError("bad"), "failed")]
)
def test_a_stop_is_recorded_with_what_the_job_asked_for(
    tmp_path: Path, error: BaseException, status: str
) -> None:
    counts = {"done": 0}
    with pytest.raises(type(error)), job_run(tmp_path, "demo", {"a": 1}, {}, seed=None) as job:
        job.on_stop(lambda: {"counts": dict(counts)})
        (tmp_path / "output.txt").write_text("work")  # work was done: the records stay
        counts["done"] = 4
        raise error
    record = manifest(tmp_path)
    assert record["status"] == status and record["counts"] == {"done": 4}
    assert record["error"].startswith(type(error).__name__)


def test_a_block_that_forgets_its_result_is_a_bug(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="without job.complete"),
        job_run(tmp_path, "demo", None, {}, seed=None),
    ):
        (tmp_path / "output.txt").write_text("work")


def test_report_prints_the_summary_and_an_incomplete_run_exits_with_3(capsys: pytest.CaptureFixture) -> None:
    report(Done("out", 0))
    assert capsys.readouterr().out == "0 failed\n"
    with pytest.raises(IncompleteRun, match="2 failed; rerun") as err:
        report(Done("out", 2))
    assert err.value.exit_code == 3 and capsys.readouterr().out == "2 failed\n"


def test_every_job_runs_inside_the_lifecycle() -> None:
    """No job builds its own RunFolder or RunManifest: `esc.lifecycle` is the only user outside
    `esc.rundir`/`esc.runinfo` (`esc dialogues merge` locks a folder it does not run a job in)."""
    users = {}
    for path in (REPO_ROOT / "esc").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        found = names & {"RunFolder", "RunManifest"}
        if found:
            users[path.relative_to(REPO_ROOT).as_posix()] = found
    assert set(users) == {"esc/lifecycle.py", "esc/rundir.py", "esc/dialogues/merge.py"}, users


@requires_data
def test_esc_rank_training_records_ctrl_c_as_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said `failed` before the jobs shared one lifecycle."""
    from esc.config_schema import validate
    from esc.judge_training import run as train_rank

    def interrupted(*args: object, **kwargs: object) -> None:
        (tmp_path / "empathy").mkdir()
        (tmp_path / "empathy" / "started").write_text("a dimension's folder")
        raise KeyboardInterrupt

    monkeypatch.setattr(train_rank, "train_adapters", interrupted)
    cfg = compose(["+exp=train/esc_rank", "model=tiny", "cpu_fallback=true"], output_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        train_rank.train_esc_rank(cfg, validate(cfg, "train"))
    assert manifest(tmp_path)["status"] == "interrupted"


@requires_data
def test_a_stopped_scoring_run_records_how_far_it_got(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rank.py interrupted after its first chunk: the manifest says `interrupted` and counts the
    judgments already written."""
    from esc.config_schema import validate
    from esc.dialogues.record import Dialogue, Turn
    from esc.rank.run import rank

    turns = [Turn("roleplayer", "I feel stuck.", "stop"), Turn("target", "Tell me more.", "stop")]
    dialogue = Dialogue(32025, "en", "tiny", "tiny", "card prompt", "Hello.", None, turns, "complete")
    source = tmp_path / "dialogues" / "tiny__tiny__en.jsonl"
    source.parent.mkdir()
    source.write_text(json.dumps(dialogue.to_dict()) + "\n")
    from esc.scoring.judges.local import LocalJudge

    calls, real = [], LocalJudge.judge

    def judge_then_stop(self: LocalJudge, items: list) -> list:
        calls.append(len(items))
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(self, items)

    monkeypatch.setattr(LocalJudge, "judge", judge_then_stop)
    out = tmp_path / "rank"
    cfg = compose(
        [
            "judge=tiny",
            f"dialogues={source}",
            "scoring.chunk=3",
            "scoring.progress=false",
            "wandb.enabled=false",
        ],
        output_dir=out,
        config_name="rank",
    )
    with pytest.raises(KeyboardInterrupt):
        rank(cfg, validate(cfg, "rank"))
    record = manifest(out)
    assert (
        record["status"] == "interrupted"
        and sum(record["counts"].get(s, 0) for s in ("valid", "invalid")) == 3
    )


def test_an_entry_points_own_experiment_that_fails_is_not_called_another_ones() -> None:
    """`evaluate.py +exp=evaluate/table2_en ...` that failed to compose said "evaluate/table2_en is an
    experiment of evaluate.py: run `python evaluate.py +exp=evaluate/table2_en`", the command that had
    just failed, and hid Hydra's reason; another entry point's experiment still gets that line."""
    from hydra.errors import ConfigCompositionException

    from esc.lifecycle import hydra_error_line

    err = ConfigCompositionException(
        "In 'exp/evaluate/table2_en': ConfigKeyError raised while composing config:\n"
        "Key 'nodes' not in 'BasicLauncherConf'"
    )
    own = str(hydra_error_line(err, "evaluate.py"))
    assert "experiment of" not in own and "Key 'nodes' not in 'BasicLauncherConf'" in own
    assert "is an experiment of evaluate.py" in str(hydra_error_line(err, "rank.py"))
