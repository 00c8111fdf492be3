"""The golden run: the whole pipeline on the tiny model with fixed seeds, and a digest of every file
it writes, so that a refactor can show it changed no output.

    .venv/bin/python benchmarks/golden_run.py record   # before: writes benchmarks/golden/tiny.json
    .venv/bin/python benchmarks/golden_run.py check    # after: the same run, compared file by file

The chain, each step a real command line: evaluate.py (dialogues; a second set from a canned
target, with the seeker's emotion rated) -> rank.py mode=safety, mode=pairwise (the two sets),
mode=trajectory -> rank.py (scores, leaderboard, charts) -> rank.py mode=agreement (the tiny judge
against the ESConv human scores) -> rank.py
mode=correlation -> card construction -> annotation export of the dialogues. Every file under the
run folders is compared byte for byte, except the files named in VOLATILE, whose content records
when, where and how long (manifests, logs, the run folder's lock), and the VOLATILE_KEYS of JSON(L)
records (a reply's latency); `check` lists both as not compared. Outputs name their inputs by
absolute path: the checkout's and the scratch folder's paths read as <repo> and <out> before the
digest, so a second checkout (a worktree at the commit before a refactor) records the same digests.
The digests describe one machine (floating point on another CPU may pick another token), so `record`
and `check` belong on the same machine: it is a before/after tool, not a CI test.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "benchmarks" / "golden" / "tiny.json"

#: files that record the run rather than its results (times, hosts, package lists, PIDs)
VOLATILE = (
    "*/manifest.json",  # times, host, git commit, pip freeze
    "*.log",  # Hydra's job log: timestamps
    "*/.lock",
    "*/blind-key-salt",  # a random salt per annotation export (esc/annotate)
    "*/.hydra/*",  # the resolved config holds the run folder's absolute path
    "*/wandb/*",
    "*/charts/*.png",  # matplotlib's metadata names its version; the figures' data are in the CSV/JSON
    "*/report/*",  # the report site: a view of the compared files, with the run's dates and paths
)
#: keys left out of every JSON and JSON-lines record before its digest: wall-clock measurements, and
#: the run log's (`run.json`) time of writing and git commit, which record when and from what
VOLATILE_KEYS = frozenset({"latency_s", "written", "git"})


def _steps(out: Path) -> list[tuple[str, list[str]]]:
    """(name, argv after the interpreter) of each step; `out` holds one folder per step."""
    dialogues = out / "evaluate"
    return [
        ("evaluate", ["evaluate.py", "roleplayer=tiny", "target=tiny", "cards.limit=2",
                      "dialogue.turns=2", "cache.enabled=false", "engine.progress=false",
                      f"hydra.run.dir={dialogues}"]),
        ("evaluate_b", ["evaluate.py", "roleplayer=tiny", "target=canned_supportive", "cards.limit=2",
                        "cards.languages=[en]", "dialogue.turns=2", "trajectory.enabled=true",
                        "cache.enabled=false", "engine.progress=false",
                        f"hydra.run.dir={out / 'evaluate_b'}"]),
        ("safety", ["rank.py", "mode=safety", "judge=tiny", f"dialogues={dialogues}", "safety.bootstrap=50",
                    "scoring.progress=false", f"hydra.run.dir={out / 'safety'}"]),
        ("pairwise", ["rank.py", "mode=pairwise", "judge=tiny",
                      f"dialogues=[{dialogues},{out / 'evaluate_b'}]",
                      "dimensions=[empathy,overall]", "pairwise.bootstrap=50", "scoring.progress=false",
                      f"hydra.run.dir={out / 'pairwise'}"]),
        ("trajectory", ["rank.py", "mode=trajectory", f"dialogues={out / 'evaluate_b'}",
                        "trajectory.bootstrap=50", f"hydra.run.dir={out / 'trajectory'}"]),
        ("rank", ["rank.py", "judge=tiny", f"dialogues={dialogues}", "scoring.progress=false",
                  "leaderboard.bootstrap=50", f"hydra.run.dir={out / 'rank'}"]),
        ("agreement", ["rank.py", "mode=agreement", "judge=tiny", "agreement.split=test",
                       "dimensions=[empathy,overall]", "agreement.bootstrap=50",
                       "scoring.progress=false", f"hydra.run.dir={out / 'agreement'}"]),
        ("correlation", ["rank.py", "mode=correlation", f"correlation.scores=[{out / 'agreement'}]",
                         "correlation.bootstrap=50", f"hydra.run.dir={out / 'correlation'}"]),
        ("cards", ["build_cards.py", "+exp=cards/en", "model=tiny", "cards.limit=2",
                   "cards.sources.epitome.enabled=false", "cards.sources.chatcounselor.enabled=false",
                   "cache.enabled=false", "progress=false", f"hydra.run.dir={out / 'cards'}"]),
        ("annotate", ["-m", "esc", "annotate", "export", "dialogue", "--dialogues", str(dialogues),
                      "--out", str(out / "annotate")]),
    ]  # fmt: skip


def run_chain(out: Path) -> None:
    """Every step from scratch in `out` (removed first), in a fresh process each, offline."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    for name, argv in _steps(out):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: golden step {name} exited {done.returncode}:\n{done.stderr[-3000:]}")
        print(f"{name:12s} {time.perf_counter() - start:6.1f} s", flush=True)


