"""The vocabulary of config checks, and the schema of one config node (`Section`).

Each module that reads a config node declares its schema beside its code (`CONFIG` in
`esc.evaluate.run`, `esc.train.run`, `esc.judge_training.train`, `esc.rank.run`,
`esc.cards.construct.pipeline`; the pieces they share in `esc.chat.cache`, `esc.chat.build`,
`esc.models.loading`, `esc.scoring.judges`, `esc.lifecycle`), and `esc.config_schema.validate` runs
the schemas of the entry point's job before any work. A `Section` names a node, the rules its values
must pass and, where the code reads a fixed set of keys, the keys it knows: any other key there is a
typo and stops the run (one `error:` line naming it, exit code 2). A node that the code hands whole
to a library (Lightning's Trainer, an optimizer) stays open: the library refuses what it does not know.
Registries supply their own lists: a backend's or judge's `kind` is one the registry knows, and its
keys are the arguments of the class registered under that kind.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from hydra.utils import get_object
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from esc.errors import ConfigError

Check = Callable[[Any], "str | None"]
"""A check takes a plain value (containers converted) and returns the problem, or None if fine."""

# --- checks ---------------------------------------------------------------------------------------


def _show(value: Any) -> str:
    """A value as the command line would write it: "abc", 1, true, null, [1, 2], nan, inf."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # nan, inf, -inf (JSON has no word for them)
    return json.dumps(value, ensure_ascii=False, default=str)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite int or float, not a bool: nan passes no comparison, so it would pass every range
    check (a nan temperature decodes greedily, settings.json cannot hold it); inf (`1e400`) no end."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)  # an int is finite (10**400 too)


def non_finite(value: Any, key: str = "") -> tuple[str, float] | None:
    """The key (`key`, then dotted and [i] below it) and value of the first nan or inf in `value` (a
    plain value, containers walked), or None: no setting means nan or inf, and JSON cannot hold them."""
    if isinstance(value, float) and not math.isfinite(value):
        return key, value
    items = (
        value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    )
    for name, item in items:
        found = non_finite(item, f"{key}[{name}]" if isinstance(name, int) else f"{key}.{name}".lstrip("."))
        if found is not None:
            return found
    return None


def integer(minimum: int | None = None, null: bool = False, maximum: int | None = None) -> Check:
    """An integer (not a bool, not a float) >= `minimum` and <= `maximum`; `null` allows None."""
    bounds = [f"{op} {bound}" for op, bound in ((">=", minimum), ("<=", maximum)) if bound is not None]
    wanted = "an integer" + (f" {' and '.join(bounds)}" if bounds else "") + (" or null" if null else "")

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        out_of_range = is_int(value) and (
            (minimum is not None and value < minimum) or (maximum is not None and value > maximum)
        )
        if not is_int(value) or out_of_range:
            return f"must be {wanted}, got {_show(value)}"
        return None

    return check


def number(
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    null: bool = False,
    multiple_of: float | None = None,
) -> Check:
    """A number within the bounds: `minimum`/`maximum` inclusive, `above`/`below` exclusive; a
    multiple of `multiple_of` where given."""
    bounds = [
        f"{op} {bound}"
        for op, bound in ((">=", minimum), (">", above), ("<=", maximum), ("<", below))
        if bound is not None
    ]
    if multiple_of is not None:
        bounds.append(f"a multiple of {multiple_of}")
    wanted = " and ".join(b for b in bounds if b)
    wanted = "a number" + (f" {wanted}" if wanted else "") + (" or null" if null else "")

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        ok = _is_number(value) and not (
            (minimum is not None and value < minimum)
            or (above is not None and value <= above)
            or (maximum is not None and value > maximum)
            or (below is not None and value >= below)
            or (multiple_of is not None and abs(value / multiple_of - round(value / multiple_of)) > 1e-9)
        )
        return None if ok else f"must be {wanted}, got {_show(value)}"

    return check


NAME_MAX = 255  # bytes of one file name (ext4, XFS, Btrfs, APFS; NTFS counts 255 characters)
NAME_BYTES = 64
"""The most bytes (UTF-8) of a name that becomes part of file names (a target's, a role-player's, a
judge's): three of them and the longest fixed part of a file built from them (a score file's
temporary copy, `.<target>__<role-player>__<language>__<judge>.jsonl.XXXXXXXX.tmp`, 28 bytes; a
dialogue failure file's, 33 bytes with two names) stay within NAME_MAX, so a long name is refused
before any work, not with ENAMETOOLONG after it (tests/test_config_limits.py checks the sum)."""


