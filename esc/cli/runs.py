"""`esc runs`: rank.py run folders and their run logs (`OUT/run.json`, `esc.reports.runlog`).

    esc runs upgrade OLD [--out NEW] [--force]

`upgrade` gives a folder written before run logs its `run.json`, built from its manifest, settings,
judgment stores and `<kind>.result.json` reports as rank.py builds it today: in place (only run.json
is added), or into a copy NEW. What it cannot convert is refused with one `error:` line, exit 2, and
a `run.json` it cannot read (not one this version wrote) is replaced only with `--force`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from esc.errors import ArgumentParser
from esc.tasks.upgrade import upgrade_run_folder

HELP = "rank.py run folders: give one written before run logs its run.json (upgrade)"


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    upgrade = sub.add_parser(
        "upgrade", help="write OLD/run.json for a rank.py folder written before run logs (once)"
    )
    upgrade.add_argument("old", type=Path, metavar="OLD", help="a rank.py output folder")
    upgrade.add_argument(
        "--out", type=Path, default=None, metavar="NEW", help="a new folder: a copy of OLD with its run.json"
    )
    upgrade.add_argument("--force", action="store_true", help="replace a run.json this version cannot read")
    return parser


def run(args: argparse.Namespace) -> int:
    path, log = upgrade_run_folder(args.old, args.out, args.force)
    print(f"{path}: {len(log.judgments)} judgments, {len(log.results)} figures of {', '.join(log.reports)}")
    return 0
