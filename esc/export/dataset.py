"""`esc export`: rank.py runs as a dataset folder.

    DIR/dialogues.parquet    one row per dialogue (`esc.export.rows`)
    DIR/hf/                  the same rows as a Hugging Face `datasets` folder (`save_to_disk`)
    DIR/runs.json            what made each run: task, judges with their prompts, git commit, seed
    DIR/README.md            the dataset card: the runs, judges, prompts' versions and checksums, columns

`--push REPO` calls `Dataset.push_to_hub` with the token of `HF_TOKEN` (never written anywhere); the
folder is written first, so a failed push loses nothing. DIR must be new or empty, or a folder this
command wrote (its `README.md` says so): nothing else is ever replaced.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esc.errors import UserError
from esc.export.rows import dialogue_rows, identities, read_runs
from esc.jsonl import atomic_write_text
from esc.secrets.redaction import scrub

MARK = "<!-- written by esc export -->"
TOKEN_ENV = "HF_TOKEN"


def _check_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        card = out / "README.md"
        if not (card.is_file() and MARK in card.read_text(encoding="utf-8", errors="replace")):
            raise UserError(f"{out}: not empty and not written by esc export: name a new folder")


def export(folders: Sequence[Path], out: Path, push: str | None = None) -> dict[str, Any]:
    """Write the dataset of `folders` into `out`; with `push`, send it to the Hub repo `push`."""
    import datasets
    from datasets import Dataset

    datasets.disable_progress_bars()  # one line of output, as every esc tool
    runs = read_runs(folders)
    rows = dialogue_rows(runs)
    if not rows:
        raise UserError(f"no judged dialogue in {', '.join(map(str, folders))}: nothing to export")
    _check_out(out)
    if push and not os.environ.get(TOKEN_ENV):
        raise UserError(f"--push needs a Hugging Face token in the environment variable {TOKEN_ENV}")
    made = identities(runs)
    dataset = Dataset.from_list(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    # a new folder of our own beside OUT: never a name a person's folder may have
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    dataset.to_parquet(str(staging / "dialogues.parquet"))
    dataset.save_to_disk(str(staging / "hf"))
    atomic_write_text(staging / "runs.json", json.dumps(made, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(staging / "README.md", scrub(dataset_card(made, rows)))
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    if push:
        dataset.push_to_hub(push, token=os.environ[TOKEN_ENV])
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
        lines.append(
            f"| {name} | {judge.get('kind')} | {judge.get('model')} | {judge.get('revision')} | "
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
        "- `dialogue_id`, `card_id`, `language`, `target`, `roleplayer`, `source_file`, `status`,",
        "  `turns`",
        "- `transcript`: the turns, each `{speaker: supporter | seeker, text}` (the supporter's opener",
        "  first)",
        "- `trajectory`: the seeker's emotion (0-100) after each rated turn, where evaluate.py rated it",
        "- `meta`: the dialogue record's meta (JSON; a stress-test variant names its original and",
        "  perturbation)",
        "- `missing`: why a judged dialogue has no transcript (its file is gone), else null",
        "- `runs`: the runs that judged it; `judgments`: each `{run, task, judge, key, status, score,",
        "  answer, expected, turn}` (an invalid or failed judgment is kept, with its status, never",
        "  averaged in)",
        "",
    ]
    return "\n".join(lines)


def _commit(run: dict[str, Any]) -> str:
    git = run.get("git") or {}
    return str(git.get("commit", "unknown")) + (" (uncommitted changes)" if git.get("dirty") else "")