def digests(out: Path) -> dict[str, str]:
    """{path relative to `out`: sha256} of every file but the volatile ones."""
    found = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = path.relative_to(out).as_posix()
        if any(fnmatch.fnmatch("/" + rel, "*" + pattern.lstrip("*")) for pattern in VOLATILE):
            continue
        found[rel] = hashlib.sha256(_stable_bytes(path, out)).hexdigest()
    return found


def _stable_bytes(path: Path, out: Path) -> bytes:
    """The file's bytes with the checkout and scratch paths as <repo> and <out>; for JSON(L), its
    records without the VOLATILE_KEYS (key order kept)."""
    data = path.read_bytes()
    for place, name in ((out.resolve(), b"<out>"), (REPO, b"<repo>")):
        data = data.replace(str(place).encode("utf-8"), name)
    if path.suffix not in (".json", ".jsonl"):
        return data
    text = data.decode("utf-8")
    if path.suffix == ".json":
        return json.dumps(_without_volatile(json.loads(text)), ensure_ascii=False).encode("utf-8")
    lines = [
        json.dumps(_without_volatile(json.loads(line)), ensure_ascii=False)
        for line in text.splitlines()
        if line
    ]
    return "\n".join(lines).encode("utf-8")


def _without_volatile(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["record", "check"])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "esc-golden-run",
        help="scratch folder, removed and rewritten (its path is not part of the digests)",
    )
    parser.add_argument("--golden", type=Path, default=GOLDEN, help="the digest file")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    run_chain(args.out)
    now = digests(args.out)
    if args.action == "record":
        args.golden.parent.mkdir(parents=True, exist_ok=True)
        args.golden.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"recorded {len(now)} files in {args.golden}")
        return 0
    if not args.golden.is_file():
        print(f"error: {args.golden}: no golden digests; run `record` first", file=sys.stderr)
        return 2
    golden = json.loads(args.golden.read_text(encoding="utf-8"))
    changed = sorted(k for k in golden.keys() & now.keys() if golden[k] != now[k])
    lost, new = sorted(golden.keys() - now.keys()), sorted(now.keys() - golden.keys())
    for label, names in (("changed", changed), ("missing", lost), ("new", new)):
        for name in names:
            print(f"{label}: {name}")
    same = len(golden) - len(changed) - len(lost)
    print(
        f"{same} of {len(golden)} files identical; not compared: {', '.join(VOLATILE)}; "
        f"keys left out of JSON records: {', '.join(sorted(VOLATILE_KEYS))}"
    )
    return 1 if changed or lost or new else 0


if __name__ == "__main__":
    sys.exit(main())
