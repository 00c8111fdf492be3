"""The job behind `rank.py`: one judge (or none, or a jury), one run folder, one registered mode.

Each mode is a `esc.tasks.task.Mode` in its own module (`python rank.py mode=NAME`):

    score        dialogues -> judgments on 7 dimensions -> leaderboard   (esc.tasks.score.task)
    leaderboard  existing score files -> leaderboard                     (esc.tasks.score.task)
    agreement    a judge, or score files, against the human scores       (esc.tasks.agreement.task)
    correlation  text metrics and judges against the human scores        (esc.tasks.correlation.task)
    roleplay     role-players on the six role-play metrics, and against people (esc.tasks.roleplay.task)
    trajectory   the seekers' emotion trajectories of evaluate.py runs, no judge (esc.tasks.trajectory.task)
    safety       every reply of the targets against the safety checklist (esc.tasks.safety.task)
    pairwise     two chatbots on the same card, preferred per dimension in both orders
                 (esc.tasks.pairwise.task)
    stress       perturbed dialogues judged beside their originals: the judge's report card
                 (esc.tasks.stress.task)
    robustness   each target with hard seekers against the cooperative seeker, and whether the
                 role-player played them (esc.tasks.robustness.task)

`tests/test_lists.py` holds this list to the registry (`esc.tasks.task.modes()`).

This module builds the judge(s) the mode needs, opens the run (`esc.lifecycle.job_run`, the
folder's fingerprint from `output_settings`), runs the mode (`esc.tasks.task.run_mode`), frees the
judge and rebuilds the report site.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from pydantic import Field

from esc.chat.cache import CACHE_CONFIG
from esc.config_rules import Section, Settings
from esc.errors import ConfigError
from esc.lifecycle import JobResult, job_run
from esc.rundir import model_settings
from esc.scoring.judge import Judge
from esc.scoring.judges import build_judge, judge_config
from esc.scoring.jury import JurySettings
from esc.site import build_site
from esc.tasks.task import (
    SHARED_SECTIONS,
    DialogueFiles,
    Mode,
    RunSettings,
    configured_mode,
    get_mode,
    in_mode,
    mode_sections,
    modes,
    run_mode,
)

log = logging.getLogger(__name__)


def rank(cfg: DictConfig, checked: Mapping[Any, Any]) -> JobResult:
    """Run the configured mode in `cfg.output_dir`; see the module docstring. `checked`: the typed
    sections `esc.config_schema.validate` returned, the only settings read here and below."""
    out = Path(cfg.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    mode = get_mode(checked[RunSettings].mode)
    needs_judge = bool(mode.needs_judge(resolved))
    members = jury_members(mode, checked.get("jury"), needs_judge)
    judge = None if members or not needs_judge else build_judge(checked["judge"])
    if mode.own_questions and judge is not None and judge.scores_by_adapter:
        raise ConfigError(
            "judge.adapters",
            f"per-dimension score adapters (ESC-RANK) learned to score a dialogue 0-4 on a dimension, not "
            f"to answer mode={mode.name}'s questions: use the base model (judge.adapters.layout=none) or "
            "another judge",
        )
    judges = members or ([judge] if judge is not None else [])
    try:
        settings = output_settings(mode, mode_sections(mode, checked), judges, jury=bool(members))
        keys = config_keys(judges, jury=bool(members))
        with job_run(
            out, f"rank.{mode.name}", settings, resolved, seed=checked[RunSettings].seed, config_keys=keys
        ) as job:

            def spent() -> dict[str, Any]:  # what API judges were sent and cost (estimated: cost_estimate)
                usage = {j.name: u for j in judges if (u := j.usage())}
                return {"usage": usage} if usage else {}

            job.on_stop(spent)  # also when the run fails or is interrupted
            result = run_mode(mode, job, resolved, out, judges, checked)
            job.manifest.update(**spent())
    finally:
        for each in judges:
            each.close()
    # after the run's end (its status stays what its results made it; the judge is freed)
    site = write_site(out, resolved, mode.name, checked["report"], checked["leaderboard"].cards)
    job.manifest.update(**site)
    return result


def site_sources(out: Path, resolved: Mapping[str, Any], mode: str) -> list[Path]:
    """The folders the run's site shows (`Mode.site_sources`): OUT, and the folders a mode read."""
    return get_mode(mode).site_sources(out, resolved)


