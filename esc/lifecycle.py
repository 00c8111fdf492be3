"""One job lifecycle for every job: training, ESC-RANK training, evaluation, scoring in each mode,
card construction.

    with job_run(out, "evaluate", settings, resolved, seed=cfg.seed) as job:
        ...                                   # the work; job.manifest.update(...) as it goes
        job.on_stop(lambda: {"counts": counts})  # what a failed or interrupted run records too
        return job.complete(EvaluateResult(...), files=files)

`job_run` owns what each job used to write by hand: the sweep guard (an experiment that is a sweep
runs with `-m`), the run folder's lock and settings fingerprint (`esc.rundir.RunFolder`), the
manifest (`esc.runinfo.RunManifest`: config, seed, commit, packages), and the status a run ends with:
`completed`, `completed_with_failures` (the result says what is incomplete), `interrupted` (Ctrl-C,
or SIGTERM: `esc.rundir.Terminated`) or `failed` (any other exception, with its message). Every job
returns a `JobResult`, which knows its one-paragraph summary and whether it left work a rerun
retries; an entry point only hands it to `report`, which prints the summary and turns an incomplete
run into exit code 3. `run_hydra` runs an entry point so that Hydra's own refusals end in one
`error:` line too, with secrets masked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hydra.errors import (
    ConfigCompositionException,
    MissingConfigException,
    OverrideParseException,
    SearchPathException,
)
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from esc.errors import INTERRUPTED as INTERRUPTED_EXIT
from esc.errors import (
    ConfigError,
    IncompleteRun,
    SweepJobFailed,
    UserError,
    environment_error,
    exit_with_error,
)
from esc.masking import console_masked, remember_secrets
from esc.paths import REPO_ROOT
from esc.rundir import RunFolder, refuse_unswept_sweep, remove_created_folders
from esc.runinfo import NullManifest, RunManifest

COMPLETED, WITH_FAILURES, INTERRUPTED, FAILED = (
    "completed",
    "completed_with_failures",
    "interrupted",
    "failed",
)


@dataclasses.dataclass
class JobResult:
    """What a job returns: where its outputs are, and how to say what it did."""

    output_dir: str

    def summary(self) -> str:
        """What the entry point prints: the tables and counts a person reads after the run."""
        return f"outputs: {self.output_dir}"

    def incomplete(self) -> str | None:
        """Why the run is not complete (failed dialogues or judgments a rerun retries), or None."""
        return None

    def objective(self) -> float | None:
        """The value a sweeper that optimises (Optuna) minimises; None for jobs that have none."""
        return None

    @property
    def status(self) -> str:
        return WITH_FAILURES if self.incomplete() else COMPLETED


R = TypeVar("R", bound=JobResult)


def stop_status(err: BaseException) -> str:
    return INTERRUPTED if isinstance(err, KeyboardInterrupt) else FAILED


def interruption(err: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM (`esc.rundir.Terminated`) that stopped a run: `err` itself, or the one a
    library turned into `sys.exit(1)` (Lightning's Trainer does, after its own cleanup); None if none."""
    if isinstance(err, KeyboardInterrupt):
        return err
    if isinstance(err, SystemExit) and isinstance(err.__context__, KeyboardInterrupt):
        return err.__context__
    return None


class Job:
    """One accepted run of a job: its folder, its manifest, and what a stop records."""

    def __init__(self, folder: RunFolder, manifest: RunManifest | NullManifest) -> None:
        self.folder = folder
        self.manifest = manifest
        self.result: JobResult | None = None
        self._on_stop: list[Callable[[], Mapping[str, Any]]] = []

    def on_stop(self, fields: Callable[[], Mapping[str, Any]]) -> None:
        """Fields the manifest records if the run fails or is interrupted (its counts so far)."""
        self._on_stop.append(fields)

    def stop_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for get in self._on_stop:
            fields.update(get())
        return fields

    def complete(self, result: R, **fields: Any) -> R:
        """The run's end: its status from the result, the manifest's last fields."""
        self.manifest.finish(status=result.status, **fields)
        self.result = result
        return result


