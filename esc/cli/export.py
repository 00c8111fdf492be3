"""`esc export`: rank.py runs as a dataset (`esc.export.dataset`).

    esc export RUN... --out DIR [--push REPO]

One row per dialogue (card, target, role-player, language, turns, trajectory, every judgment, the
runs' identities) as `DIR/dialogues.parquet` and a Hugging Face `datasets` folder `DIR/hf`, with a
dataset card `DIR/README.md`. `--push REPO` sends it to the Hub with the token in `HF_TOKEN`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from esc.errors import ArgumentParser
from esc.export.dataset import export

HELP = "rank.py runs as a dataset: Parquet, a datasets folder and its card; --push to the Hub"


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="rank.py output folders")
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="a new folder (or an earlier export)"
    )
    parser.add_argument(
        "--push", default=None, metavar="REPO", help="a Hub dataset repo (HF_TOKEN in the environment)"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    done = export(args.runs, args.out, args.push)
    pushed = f"; pushed to {done['pushed']}" if done["pushed"] else ""
    print(f"{done['rows']} dialogues: {done['out']}/dialogues.parquet, {done['out']}/hf, README.md{pushed}")
    return 0
