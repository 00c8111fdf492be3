"""`esc report`: a static site of rank.py runs to browse from disk (docs/report.md).

esc report RANK_OUT [RANK_OUT ...] --out SITE [--title T] [--cards FILE ...]

Open SITE/index.html in a browser (file://): no server, nothing fetched from the network.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from esc.errors import ArgumentParser
from esc.reports.run_folder import check_latest_run
from esc.site import build_site

HELP = "A static report site of rank.py runs (their run logs): results, targets, dialogues, judgments."


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    parser.add_argument(
        "runs", type=Path, nargs="+", metavar="OUT", help="rank.py output folders (each with its run.json)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="SITE",
        help="the site's folder: new, empty or an earlier site (only its files replaced; a link: its folder)",
    )
    parser.add_argument("--title", default=None, help="the site's title (default: from the folders' names)")
    parser.add_argument(
        "--cards", type=Path, nargs="*", help="role card files for topics and sources (default: released)"
    )
    parser.add_argument(
        "--low-mass", type=float, default=None, metavar="P",
        help="mark valid judgments whose answer mass is under P (default: report.low_mass, conf/rank.yaml)",
    )  # fmt: skip
    return parser


def run(args: argparse.Namespace) -> int:
    if args.low_mass is not None and not 0 <= args.low_mass <= 1:
        parser("esc report").error(f"--low-mass must be between 0 and 1, got {args.low_mass}")
    for folder in args.runs:  # a run going, killed or stopped before its log: said, not read silently
        warning = check_latest_run(folder) if folder.is_dir() else None
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    result = build_site(args.runs, args.out, args.title, cards=args.cards, low_mass=args.low_mass)
    print(f"site: {result.summary()}")
    return 0