@contextlib.contextmanager
def job_run(
    out: str | Path,
    kind: str,
    settings: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    *,
    seed: int | None,
    lock: bool = True,
    config_keys: Mapping[str, str] | None = None,
) -> Iterator[Job]:
    """Run a job in `out` (see the module docstring). `kind` and `settings` are the folder's
    fingerprint entry (`RunFolder`; `config_keys`: its keys as the config keys a user sets, for the
    error naming a difference); `lock=False` for the ranks of a training job other than zero,
    which only check the fingerprint and write no manifest. The block must end in `job.complete`."""
    refuse_unswept_sweep()
    remember_secrets(config)  # a key in a config file: every file this job writes masks it too
    with RunFolder(out, kind, settings, lock=lock, config_keys=config_keys) as folder:
        job = Job(folder, RunManifest(out, config, seed=seed) if lock else NullManifest())
        try:
            yield job
        except BaseException as err:
            stopped = interruption(err) or err
            job.manifest.finish(
                status=stop_status(stopped),
                error=f"{type(stopped).__name__}: {stopped}"[:500],
                **job.stop_fields(),
            )
            if stopped is not err:  # an interrupt ends the run as an interrupt: one line, exit 130 or 143
                raise stopped from None
            raise
        if job.result is None:
            raise RuntimeError(f"the {kind} job in {out} ended without job.complete(result)")


def report(result: JobResult) -> None:
    """What an entry point does with a job's result: print it; an incomplete run exits with 3, so
    that a scheduler does not count it as done."""
    text = result.summary()
    if text:
        print(text)
    reason = result.incomplete()
    if reason:
        raise IncompleteRun(reason)


def group_override_error(err: BaseException, argv: Sequence[str] | None = None) -> ConfigError | None:
    """`judge=null`, `target=1`: Hydra's defaults list refuses a config group set to a value that is
    not an option's name with a bare ValueError naming no key (a traceback). The ConfigError naming
    the group and its options, found among the command line's overrides; None for another error."""
    if not isinstance(err, ValueError) or not str(err).startswith("Config group override must be"):
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for arg in sys.argv[1:] if argv is None else argv:  # the overrides Hydra read
        try:
            override = parser.parse_override(arg)
        except Exception:  # a flag (`-m`, `--cfg`), or what Hydra itself parsed otherwise
            continue
        group = REPO_ROOT / "conf" / override.key_or_group
        value = override.value()
        if group.is_dir() and not isinstance(value, str | list | dict) and not override.is_delete():
            options = ", ".join(sorted(p.stem for p in group.glob("*.yaml")))
            key, given = arg.split("=", 1)
            return ConfigError(
                key.lstrip("+~"), f"is a config group: name one of its options ({options}), got {given}"
            )
    return None


def hydra_error_line(err: Exception, script: str | None = None) -> UserError:
    """Hydra's refusal to compose a config (unknown key, unknown option, bad override syntax) as one
    line; Hydra itself prints several. Read from the exceptions' own fields where they have them
    (the override, the missing config file, the key OmegaConf refused); the text otherwise.
    `script`: the entry point composing (`evaluate.py`), whose own experiments are never "another's"."""
    cause = err.__cause__
    if isinstance(err, OverrideParseException) and err.override:  # bad override syntax
        first = str(err).strip().splitlines()[0]
        return UserError(
            f"cannot parse the override `{err.override}`: {first} (see Hydra's override grammar)"
        )
    missing = str(err.missing_cfg_file or "") if isinstance(err, MissingConfigException) else ""
    if missing.startswith("exp/"):
        return ConfigError("exp", _missing_experiment(missing.removeprefix("exp/")))
    if "/" in missing and getattr(err, "options", None):  # a config group's option of no such name
        group, option = missing.rsplit("/", 1)
        options = ", ".join(str(o) for o in err.options)
        return ConfigError(group, f"no option {option!r} (conf/{missing}.yaml); one of {options}")
    key = getattr(cause, "full_key", None) if isinstance(cause, OmegaConfBaseException) else None
    if key and isinstance(cause, ConfigAttributeError | ConfigKeyError):  # an override of no such key
        return ConfigError(key, f"no such key; check the spelling (to add a new key: +{key}=VALUE)")
    if key:  # an override OmegaConf refused for another reason (a value of the wrong type)
        return ConfigError(key, (str(cause).strip().splitlines() or ["refused"])[0])
    experiment = _foreign_experiment(str(err), script)
    if experiment:
        return ConfigError("exp", experiment)
    parts = []
    text = str(err).split("Config search path")[0]  # where Hydra looked: the same for every run
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        lines = [line.strip() for line in paragraph.splitlines() if line.strip()]
        if len(lines) > 1 and lines[0].endswith(":"):  # "Available options in 'x':" then one per line
            parts.append(f"{lines[0]} {', '.join(lines[1:])}")
        elif lines:
            parts.append(" ".join(lines))
    first_cause = str(cause or "").strip().splitlines()
    return UserError("; ".join(parts + first_cause[:1]))