def file_name() -> Check:
    """A name that becomes part of a file name (a target's, a role-player's, a judge's): one path
    component, no separator, not "." or "..", no control character (`target.name=../../x` wrote
    outside the run folder), at most NAME_BYTES bytes (240 characters played, then failed)."""

    def check(value: Any) -> str | None:
        text = str(value) if value is not None else ""
        if (
            not text
            or non_finite(value) is not None  # `name=nan`: a number, no name (quote it: name='nan')
            or text in (".", "..")
            or any(c in text for c in "/\\")
            or any(ord(c) < 32 or ord(c) == 127 for c in text)
        ):
            return (
                "must be a name that can be part of a file name (no / or \\, not . or .., no control "
                f"characters), got {_show(value)}"
            )
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > NAME_BYTES:
            return (
                f"is {size} bytes long (UTF-8), over the {NAME_BYTES} a name may have: the file names "
                f"built from it (e.g. <target>__<role-player>__<language>__<judge>.jsonl) must stay within "
                f"the file system's {NAME_MAX} bytes; use a shorter name"
            )
        return None

    return check


def boolean() -> Check:
    def check(value: Any) -> str | None:
        return None if isinstance(value, bool) else f"must be true or false, got {_show(value)}"

    return check


def one_of(*choices: Any, null: bool = False) -> Check:
    """One of `choices` (compared exactly: `1` is not `"1"`)."""
    shown = ", ".join(c if isinstance(c, str) else _show(c) for c in choices) + (" or null" if null else "")

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        if not any(type(value) is type(c) and value == c for c in choices):
            return f"must be one of {shown}, got {_show(value)}"
        return None

    return check


def registered(kinds: Callable[[], Sequence[str]]) -> Check:
    """One of the kinds a registry knows when the check runs (`backend_kinds`, `judge_kinds`): a
    backend or judge registered by a plugin is a valid `kind:` too."""

    def check(value: Any) -> str | None:
        return one_of(*kinds())(value)

    return check


def list_of(item: Check, null: bool = False, length: int | None = None) -> Check:
    """A non-empty list (of exactly `length` items if given) whose every item passes `item`."""

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        if not isinstance(value, list):
            return f"must be a list, e.g. [a, b]{' or null' if null else ''}, got {_show(value)}"
        if not value:
            return "is an empty list, which selects nothing" + ("; use null for the default" if null else "")
        if length is not None and len(value) != length:
            return f"must have {length} items, got {len(value)}"
        for i, x in enumerate(value):
            problem = item(x)
            if problem:
                return f"item {i}: {problem}"
        return None

    return check


def ratios(*parts: str) -> Check:
    """One number >= 0 for each of `parts` (e.g. train, val, test), the first > 0: what a split
    divides by (`[0, 0, 0]` divides nothing)."""
    each = list_of(number(minimum=0), length=len(parts))

    def check(value: Any) -> str | None:
        problem = each(value)
        if problem is None and not value[0] > 0:
            problem = f"the first ({parts[0]}) must be above 0, got {_show(value)}"
        return problem

    return check


def path(kind: Literal["file", "dir", "any"] = "any", null: bool = False) -> Check:
    """A path that exists: a file, a directory, or either."""

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        if not isinstance(value, str) or not value:
            return f"must be a path, got {_show(value)}"
        p = Path(value)
        if not p.exists():
            return (
                f"{value}: no such {'directory' if kind == 'dir' else 'file' if kind == 'file' else 'path'}"
            )
        if kind == "file" and not p.is_file():
            return f"{value}: is a directory, not a file"
        if kind == "dir" and not p.is_dir():
            return f"{value}: is a file, not a directory"
        return None

    return check


def paths(kind: Literal["file", "dir", "any"] = "any") -> Check:
    """One existing path, or a non-empty list of them."""
    single = path(kind)
    many = list_of(single)

    def check(value: Any) -> str | None:
        return many(value) if isinstance(value, list) else single(value)

    return check


