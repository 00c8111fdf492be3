"""`esc cache merge SRC... --into DST`: merge per-job request cache files into one (existing entries
of DST are kept; esc/chat/cache.py)."""

from __future__ import annotations

import argparse
import logging
import sys

from esc.chat.cache import merge_caches
from esc.errors import ArgumentParser, environment_error

HELP = "Request cache files."


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser("merge", help="merge per-job cache files into one (existing entries kept)")
    merge.add_argument("sources", nargs="+", metavar="SRC", help="cache files to read")
    merge.add_argument("--into", required=True, metavar="DST", help="the cache file to merge into")
    return parser


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        report = merge_caches(args.sources, args.into)
    except OSError as err:  # a read-only or full place: name the option that chooses it
        raise environment_error(err, "--into DST") or err from None
    for source in report["sources"]:
        counts = f"{source['entries']} entries, {source['added']} added, {source['present']} already there"
        print(f"{source['path']}: {counts}")
    print(f"{report['into']}: {report['entries']} entries")
    return 0
