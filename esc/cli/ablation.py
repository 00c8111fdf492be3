"""`esc ablation SWEEP_DIR`: the held-out loss table of a `train.py -m +exp=train/esc_role_ablation` sweep,
written again from its jobs' folders (SWEEP_DIR/ablation.md, .csv; esc/train/ablation.py). The sweep
writes it itself when it ends; this rebuilds it, for a sweep cut short or continued."""

from __future__ import annotations

import argparse
from pathlib import Path

from esc.errors import ArgumentParser, UserError
from esc.train.ablation import write_table

HELP = "The held-out table of a train.py ablation sweep."


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    parser.add_argument("sweep_dir", type=Path, help="the sweep's folder (hydra.sweep.dir)")
    return parser


def run(args: argparse.Namespace) -> int:
    if not args.sweep_dir.is_dir():
        raise UserError(f"{args.sweep_dir}: no such sweep folder")
    print(write_table(args.sweep_dir), end="")
    return 0
