"""How much annotators agree, per field: Cohen's kappa, Fleiss' kappa, Krippendorff's alpha.

- **Cohen's kappa** (scikit-learn, ``cohen_kappa_score``): for two annotators on the tasks both
  labelled; with more than two, the mean over every pair. Ordinal fields (scores) also get the
  quadratic-weighted kappa.
- **Fleiss' kappa** (statsmodels, ``fleiss_kappa``): over the tasks labelled by the field's most
  common number of annotators (at least 2), any annotators.
- **Krippendorff's alpha** (the ``krippendorff`` package): every label, missing ones allowed;
  ordinal for scores, nominal for categories.

And the paper's correction rules (`resolve`): two annotators, and a third who settles what they
disagree on (Appendix A.2; the card rule of `esc/cards/grading.yaml`).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import warnings
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.annotate.kinds import task_kind
from esc.annotate.tasks import Label
from esc.jsonl import atomic_write_text

UNRESOLVED = None


def _by_field(labels: Sequence[Label]) -> dict[str, dict[str, dict[str, str]]]:
    """field -> task -> annotator -> value."""
    table: dict[str, dict[str, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
    for label in labels:
        table[label.field][label.task_id][label.annotator] = label.value
    return table


def cohen(
    pairs: Sequence[tuple[str, str]], values: Sequence[str], weights: str | None = None
) -> float | None:
    """Cohen's kappa of paired labels (None when undefined: fewer than 2 pairs or one category)."""
    from sklearn.metrics import cohen_kappa_score

    if len(pairs) < 2:
        return None
    a, b = zip(*pairs, strict=True)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # undefined (one category only): NaN, reported as n/a
        kappa = cohen_kappa_score(a, b, labels=list(values), weights=weights)
    return None if math.isnan(kappa) else float(kappa)


def fleiss(rows: Sequence[Sequence[str]], values: Sequence[str]) -> float | None:
    """Fleiss' kappa of tasks each labelled by the same number of annotators."""
    from statsmodels.stats.inter_rater import fleiss_kappa

    if len(rows) < 2 or len({len(r) for r in rows}) != 1 or len(rows[0]) < 2:
        return None
    counts = np.array([[row.count(v) for v in values] for row in rows])
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = fleiss_kappa(counts, method="fleiss")
    return None if math.isnan(kappa) else float(kappa)


def krippendorff_alpha(
    reliability: Sequence[Sequence[str | None]], values: Sequence[str], ordinal: bool
) -> float | None:
    """Krippendorff's alpha of an annotators x tasks table (None: not labelled)."""
    import krippendorff

    index = {v: i for i, v in enumerate(values)}
    data = np.array([[np.nan if x is None else index[x] for x in row] for row in reliability], dtype=float)
    if data.shape[1] < 2 or np.sum(~np.isnan(data)) < 4:
        return None
    level = "ordinal" if ordinal else "nominal"
    try:
        with np.errstate(invalid="ignore", divide="ignore"):
            alpha = krippendorff.alpha(
                reliability_data=data, level_of_measurement=level, value_domain=list(range(len(values)))
            )
    except (ValueError, ZeroDivisionError):  # one value only: alpha is undefined
        return None
    return None if math.isnan(alpha) else float(alpha)


def agreement(labels: Sequence[Label]) -> list[dict[str, Any]]:
    """One row per field: tasks, annotators, raw agreement, Cohen's, Fleiss' kappa, Krippendorff's
    alpha (see the module docstring); None where a figure is undefined."""
    if not labels:
        return []
    kind = task_kind(labels[0].kind)
    rows = []
    for field_name, by_task in _by_field(labels).items():
        field = kind.field(field_name)
        annotators = sorted({a for votes in by_task.values() for a in votes})
        pair_values: list[tuple[str, str]] = []
        kappas, weighted = [], []
        for a, b in itertools.combinations(annotators, 2):
            pairs = [(v[a], v[b]) for v in by_task.values() if a in v and b in v]
            pair_values += pairs
            if (k := cohen(pairs, field.values)) is not None:
                kappas.append(k)
            if field.ordinal and (k := cohen(pairs, field.values, "quadratic")) is not None:
                weighted.append(k)
        size = Counter(len(v) for v in by_task.values() if len(v) >= 2).most_common(1)
        full = [list(v.values()) for v in by_task.values() if size and len(v) == size[0][0]]
        tasks = sorted(by_task)
        reliability = [[by_task[t].get(a) for t in tasks] for a in annotators]
        rows.append(
            {
                "field": field_name,
                "tasks": len(by_task),
                "annotators": len(annotators),
                "agreement": (sum(x == y for x, y in pair_values) / len(pair_values))
                if pair_values
                else None,
                "cohen_kappa": float(np.mean(kappas)) if kappas else None,
                "cohen_kappa_quadratic": float(np.mean(weighted)) if weighted else None,
                "fleiss_kappa": fleiss(full, field.values),
                "krippendorff_alpha": krippendorff_alpha(reliability, field.values, field.ordinal),
            }
        )
    order = [f.name for f in kind.fields]
    return sorted(rows, key=lambda r: order.index(r["field"]))


def agreement_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    def show(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)

    head = ["field", "tasks", "annotators", "agreement", "cohen_kappa", "cohen_kappa_quadratic",
            "fleiss_kappa", "krippendorff_alpha"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(show(r[h]) for h in head) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# --- the paper's correction rules --------------------------------------------------------------------


def resolve(
    first: str | None, second: str | None, third: str | None, kind: str = "generic", field: str | None = None
) -> str | None:
    """The accepted label from two annotators and a third who corrects (paper Appendix A.2).

    Generic rule: the two agree -> their label; they disagree -> the third's label (None,
    unresolved, until the third has given one). Card grades (``kind="card"``, ``field="grade"``)
    follow the paper's rule: either says invalid -> invalid (the card is discarded); one high and
    one middle -> the third's choice between them; otherwise middle.
    """
    if kind == "card" and field == "grade":
        if "invalid" in (first, second):
            return "invalid"
        if {first, second} == {"high", "middle"}:
            return third if third in ("high", "middle") else UNRESOLVED
        return "high" if first == second == "high" else "middle"
    if first is not None and first == second:
        return first
    return third


def resolve_labels(
    labels: Sequence[Label], first: str, second: str, third: str | None = None
) -> dict[str, dict[str, Any]]:
    """Per task, per field: the label the rule accepts from annotators `first` and `second`, with
    `third` correcting; {task: {field: value or None}}."""
    table = _by_field(labels)
    kind = labels[0].kind if labels else "generic"
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for field, by_task in table.items():
        for task, votes in by_task.items():
            if first in votes and second in votes:
                out[task][field] = resolve(votes[first], votes[second], votes.get(third or ""), kind, field)
    return dict(out)


def write_agreement_files(rows: Sequence[Mapping[str, Any]], out: Path) -> None:
    """The agreement table as OUT.md, OUT.csv and OUT.json."""
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out.with_suffix(".md"), agreement_markdown(rows))
    atomic_write_text(out.with_suffix(".json"), json.dumps(list(rows), indent=2) + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(out.with_suffix(".csv"), buffer.getvalue())