def callable_target() -> Check:
    """A `_target_`: the dotted path of a function or class that imports (the one way a config
    names code; `kind:` is a registry's name for a plugin, not a path)."""

    def check(value: Any) -> str | None:
        if not isinstance(value, str) or "." not in value:
            return f"must be a dotted path such as esc.train.run.train, got {_show(value)}"
        try:
            found = get_object(value)
        except Exception as err:  # ImportError, AttributeError, or the module's own failure
            return f"{value}: cannot be imported ({type(err).__name__})"
        return None if callable(found) else f"{value}: is not a function or class"

    return check


def strings() -> Check:
    """Null, or a (possibly empty) list of strings."""

    def check(value: Any) -> str | None:
        if value is None or (isinstance(value, list) and all(isinstance(x, str) for x in value)):
            return None
        return f"must be a list of strings, got {_show(value)}"

    return check


def device() -> Check:
    """`auto`, or a device torch knows (`cpu`, `cuda`, `cuda:1`, `mps`, ...)."""

    def check(value: Any) -> str | None:
        if value == "auto":
            return None
        import torch

        try:
            torch.device(value)
        except (RuntimeError, TypeError, ValueError):
            return f"must be auto or a torch device such as cpu, cuda or cuda:1, got {_show(value)}"
        return None

    return check


def precision() -> Check:
    """A precision Lightning's Trainer accepts (`32-true`, `bf16-mixed`, `16-mixed`, 32, ...)."""

    def check(value: Any) -> str | None:
        from typing import get_args

        from lightning_fabric.plugins.precision.precision import _PRECISION_INPUT

        allowed = [c for part in get_args(_PRECISION_INPUT) for c in get_args(part)]
        if any(type(value) is type(c) and value == c for c in allowed):
            return None
        shown = ", ".join(str(c) for c in allowed if isinstance(c, str) and "-" in c)
        return f"must be one of {shown} (or 64, 32, 16, bf16), got {_show(value)}"

    return check


def validation_interval() -> Check:
    """Lightning's `val_check_interval`: null, a number of batches, a fraction of an epoch, or a time
    "DD:HH:MM:SS" (four integers)."""
    batches, fraction = integer(1), number(above=0, maximum=1)

    def check(value: Any) -> str | None:
        parts = value.split(":") if isinstance(value, str) else []
        is_time = len(parts) == 4 and all(p.strip().isdigit() for p in parts)
        if value is None or is_time or batches(value) is None or fraction(value) is None:
            return None
        return (
            f"must be null, an integer >= 1, a number > 0 and <= 1 or a time DD:HH:MM:SS, got {_show(value)}"
        )

    return check


def either(*checks: Check) -> Check:
    """Passes when any check passes; otherwise the problem of the last one."""

    def check(value: Any) -> str | None:
        problems = [c(value) for c in checks]
        return None if any(p is None for p in problems) else problems[-1]

    return check


# --- schemas --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rule:
    """`key` (dotted, below the section's node) must pass `check`, when `when(cfg)` holds; `hint`
    follows the problem; `required`: it must be there (where the section is)."""

    key: str
    check: Check
    hint: str = ""
    when: Callable[[Any], bool] | None = None
    required: bool = False  # the code reads it: absent (`~seed`) is an error, not a skipped rule


@dataclasses.dataclass(frozen=True)
class Section:
    """A config node the code reads: `node` (dotted; "" is the top level), the `rules` its values must
    pass, and `keys`, the keys the code reads there (None: open, e.g. a node handed to a library).
    `when(cfg)`: the section applies only then (rank.py reads `judge` only in the modes that judge).
    `schema`: the dataclass the code reads the node as (`typed_section`, `load_section`)."""

    node: str
    rules: tuple[Rule, ...] = ()
    keys: frozenset[str] | Callable[[Mapping[str, Any]], Sequence[str]] | None = None
    when: Callable[[Any], bool] | None = None
    schema: type | None = None
    missing: str = ""  # a typed section the job reads is missing: how to add it (an experiment)
    needed: Callable[[Any], bool] | None = None  # when a missing typed section is an error (None: always)

    def known(self, value: Mapping[str, Any]) -> set[str] | None:
        """The keys this node may hold, given its value (a registry's class may decide), or None."""
        if self.keys is None:
            return None
        if callable(self.keys):
            return set(self.keys(value))
        return set(self.keys)


def keys(*names: str) -> frozenset[str]:
    return frozenset(names)