EXPERIMENTS = Path(__file__).resolve().parent.parent / "conf" / "exp"  # conf/exp/<entry point>/<name>.yaml
SCRIPTS = {"train": "train.py", "evaluate": "evaluate.py", "rank": "rank.py", "cards": "build_cards.py"}


def _missing_experiment(name: str) -> str:
    """What to write instead of `+exp=NAME` when no such experiment exists."""
    found = sorted(
        p.relative_to(EXPERIMENTS).with_suffix("").as_posix() for p in EXPERIMENTS.glob(f"*/{name}.yaml")
    )
    hint = (
        f"did you mean +exp={' or +exp='.join(found)}?"
        if found
        else "experiments are conf/exp/<entry point>/<name>.yaml"
    )
    return f"no experiment {name!r} ({hint})"


def _foreign_experiment(text: str, script: str | None = None) -> str | None:
    """What to run instead when an experiment of another entry point failed to compose (Hydra
    names the file only in its text); None for any other error, and for an experiment of `script`
    itself (its own error, e.g. an override of a group it sets, is Hydra's text)."""
    foreign = re.match(r"In 'exp/(\w+)/([^']+)'", text)
    if foreign and foreign.group(1) in SCRIPTS and SCRIPTS[foreign.group(1)] != script:
        owner, name = foreign.groups()
        script = SCRIPTS[owner]
        return f"{owner}/{name} is an experiment of {script}: run `python {script} +exp={owner}/{name}`"
    return None


def run_hydra(main: Callable[[], Any]) -> Any:
    """Call a `@hydra.main` function so that Hydra's own errors also end with one `error:` line and
    exit code 2: an unknown key or config option, a malformed override, a run folder it cannot write.

    Hydra prints these itself on several lines and exits with 1, unless HYDRA_FULL_ERROR=1 asks it to
    raise them instead, which this sets for the call. Other errors keep their full traceback. What
    reaches the console has its secrets masked (a sweep echoes each job's overrides, a token among them).
    A start refused with exit code 2 removes the run folder Hydra made for it (`esc.rundir`).
    """
    with console_masked():
        try:
            return _run_hydra(main)
        except SystemExit as stop:
            if stop.code == 2:  # a refused start: the run folder Hydra made for it goes too
                remove_created_folders()
            raise


def _run_hydra(main: Callable[[], Any]) -> Any:
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        return main()
    except (ConfigCompositionException, OverrideParseException, SearchPathException) as err:
        exit_with_error(hydra_error_line(err, Path(inspect.getfile(inspect.unwrap(main))).name))
    except SweepJobFailed as err:  # each failed job printed its line when it ended
        exit_with_error(f"a job of the sweep did not complete (the first: {err})", err.exit_code)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM while a run holds its folder (`Terminated`)
        exit_with_error(
            f"interrupted{f' ({err})' if str(err) else ''}", getattr(err, "exit_code", INTERRUPTED_EXIT)
        )
    except Exception as err:  # also Hydra's own writes: the run folder, the log file
        user_error = environment_error(err, "hydra.run.dir=NEW_DIR") or group_override_error(err)
        if user_error is None:
            raise  # a bug, not bad input: keep the traceback
        exit_with_error(user_error)
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
