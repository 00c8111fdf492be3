"""`esc export`: rank.py runs as a dataset folder.

    DIR/dialogues.parquet    one row per dialogue (`esc.export.rows`)
    DIR/hf/                  the same rows as a Hugging Face `datasets` folder (`save_to_disk`)
    DIR/runs.json            what made each run: task, judges with their prompts, git commit, seed
    DIR/README.md            the dataset card: the runs, judges, prompts' versions and checksums, columns
    DIR/.esc-export          the files the export wrote (`esc.output_folder`)

`--push REPO` calls `Dataset.push_to_hub` with the token of `HF_TOKEN` (never written anywhere); the
folder is written first, so a failed push loses nothing (one `error:` line says so). DIR is written
as every output folder is (`esc.output_folder`): new, empty, or an earlier export, whose files alone
are replaced; anything else in it is refused (with `--force`: kept), and a run folder inside it is
refused always.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub.errors import HTTPError

from esc.errors import UserError
from esc.export.rows import dialogue_rows, identities, read_runs
from esc.jsonl import atomic_write_text
from esc.output_folder import Command, check, staged
from esc.scoring.rubrics import dimensions
from esc.secrets.redaction import scrub

log = logging.getLogger(__name__)

MARK = "<!-- written by esc export -->"
TOKEN_ENV = "HF_TOKEN"
#: what an export wrote before its marker listed its files (its card said so)
LEGACY_EXPORT = re.compile(r"README\.md|runs\.json|dialogues\.parquet|hf|hf/[^/]+")


def _legacy_export(out: Path) -> re.Pattern[str] | None:
    card = out / "README.md"
    earlier = card.is_file() and MARK in card.read_text(encoding="utf-8", errors="replace")
    return LEGACY_EXPORT if earlier else None


#: how `esc export` writes its folder: `esc.output_folder`, the rule of every output folder
EXPORT = Command(
    "esc export", ".esc-export", "an export `esc export` wrote", input_noun="the run folder",
    legacy=_legacy_export,
)  # fmt: skip


def export(
    folders: Sequence[Path], out: Path, push: str | None = None, force: bool = False,
    warn: Callable[[str], None] = log.warning,
) -> dict[str, Any]:  # fmt: skip
    """Write the dataset of `folders` into `out`; with `push`, send it to the Hub repo `push`.
    `force`: write into a folder that holds files the export did not write (they are kept); `warn`:
    told of each run whose latest run did not write the log read (going, killed, stopped)."""
    import datasets
    from datasets import Dataset

    datasets.disable_progress_bars()  # one line of output, as every esc tool
    runs, warnings = read_runs(folders)
    for warning in warnings:
        warn(warning)
    sources = [folder for folder, _ in runs]
    check(out, EXPORT, sources, force)
    rows = dialogue_rows(runs)
    if not rows:
        raise UserError(f"no judged dialogue in {', '.join(map(str, folders))}: nothing to export")
    if push and not os.environ.get(TOKEN_ENV):
        raise UserError(f"--push needs a Hugging Face token in the environment variable {TOKEN_ENV}")
    made = identities(runs)
    dataset = Dataset.from_list(rows)
    with staged(out, EXPORT, sources, force) as staging:
        dataset.to_parquet(str(staging / "dialogues.parquet"))
        dataset.save_to_disk(str(staging / "hf"))
        atomic_write_text(staging / "runs.json", json.dumps(made, indent=2, ensure_ascii=False) + "\n")
        atomic_write_text(staging / "README.md", scrub(dataset_card(made, rows)))
    if push:
        try:
            dataset.push_to_hub(push, token=os.environ[TOKEN_ENV])
        except (OSError, HTTPError) as err:  # no network, the Hub refusing: the export is kept
            why = (str(err).strip().splitlines() or [""])[0]
            raise UserError(
                f"--push {push}: {type(err).__name__}: {why}; the export is kept in {out}: push it again "
                "when the Hub can be reached"
            ) from None
    return {"rows": len(rows), "out": str(out), "pushed": push}


def dataset_card(runs: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> str:
    """The README.md of the dataset: YAML front matter (`datasets` reads `configs`), then what it holds."""
    judges = {}
    for run in runs:
        for judge in run["judges"]:
            judges.setdefault(judge.get("name"), judge)
    languages = sorted({r["language"] for r in rows if r["language"]})
    targets = sorted({r["target"] for r in rows if r["target"]})
    n_judgments = sum(len(r["judgments"]) for r in rows)
    lines = [
        "---",
        "configs:",
        "- config_name: default",
        "  data_files: dialogues.parquet",
        f"language: [{', '.join(languages)}]",
        "tags: [emotional-support, esc-eval, llm-as-a-judge]",
        "---",
        MARK,
        "",
        "# ESC-Eval dialogues and judgments",
        "",
        f"{len(rows)} dialogues ({', '.join(languages)}; targets: {', '.join(targets)}) and {n_judgments} "
        f"judgments from {len(runs)} rank.py run(s), exported by `esc export` "
        "(ESC-Eval: Evaluating Emotion Support Conversations in Large Language Models, arXiv 2406.14952).",
        "",
        "## Runs",
        "",
        "| run | task | git commit | seed |",
        "|---|---|---|---|",
        *(f"| {r['run']} | {r['task']} | {_commit(r)} | {r.get('seed')} |" for r in runs),
        "",
        "## Judges and their prompts",
        "",
        "| judge | kind | model | revision | prompt style | version | sha256 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, judge in judges.items():
        prompt = judge.get("prompt") or {}
        model, revision = _model(judge)
        lines.append(
            f"| {name} | {judge.get('kind')} | {model} | {revision} | "
            f"{prompt.get('style')} | {prompt.get('version')} | {prompt.get('sha256')} |"
        )
    lines += [
        "",
        "Questions of their own (the safety checklist, pairwise, the stress test's texts) are versioned and",
        "checksummed in the toolkit (`esc/prompts/checksums.json`); `runs.json` holds every judge's whole",
        "identity and the runs' package versions.",
        "",
        "## Columns (`dialogues.parquet`, one row per dialogue)",
        "",
        "- `dialogue_id`, `card_id`, `language`, `target`, `roleplayer`, `status`, `turns`",
        "- `source_file`: the dialogue file (its name; where two files of the export share one, as",
        "  many of their folders as tell them apart); `(source_file, dialogue_id)` is the row's key: two",
        "  runs of one target whose files share a name (the same cards played twice) are two rows each",
        "- `transcript`: the turns, each `{speaker: supporter | seeker, text}` (the supporter's opener",
        "  first)",
        "- `trajectory`: the seeker's emotion (0-100) after each rated turn, where evaluate.py rated it",
        "- `meta`: the dialogue record's meta (JSON; a stress-test variant names its original and",
        "  perturbation)",
        "- `missing`: why a judged dialogue has no transcript (its file is gone), else null",
        "- `changed`: true where the dialogue file changed since the dialogue was judged (the lines",
        "  its judges read differ from the transcript shown): its judgments are of another text",
        "- `runs`: the runs that judged it (each run folder's name; where two share one, as many of its",
        "  folders as tell them apart); `judgments`: each `{run, task, judge, key, status, score,",
        "  answer, expected, turn}` (an invalid or failed judgment is kept, with its status, never",
        "  averaged in); `key` is what was asked: a dimension's key (below), a checklist question's or",
        "  a role-play metric's",
        "",
        *dimension_table(),
    ]
    return "\n".join(lines)


def dimension_table() -> list[str]:
    """The card's table of the 7 dimensions: the key the data hold, the paper's name (Table 2, what
    the reports show), the short label (Table 4) and the Chinese label (`esc.scoring.rubrics`)."""
    return [
        "## Dimensions",
        "",
        "A judgment's `key` names a dimension by its key; the reports and the paper name it otherwise.",
        "",
        "| key | paper's name (Table 2) | short | zh |",
        "|---|---|---|---|",
        *(f"| {d.key} | {d.paper_name} | {d.short} | {d.zh} |" for d in dimensions()),
        "",
    ]


def _commit(run: dict[str, Any]) -> str:
    git = run.get("git") or {}
    return str(git.get("commit", "unknown")) + (" (uncommitted changes)" if git.get("dirty") else "")


def _model(judge: dict[str, Any]) -> tuple[Any, Any]:
    """A judge's model and revision as its identity records them: its own (a local judge's), or its
    chat backend's (an API judge's: the model a dated name, the revision none)."""
    backend = judge.get("backend") if isinstance(judge.get("backend"), dict) else {}
    model = judge.get("model") or backend.get("model")
    revision = judge.get("revision") or backend.get("revision")
    if revision is None:
        revision = "none (an API model)" if judge.get("kind") == "api" else "not recorded"
    return model, revision
