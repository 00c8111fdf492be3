"""`esc config`: the jobs' settings as their models declare them.

    esc config rules                          the rules by key, as markdown
    esc config rules --write docs/bad_inputs.md

`rules` prints every key of train.py, evaluate.py, rank.py and build_cards.py with its type, range,
choices and description, and each registered backend's and judge's keys, from the pydantic models
(`esc.config_docs`); `--write FILE` replaces the generated section of FILE with it (docs/bad_inputs.md
holds it between two marker lines).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from esc.config_docs import rules, with_rules
from esc.errors import ArgumentParser, UserError
from esc.jsonl import atomic_write_text

HELP = "the jobs' settings: every key's rule, from the models (rules)"


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    made = sub.add_parser("rules", help="every key's type, range and choices, as markdown")
    made.add_argument(
        "--write", type=Path, default=None, metavar="FILE", help="replace FILE's generated section with it"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    if args.write is None:
        print(rules(), end="")
        return 0
    if not args.write.is_file():
        raise UserError(f"{args.write}: no such file (--write replaces the generated section of a doc)")
    try:
        text = with_rules(args.write.read_text(encoding="utf-8"))
    except UserError as err:
        raise UserError(f"{args.write}: {err}") from None
    atomic_write_text(args.write, text)  # the one writer: replaced whole, never half-written
    print(f"{args.write}: rules by key written")
    return 0
