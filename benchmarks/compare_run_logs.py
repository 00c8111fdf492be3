"""Compare the figures of two run logs (`OUT/run.json`, `esc.reports.runlog`): table by table, each
figure by its keys, value, interval, n and note (not its unit: reports written before figures
carried one have none); and the judgments (all fields but `source`, the dialogue file's path, which
names the folder a run read from).

    .venv/bin/python benchmarks/compare_run_logs.py A B

A and B: two rank.py folders (or their run.json files), or two folders of rank.py folders, whose
subfolders of one name are compared (e.g. an `esc runs upgrade`d copy of an old golden run against the
golden run the current code wrote). Prints, per table, the number of figures compared and each
difference; exit code 1 on any difference or a log only one side has, 0 otherwise. `--by-order`
pairs each report's tables by position, for tables renamed since (a table name is a report's
`Table.name`, else its heading).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from esc.reports.runlog import RUN_LOG, RunLog, read_run_log  # noqa: E402

FIELDS = ("value", "low", "high", "n", "note")


def _figures(log: RunLog) -> dict[str, dict[tuple[tuple[str, str], ...], tuple[Any, ...]]]:
    """table -> keys -> the figure's fields, tables in log order; a figure placed twice is a
    ValueError (its table and keys name no one figure)."""
    tables: dict[str, dict[tuple[tuple[str, str], ...], tuple[Any, ...]]] = {}
    for e in log.results:
        table = tables.setdefault(e.table, {})
        if e.keys in table:
            raise ValueError(f"two figures at {e.table}, {dict(e.keys)}")
        table[e.keys] = (*e.shown(), e.n, e.why_not())  # as published: none for an n/a figure (issue 62)
    return tables


def _pairs(a: list[str], b: list[str], by_order: bool) -> list[tuple[str | None, str | None]]:
    """The tables to compare: by name; with `by_order`, the i-th table of each report kind of A with
    the i-th of B's (renamed tables)."""
    if not by_order:
        return [(t if t in a else None, t if t in b else None) for t in sorted(set(a) | set(b))]
    out: list[tuple[str | None, str | None]] = []
    kinds = dict.fromkeys(t.split("/", 1)[0] for t in [*a, *b])
    for kind in kinds:
        left = [t for t in a if t.split("/", 1)[0] == kind]
        right = [t for t in b if t.split("/", 1)[0] == kind]
        out += [
            (left[i] if i < len(left) else None, right[i] if i < len(right) else None)
            for i in range(max(len(left), len(right)))
        ]
    return out


def _judgments(log: RunLog) -> Counter:
    return Counter(
        json.dumps({k: v for k, v in j.to_json().items() if k != "source"}, sort_keys=True)
        for j in log.judgments
    )


def compare(a: Path, b: Path, name: str = "", by_order: bool = False) -> int:
    """Print the comparison of two logs; the number of differences."""
    left, right = read_run_log(a), read_run_log(b)
    prefix = f"{name}: " if name else ""
    differences = 0
    try:
        tables_a, tables_b = _figures(left), _figures(right)
    except ValueError as err:
        print(f"{prefix}{err}")
        return 1
    for ta, tb in _pairs(list(tables_a), list(tables_b), by_order):
        if ta is None or tb is None:
            print(f"{prefix}{ta or tb}: a table only in {'A' if tb is None else 'B'}")
            differences += 1
            continue
        fa, fb = tables_a[ta], tables_b[tb]
        problems = []
        for keys in sorted(set(fa) | set(fb)):
            where = ", ".join(f"{k}={v}" for k, v in keys)
            if keys not in fa or keys not in fb:
                problems.append(f"    {where}: only in {'B' if keys not in fa else 'A'}")
            elif fa[keys] != fb[keys]:
                diff = ", ".join(
                    f"{f} {x!r} != {y!r}"
                    for f, x, y in zip(FIELDS, fa[keys], fb[keys], strict=True)
                    if x != y
                )
                problems.append(f"    {where}: {diff}")
        compared = len(set(fa) & set(fb))
        label = ta if ta == tb else f"{ta} (A) = {tb} (B)"
        print(f"{prefix}{label}: {compared} figures compared, {len(problems)} differences")
        for line in problems:
            print(line)
        differences += len(problems)
    ja, jb = _judgments(left), _judgments(right)
    only = (ja - jb, jb - ja)
    missing = sum(only[0].values()) + sum(only[1].values())
    counts = f"{len(left.judgments)} and {len(right.judgments)}"
    print(f"{prefix}judgments: {counts}, {missing} differ (source aside)")
    for side, found in zip("AB", only, strict=True):
        for text in list(found)[:5]:
            print(f"    only in {side}: {text}")
    return differences + missing


def _log(path: Path) -> Path | None:
    if path.is_file():
        return path
    return path / RUN_LOG if (path / RUN_LOG).is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="a rank.py folder, its run.json, or a folder of rank.py folders")
    parser.add_argument("b", type=Path, help="the same for the other side")
    parser.add_argument(
        "--by-order",
        action="store_true",
        help="pair the tables of each report by their order, not their names (tables renamed since)",
    )
    args = parser.parse_args(argv)
    if _log(args.a) or _log(args.b):
        if not (_log(args.a) and _log(args.b)):
            print(f"error: {args.a if not _log(args.a) else args.b}: no {RUN_LOG}", file=sys.stderr)
            return 1
        return 1 if compare(args.a, args.b, by_order=args.by_order) else 0
    names_a = {p.parent.name for p in args.a.glob(f"*/{RUN_LOG}")}
    names_b = {p.parent.name for p in args.b.glob(f"*/{RUN_LOG}")}
    differences = 0
    for name in sorted(names_a | names_b):
        if name not in names_a or name not in names_b:
            print(f"{name}: a run log only in {'A' if name in names_a else 'B'}")
            differences += 1
            continue
        differences += compare(args.a / name, args.b / name, name, args.by_order)
    if not names_a | names_b:
        print(f"error: no {RUN_LOG} in {args.a} or {args.b}, nor in their subfolders", file=sys.stderr)
        return 1
    print(f"{len(names_a & names_b)} logs compared, {differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
