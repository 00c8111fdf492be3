"""`esc scores`: score files in the official format (`score/<Model>_<lang>.json`), out and in.

esc scores import score/llama3_en.json --out scores/llama3.jsonl [--cards FILE] [--target NAME]
esc scores export RANK_OUT_DIR [score files ...] --out score/ [--judge NAME]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from esc.cli.outputs import new_output
from esc.errors import ArgumentParser
from esc.official_formats.scores import DEFAULT_JUDGE, DEFAULT_ROLEPLAYER, export, import_scores
from esc.scoring.judge import INVALID
from esc.scoring.rubrics import DIMENSION_KEYS, LANGUAGES, label

HELP = "The official ESC-Eval score files (score/<Model>_<lang>.json), read and written."


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser(
        "export", help="rank.py score files -> official score/<target>__<roleplayer>_<lang>.json"
    )
    exp.add_argument("sources", type=Path, nargs="+", help="rank.py output directories or score files")
    exp.add_argument("--out", type=Path, required=True, help="folder for the official files")
    exp.add_argument("--judge", default=None, help="only the records of this judge")
    exp.add_argument(
        "--cards", type=Path, nargs="*", help="card files positions refer to (default: released)"
    )
    imp = sub.add_parser("import", help="official score files -> one score file for rank.py")
    imp.add_argument("files", type=Path, nargs="+", help="official score files <Model>_<lang>.json")
    imp.add_argument("--out", type=Path, required=True, help="the score file to write (JSON lines)")
    imp.add_argument("--force", action="store_true", help="replace --out if it exists")
    imp.add_argument("--target", default=None, help="the model's name (default: from the file name)")
    imp.add_argument("--language", choices=LANGUAGES, default=None, help="default: from the file name")
    imp.add_argument(
        "--roleplayer", default=None, help=f"default: from the file name, else {DEFAULT_ROLEPLAYER}"
    )
    imp.add_argument("--judge", default=DEFAULT_JUDGE, help="the judge's name in the records")
    imp.add_argument(
        "--cards", type=Path, nargs="*", help="card files positions refer to (default: released)"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    if args.command == "export":
        for path, n in export(args.sources, args.out, args.cards, args.judge):
            print(f"{path} ({n} dialogues)")
        return 0
    new_output(args.out, args.files, args.force)
    records = import_scores(
        args.files, args.out, args.cards, args.target, args.language, args.roleplayer, args.judge
    )
    invalid = sum(r.status == INVALID for r in records)
    held = {r.dimension for r in records}
    only = (
        ""
        if len(held) == len(DIMENSION_KEYS)
        else f" on {', '.join(label(k) for k in DIMENSION_KEYS if k in held)} only"
    )
    print(f"{len(records)} judgments{only} ({invalid} invalid: -1) -> {args.out}")
    return 0
