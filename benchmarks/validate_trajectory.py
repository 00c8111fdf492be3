"""Does the seeker's emotion trajectory tell a supportive chatbot from a dismissive one?

The same role-player plays the same English cards against two canned targets whose quality is
known (conf/target/canned_supportive.yaml, canned_dismissive.yaml), with `trajectory.enabled=true`;
then `rank.py mode=trajectory` compares them card by card. The expected direction: the seeker's
change (final - start), final emotion and area are higher with the supportive target. Printed: the
paired differences (supportive - dismissive) with 95% bootstrap intervals over cards, and on how
many cards the supportive target came out higher.

    .venv/bin/python benchmarks/validate_trajectory.py                      # SmolLM2 rates itself
    .venv/bin/python benchmarks/validate_trajectory.py --rater observer     # SmolLM2 observes
    .venv/bin/python benchmarks/validate_trajectory.py --roleplayer tiny --cards 4 --turns 2  # smoke

Each step is a real command line (evaluate.py, rank.py) in a fresh process; the folders stay under
`--out` (a rerun resumes them). Figures and what they say: docs/seeker.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from esc.reports.result import read_result, result_path  # noqa: E402

TARGETS = ("canned_supportive", "canned_dismissive")


def run(argv: list[str]) -> None:
    start = time.perf_counter()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    done = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(argv[:2])} exited {done.returncode}:\n{done.stderr[-3000:]}")
    print(f"  {argv[0]} {argv[1]} ... {time.perf_counter() - start:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roleplayer", default="smollm2", help="conf/roleplayer option (default smollm2)")
    parser.add_argument("--rater", choices=["roleplayer", "observer"], default="roleplayer")
    parser.add_argument("--observer", default="smollm2", help="rater=observer: a conf/target option")
    parser.add_argument("--cards", type=int, default=24, help="English cards (the first N)")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "validate_trajectory")
    args = parser.parse_args(argv)
    root = args.out.resolve() / f"{args.roleplayer}_{args.rater}"
    rater = ["trajectory.enabled=true", f"trajectory.rater={args.rater}"]
    if args.rater == "observer":
        rater.append(f"+target@trajectory.observer={args.observer}")
    folders = []
    for target in TARGETS:
        folder = root / target
        folders.append(folder)
        run(["evaluate.py", f"roleplayer={args.roleplayer}", f"target={target}", "cards.languages=[en]",
             f"cards.limit={args.cards}", f"dialogue.turns={args.turns}", *rater, "engine.progress=false",
             f"hydra.run.dir={folder}"])  # fmt: skip
    report = root / "report"
    run(["rank.py", "mode=trajectory", f"dialogues=[{','.join(map(str, folders))}]",
         f"trajectory.bootstrap={args.bootstrap}", f"hydra.run.dir={report}"])  # fmt: skip
    result = read_result(result_path(report, "trajectory"))  # the report's tables, each cell's figure
    [table] = [t for t in result.tables() if t.name == "paired differences"]
    print((report / "trajectory.md").read_text())
    for row in table.rows:
        d = dict(zip(table.columns, row, strict=True))
        sign = 1 if d["A"].text == "canned_supportive" else -1  # report supportive - dismissive
        mean = d["A - B"].estimate
        value = None if mean.value is None else sign * mean.value
        low, high = (None, None) if mean.low is None else sorted((sign * mean.low, sign * mean.high))
        higher = d["A higher" if sign == 1 else "B higher"].text
        shared = int(d["cards"].text)
        shown = (
            "n/a"
            if value is None
            else f"{value:.2f} [{low:.2f}, {high:.2f}]"
            if low is not None
            else f"{value:.2f}"
        )
        print(
            f"supportive - dismissive, {d['figure'].text:6s}: {shown}, n={mean.n} cards "
            f"({shared - (mean.n or 0)} undefined); supportive higher on {higher} of {shared}"
        )
    print(f"report: {report / 'trajectory.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
