"""`esc export`: rank.py runs as a dataset (`esc.export.dataset`).

    esc export RUN... --out DIR [--push REPO] [--force]

One row per dialogue (card, target, role-player, language, turns, trajectory, every judgment, the
runs' identities) as `DIR/dialogues.parquet` and a Hugging Face `datasets` folder `DIR/hf`, with a
dataset card `DIR/README.md`. `--push REPO` sends it to the Hub with the token in `HF_TOKEN`. DIR is
new, empty or an earlier export; `--force` writes into a folder holding other files, which stay.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from esc.errors import ArgumentParser
from esc.export.dataset import export

HELP = "rank.py runs as a dataset: Parquet, a datasets folder and its card; --push to the Hub"


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="rank.py output folders")
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR",
        help="a new or empty folder, or an earlier export (only its files are replaced)",
    )  # fmt: skip
    parser.add_argument(
        "--force", action="store_true",
        help="write into a folder holding files the export did not write (they are kept, never replaced)",
    )  # fmt: skip
    parser.add_argument(
        "--push", default=None, metavar="REPO", help="a Hub dataset repo (HF_TOKEN in the environment)"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    def warn(text: str) -> None:
        print(f"warning: {text}", file=sys.stderr)

    done = export(args.runs, args.out, args.push, args.force, warn=warn)
    pushed = f"; pushed to {done['pushed']}" if done["pushed"] else ""
    print(f"{done['rows']} dialogues: {done['out']}/dialogues.parquet, {done['out']}/hf, README.md{pushed}")
    return 0