def write_site(
    out: Path, resolved: Mapping[str, Any], mode: str, report: ReportSettings, cards: Any
) -> dict[str, Any]:
    """The report site of this run, `OUT/report/index.html` (`report.enabled`; docs/report.md),
    rebuilt whole after every run, with the role cards of `leaderboard.cards`. Its failure is
    logged and recorded (`site_error`) and loses nothing: the judgments and tables are written
    before it."""
    if not report.enabled:
        return {}
    try:
        site = build_site(
            site_sources(out, resolved, mode),
            out / "report",
            report.title,
            cards=cards,
            low_mass=report.low_mass,
        )
    except Exception as err:  # the report is a view of files already written
        log.warning("The report site was not built: %s: %s", type(err).__name__, err)
        return {"site": None, "site_error": f"{type(err).__name__}: {err}"}
    print(f"report: {site.index}", flush=True)
    return {"site": str(site.index)}


def jury_members(mode: Mode, jury: JurySettings | None, needs_judge: bool) -> list[Judge]:
    """The judges of `jury.members` (`conf/jury/`, or `+judge@jury.members.NAME=OPTION`; their
    names and `min_valid` checked by `JurySettings`) to judge with, each built from its node: in
    mode=score; [] without a jury, and in mode=leaderboard, which pools the members' existing score
    files by name. Other modes take one judge."""
    if jury is None or not jury.members:
        return []
    if not mode.takes_jury:
        raise ConfigError(
            "jury",
            f"a jury judges in mode=score (and reports in mode=leaderboard), not mode={mode.name}; use one "
            "judge (judge=...)",
        )
    if not needs_judge:  # mode=leaderboard pools the members' existing score files
        return []
    return [build_judge(node, key=f"jury.members.{key}") for key, node in jury.members.items()]


def output_settings(
    mode: Mode, sections: Mapping[str, Any], judges: list[Judge], jury: bool = False
) -> dict[str, Any] | None:
    """What shapes the judgments a rank.py folder keeps (OUT/settings.json): the judge's (or each
    jury member's) identity and what the mode adds (`Mode.settings`); None for the modes that judge
    nothing and rewrite their reports whole (leaderboard, correlation, trajectory, agreement on
    existing scores)."""
    if not judges:
        return None
    if jury:  # what shapes its judgments (pooling is rebuilt with the report)
        return {"jury": {j.name: _judge_settings(j) for j in judges}}
    return {"judge": _judge_settings(judges[0]), **mode.settings(sections)}


def config_keys(judges: list[Judge], jury: bool = False) -> dict[str, str]:
    """The fingerprint's keys (`output_settings`) as the config keys a user sets, for the error that
    names a difference (`esc.rundir.config_key`): a judge's generation settings and prompt style."""
    keys: dict[str, str] = {}
    for judge in judges:
        where = f"jury.{judge.name}" if jury else "judge"
        node = judge.config_key
        keys.update({where: node, f"{where}.settings": node, f"{where}.prompt.style": f"{node}.prompt"})
    return keys


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


class ReportSettings(Settings):
    """`report`: the run's static report site."""

    enabled: bool
    title: str | None  # null: from the folder's name
    low_mass: float = Field(ge=0, le=1)  # dialogue pages mark valid judgments under this answer mass


def _reads_dialogues(cfg: Any) -> bool:
    found = configured_mode(cfg)
    return found is not None and found.reads_dialogues


def _judging(cfg: Any) -> bool:
    found = configured_mode(cfg)
    return found is not None and found.needs_judge(cfg)


#: what rank.py reads of its config whatever the mode (`esc.config_schema.validate`); each mode adds
#: its own sections (`Mode.config`); `judge` only in the modes that judge
SHARED_CONFIG: tuple[Section, ...] = (
    Section("", RunSettings),  # the top level is open (judge, paths, hydra...)
    Section("", DialogueFiles, when=_reads_dialogues),
    CACHE_CONFIG,
    *SHARED_SECTIONS,
    Section("report", ReportSettings),
    *judge_config(_judging),
)


def config_sections() -> Iterator[Section]:
    """rank.py's config schema: the shared sections, then every registered mode's (each checked
    wherever it is written; a missing one is an error only in its own mode)."""
    yield from SHARED_CONFIG
    for mode in modes().values():
        for section in mode.config:
            yield dataclasses.replace(section, needed=section.needed or in_mode(mode.name))


CONFIG = config_sections  # read by esc.config_schema (called: the modes register when it runs)
