"""The job behind `rank.py`: one judge (or none), one run folder, one of its modes.

    score        dialogues -> judgments on 7 dimensions -> leaderboard   (esc.jobs.score)
    leaderboard  existing score files -> leaderboard                     (esc.jobs.score)
    agreement    a judge, or score files, against the human scores       (esc.jobs.agreement)
    correlation  text metrics and judges against the human scores        (esc.jobs.agreement)
    roleplay     role-players on the six role-play metrics, and against people (esc.jobs.roleplay)
    trajectory   the seekers' emotion trajectories of evaluate.py runs, no judge (esc.jobs.trajectory)
    safety       every reply of the targets against the safety checklist (esc.jobs.safety)
    pairwise     two chatbots on the same card, preferred per dimension in both orders (esc.jobs.pairwise)

Every mode runs inside `esc.lifecycle.job_run` and returns its own `JobResult`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from esc.chat.cache import CACHE_CONFIG
from esc.config_rules import (
    Rule,
    Section,
    boolean,
    either,
    file_name,
    integer,
    keys,
    list_of,
    number,
    one_of,
    paths,
)
from esc.errors import ConfigError
from esc.hashing import sha256_file
from esc.jobs.agreement import run_agreement, run_correlation_mode
from esc.jobs.pairwise import run_pairwise
from esc.jobs.roleplay import run_roleplay
from esc.jobs.safety import run_safety
from esc.jobs.score import run_scores
from esc.jobs.trajectory import run_trajectory
from esc.lifecycle import Job, JobResult, job_run
from esc.reports.agreement_data import SPLITS as AGREEMENT_SPLITS
from esc.reports.jury import JURY, POOLS, READINGS, jury_names
from esc.reports.site import build_site
from esc.roleplay.metrics import ROLEPLAY_METRICS_FILE
from esc.rundir import model_settings
from esc.safety.checklist import checklist_digest, question_keys
from esc.scoring.judge import Judge
from esc.scoring.judges import build_judge, judge_config
from esc.scoring.pairwise import pairwise_digest
from esc.scoring.rubrics import LANGUAGES
from esc.scoring.store import score_file_paths

log = logging.getLogger(__name__)

Runner = Callable[[Job, Mapping[str, Any], Path, Any], JobResult]
RUNNERS: dict[str, Runner] = {
    "score": run_scores,
    "leaderboard": run_scores,
    "agreement": run_agreement,
    "correlation": run_correlation_mode,
    "roleplay": run_roleplay,
    "trajectory": run_trajectory,
    "safety": run_safety,
    "pairwise": run_pairwise,
}
MODES = tuple(RUNNERS)


#: the modes that read dialogue files (`dialogues=`)
DIALOGUE_MODES = ("score", "roleplay", "trajectory", "safety", "pairwise")
#: the modes whose items ask their own questions (`ScoreItem.messages`), not a dimension's rubric
OWN_QUESTIONS = ("roleplay", "safety", "pairwise")


def judges_in(mode: str, resolved: Mapping[str, Any]) -> bool:
    """Whether the mode judges (and so loads the judge): agreement only without existing `scores`."""
    return mode in ("score", "roleplay", "safety", "pairwise") or (
        mode == "agreement" and not resolved.get("scores")
    )


def rank(cfg: DictConfig) -> JobResult:
    """Run the configured mode in `cfg.output_dir`; see the module docstring."""
    out = Path(cfg.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    mode = cfg.get("mode", "score")
    if mode not in RUNNERS:
        raise ConfigError("mode", f"{mode!r} is not one of {', '.join(MODES)}")
    members = jury_members(resolved, mode)
    judge: Any = members or (build_judge(resolved["judge"]) if judges_in(mode, resolved) else None)
    if mode in OWN_QUESTIONS and judge is not None and judge.scores_by_adapter:
        raise ConfigError(
            "judge.adapters",
            f"per-dimension score adapters (ESC-RANK) learned to score a dialogue 0-4 on a dimension, not "
            f"to answer mode={mode}'s questions: use the base model (judge.adapters.layout=none) or "
            "another judge",
        )
    try:
        settings = output_settings(mode, resolved, judge)
        with job_run(out, f"rank.{mode}", settings, resolved, seed=cfg.get("seed")) as job:
            judges = members or ([judge] if judge is not None else [])

            def spent() -> dict[str, Any]:  # what API judges were sent and cost (estimated: cost_estimate)
                usage = {j.name: u for j in judges if (u := j.usage())}
                return {"usage": usage} if usage else {}

            job.on_stop(spent)  # also when the run fails or is interrupted
            result = RUNNERS[mode](job, resolved, out, judge)
            job.manifest.update(**spent())
    finally:
        for each in members or ([judge] if judge is not None else []):
            each.close()
    # after the run's end (its status stays what its results made it; the judge is freed)
    job.manifest.update(**write_site(out, resolved, mode))
    return result


def site_sources(out: Path, resolved: Mapping[str, Any], mode: str) -> list[Path]:
    """The folders the run's site shows: OUT, and for mode=leaderboard the rank.py folders whose
    score files it read (`scores`: folders, or files under a folder's `scores/`)."""
    if mode != "leaderboard":
        return [out]
    folders = []
    for path in score_file_paths(resolved.get("scores"), "scores"):
        folder = path.parent.parent if path.parent.name == "scores" else path.parent
        if folder not in folders:
            folders.append(folder)
    return [out, *folders]  # OUT: the leaderboard.md this run wrote


def write_site(out: Path, resolved: Mapping[str, Any], mode: str = "score") -> dict[str, Any]:
    """The report site of this run, `OUT/report/index.html` (`report.enabled`; docs/report.md),
    rebuilt whole after every run. Its failure is logged and recorded (`site_error`) and loses
    nothing: the judgments and tables are written before it."""
    section = resolved.get("report") or {}
    if not section.get("enabled", True):
        return {}
    cards = (resolved.get("leaderboard") or {}).get("cards")
    try:
        site = build_site(
            site_sources(out, resolved, mode), out / "report", section.get("title"), cards=cards
        )
    except Exception as err:  # the report is a view of files already written
        log.warning("The report site was not built: %s: %s", type(err).__name__, err)
        return {"site": None, "site_error": f"{type(err).__name__}: {err}"}
    print(f"report: {site.index}", flush=True)
    return {"site": str(site.index)}


def jury_members(resolved: Mapping[str, Any], mode: str) -> list[Judge]:
    """The judges of `jury.members` (`conf/jury/`, or `+judge@jury.members.NAME=OPTION`) to judge
    with, each built from its node: in mode=score; [] without a jury, and in mode=leaderboard, which
    pools the members' existing score files by name. Other modes take one judge."""
    jury = resolved.get("jury") or {}
    names = jury_names(jury)
    if not names:
        return []
    if mode not in ("score", "leaderboard"):
        raise ConfigError(
            "jury",
            f"a jury judges in mode=score (and reports in mode=leaderboard), not mode={mode}; use one "
            "judge (judge=...)",
        )
    if len(set(names)) != len(names) or JURY in names:
        raise ConfigError(
            "jury.members",
            f"the judges' names must differ and not be {JURY!r} (files and rows are named by them): {names}",
        )
    for name in names:
        problem = file_name()(name)
        if problem:
            raise ConfigError("jury.members", f"a judge's name {problem} (it names the score files)")
    if jury.get("min_valid") is not None and int(jury["min_valid"]) > len(names):
        raise ConfigError("jury.min_valid", f"is {jury['min_valid']}, but the jury has {len(names)} judges")
    if mode == "leaderboard":
        return []
    return [build_judge(node, key=f"jury.members.{key}") for key, node in jury["members"].items()]


def output_settings(mode: str, resolved: Mapping[str, Any], judge: Judge | None) -> dict[str, Any] | None:
    """What shapes the judgments a rank.py folder keeps (OUT/settings.json); None for the modes that
    rewrite their reports whole (leaderboard, correlation, agreement on existing scores)."""
    if judge is None:
        return None
    if isinstance(judge, list):  # a jury: what shapes its judgments (pooling is rebuilt with the report)
        return {"jury": {j.name: _judge_settings(j) for j in judge}}
    settings: dict[str, Any] = {"judge": _judge_settings(judge)}
    if mode == "agreement":
        section = resolved.get("agreement") or {}
        settings["annotations"] = {
            k: section.get(k) for k in ("annotations", "languages", "split_ratios", "split_seed", "split")
        }
    if mode == "roleplay":  # what its items ask: the cards, the human dialogues, the questions' texts
        section = resolved.get("roleplay") or {}
        settings["roleplay"] = {k: section.get(k) for k in ("cards", "human", "turns", "metrics", "pairwise")}
        settings["roleplay"]["questions_sha256"] = sha256_file(ROLEPLAY_METRICS_FILE)
    if mode == "safety":  # the checklist's texts (each judgment's content hash covers its prompt too)
        settings["safety"] = {"checklist_sha256": checklist_digest()}
    if mode == "pairwise":
        settings["pairwise"] = {"questions_sha256": pairwise_digest()}
    return settings


def _judge_settings(judge: Judge) -> dict[str, Any]:
    """A judge's part of the folder's fingerprint: its identity, the rubric named by style and
    version. The rubric's sha256 is left to each judgment's record (a changed text re-judges, and
    a version cannot keep a changed text: `esc/prompts/checksums.json`), so folders judged before
    judgments recorded it still resume."""
    settings = model_settings(judge.identity())
    prompt = settings.get("prompt")
    if isinstance(prompt, dict):
        settings["prompt"] = {k: v for k, v in prompt.items() if k != "sha256"}
    return settings


def _mode(cfg: Any) -> Any:
    return cfg.get("mode", "score")


def _judging(cfg: Any) -> bool:
    return judges_in(_mode(cfg), cfg)


#: what rank.py reads of its config (`esc.config_schema.validate`); `judge` only in the modes that judge
CONFIG: tuple[Section, ...] = (
    Section(
        "",
        (
            Rule("seed", integer()),
            Rule("mode", one_of(*MODES)),
            Rule("max_cost", number(minimum=0, null=True), "USD: refuse a run estimated over it"),
            Rule(
                "dialogues",
                paths(),
                "evaluate.py output dirs or dialogue files",
                when=lambda cfg: _mode(cfg) in DIALOGUE_MODES,
            ),
            Rule(
                "scores",
                paths(),
                "rank.py output dirs or score files",
                when=lambda cfg: _mode(cfg) == "leaderboard",
            ),
            Rule("scores", either(one_of(None), paths()), when=lambda cfg: _mode(cfg) == "agreement"),
        ),
    ),
    CACHE_CONFIG,
    Section("scoring", (Rule("chunk", integer(1)),), keys("chunk", "progress")),
    Section(
        "leaderboard",
        (
            Rule("bootstrap", integer(0)),
            Rule("breakdowns", boolean()),
            Rule("min_n", integer(1)),
            Rule("cards", either(one_of(None), paths("file")), "card files; null: the released cards"),
        ),
        keys("bootstrap", "breakdowns", "cards", "charts", "min_n"),
    ),
    Section(
        "agreement",
        (
            Rule("split", one_of(*AGREEMENT_SPLITS)),
            Rule("split_ratios", list_of(number(minimum=0), length=3), "train : val : test"),
            Rule("languages", list_of(one_of(*LANGUAGES))),
            Rule("bootstrap", integer(0)),
        ),
        keys(
            "annotations",
            "baselines",
            "bootstrap",
            "label",
            "languages",
            "split",
            "split_ratios",
            "split_seed",
        ),
    ),
    Section(
        "correlation",
        (Rule("bootstrap", integer(0)),),
        keys("annotations", "bootstrap", "metrics", "references", "scores"),
    ),
    Section("roleplay", keys=keys("bootstrap", "cards", "human", "metrics", "pairwise", "turns")),
    Section(
        "trajectory", (Rule("bootstrap", integer(0)), Rule("charts", boolean())), keys("bootstrap", "charts")
    ),
    Section(
        "pairwise",
        (
            Rule("bootstrap", integer(0)),
            Rule("prior", number(above=0, multiple_of=0.5), "pseudo-wins each way per pair"),
        ),
        keys("bootstrap", "prior"),
    ),
    Section("report", (Rule("enabled", boolean()),), keys("enabled", "title")),
    Section(
        "jury",
        (
            Rule("pool", one_of(*POOLS)),
            Rule("min_valid", integer(1, null=True), "null: every judge"),
            Rule("reading", one_of(*READINGS)),
        ),
        keys("members", "pool", "min_valid", "reading"),
    ),
    Section(
        "safety",
        (
            Rule("bootstrap", integer(0)),
            Rule(
                "questions",
                either(one_of("all", null=True), list_of(one_of(*question_keys()))),
                "checklist keys",
            ),
        ),
        keys("bootstrap", "questions"),
    ),
    *judge_config(_judging),
)