def arguments(factory: Callable[..., Any]) -> list[str] | None:
    """The keyword arguments `factory` accepts (its config keys); None when it takes any (`**kwargs`)."""
    params = inspect.signature(factory).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def registry_keys(
    registry: Callable[[], Mapping[str, Callable[..., Any]]], *extra: str
) -> Callable[[Mapping[str, Any]], list[str]]:
    """Keys of a `kind:` node: `kind`, `extra`, and the arguments of the class registered under its
    kind (all of `extra` only when the kind is unknown: the `kind` rule names that problem)."""

    def known(value: Mapping[str, Any]) -> list[str]:
        factory = registry().get(value.get("kind"))
        accepted = arguments(factory) if factory is not None else None
        return ["kind", *extra, *(value if accepted is None else accepted)]

    return known


# --- typed sections -------------------------------------------------------------------------------
#
# A typed section states each setting once: its value (and the comment saying what it does) in the
# YAML under conf/, its type and its range in a dataclass beside the code that reads it. The
# dataclass's fields have no defaults (`MISSING`): a value the YAML does not set is an error naming
# the key, never a number in code. The code reads the node as that dataclass (`load_section`, once,
# at the job's start), not as a dict with `.get(key, default)`.

T = TypeVar("T")


def setting(check: Check | None = None, hint: str = "") -> Any:
    """A field of a typed section: its value comes from conf/; `check` its range beyond the type."""
    return dataclasses.field(default=MISSING, metadata={"check": check, "hint": hint})


def typed_section(
    node: str, schema: type, when: Callable[[Any], bool] | None = None, missing: str = ""
) -> Section:
    """The `Section` of the dataclass `schema` at `node`: its fields are the node's keys (any other
    is a typo), their `setting(check)` its rules, their types checked by OmegaConf. The node must be
    there (where `when` holds); `missing` says how to add it when an experiment brings it."""
    fields = dataclasses.fields(schema)
    rules = tuple(  # a field has no default: the key must be there
        Rule(f.name, f.metadata["check"], f.metadata["hint"], required=True)
        for f in fields
        if f.metadata.get("check")
    )
    return Section(node, rules, frozenset(f.name for f in fields), when, schema, missing)


def load_section(node: str, schema: type[T], value: Mapping[str, Any] | None) -> T:
    """The config node `node` (its plain, resolved value) as an instance of `schema`; a ConfigError
    naming the key that is missing, unknown, of the wrong type or out of its `setting(check)` range
    (so a section read outside an entry point, from a saved manifest or a test, is checked the same)."""
    check_fields(node, schema, value or {})
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), dict(value or {})))
    except MissingMandatoryValue as err:
        key = f"{node}.{err.full_key}" if node else str(err.full_key)
        raise ConfigError(key, "is not set (conf/ holds its value)") from None
    except OmegaConfBaseException as err:
        key = str(getattr(err, "full_key", "") or "")
        key = f"{node}.{key}" if node and key else (key or node)
        raise ConfigError(key, str(err).splitlines()[0]) from None


def refuse_non_finite(key: str, value: Any) -> None:
    """ConfigError naming the first nan or inf in `value` (at `key`): what no range check saw."""
    found = non_finite(value, key)
    if found is not None:
        raise ConfigError(found[0], f"must be a finite number, got {_show(found[1])}")


def check_fields(node: str, schema: type, value: Mapping[str, Any]) -> None:
    """ConfigError on the first field of `schema` whose value in `value` fails its `setting(check)`;
    a field that is itself a typed section is checked the same, one level down."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.name not in value:
            continue  # missing: OmegaConf's merge names it
        key = f"{node}.{f.name}" if node else f.name
        check = f.metadata.get("check")
        problem = check(value[f.name]) if check is not None else None
        if problem:
            hint = f.metadata.get("hint")
            raise ConfigError(key, f"{problem} ({hint})" if hint else problem)
        inner = [
            t for t in (hints.get(f.name), *typing.get_args(hints.get(f.name))) if dataclasses.is_dataclass(t)
        ]
        if inner and isinstance(value[f.name], Mapping):  # a typed section, or an optional one
            check_fields(key, inner[0], value[f.name])  # its own checks name a nan first
        refuse_non_finite(key, value[f.name])  # a field without a range check (an Any, a float)
