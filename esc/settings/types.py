"""The types a settings field can have beyond int, float, bool, str and Literal: a name that becomes
part of file names, a path that must exist, a device, an importable `_target_`, a non-empty list,
the ratios of a split; and the refusal of nan and inf in keys no model reads."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from hydra.utils import get_object
from pydantic import (
    Field,
)

from esc.config_rules import check, show
from esc.errors import ConfigError


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def leaves(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """Each leaf of a plain value (containers walked, in order) with its key: `key`, then dotted and
    [i] below it."""
    if not isinstance(value, Mapping | list):
        yield key, value
        return
    for name, item in value.items() if isinstance(value, Mapping) else enumerate(value):
        yield from leaves(item, f"{key}[{name}]" if isinstance(name, int) else f"{key}.{name}".lstrip("."))


def refuse_non_finite(key: str, value: Any) -> None:
    """ConfigError naming the first nan or inf in `value` (at `key`): what no model reads (an `Any`);
    no setting means nan or inf, and JSON cannot hold them."""
    for at, leaf in leaves(value, key):
        if isinstance(leaf, float) and not math.isfinite(leaf):
            raise ConfigError(at, f"must be a finite number, got {show(leaf)}")


NAME_MAX = 255  # bytes of one file name (ext4, XFS, Btrfs, APFS; NTFS counts 255 characters)

NAME_BYTES = 64
"""The most bytes (UTF-8) of a name that becomes part of file names (a target's, a role-player's, a
judge's): three of them and the longest fixed part of a file built from them (a score file's
temporary copy, `.<target>__<role-player>__<language>__<judge>.jsonl.XXXXXXXX.tmp`, 28 bytes; a
dialogue failure file's, 33 bytes with two names) stay within NAME_MAX, so a long name is refused
before any work, not with ENAMETOOLONG after it (tests/test_config_limits.py checks the sum)."""


def file_name_problem(value: Any) -> str | None:
    """Why `value` cannot be part of a file name (`target.name=../../x` wrote outside the run folder;
    240 characters played, then failed), or None."""
    text = value if isinstance(value, str) else ""
    if (
        not text
        or text in (".", "..")
        or any(c in text for c in "/\\")
        or any(ord(c) < 32 or ord(c) == 127 for c in text)
    ):
        return (
            "must be a name that can be part of a file name (no / or \\, not . or .., no control "
            f"characters), got {show(value)}"
        )  # fmt: skip
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > NAME_BYTES:
        return (
            f"is {size} bytes long (UTF-8), over the {NAME_BYTES} a name may have: the file names "
            f"built from it (e.g. <target>__<role-player>__<language>__<judge>.jsonl) must stay within "
            f"the file system's {NAME_MAX} bytes; use a shorter name"
        )
    return None


def _file_name(value: Any) -> str | None:
    """a name that can be part of a file name (no / or \\, not . or .., at most 64 bytes)"""
    if not isinstance(value, str):  # `name=nan`, `name=1`: a number (quote it: name='1')
        return f"must be a name (quote a number: name='1'), got {show(value)}"
    return file_name_problem(value)


def _existing(kind: Literal["file", "dir", "any"]) -> Callable[[Any], str | None]:
    def problem(value: Any) -> str | None:
        if not isinstance(value, str) or not value:
            return f"must be a path, got {show(value)}"
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

    problem.__doc__ = f"an existing {'directory' if kind == 'dir' else kind if kind == 'file' else 'path'}"
    return problem


def _device(value: Any) -> str | None:
    """`auto` or a torch device (cpu, cuda, cuda:1)"""
    if value == "auto":
        return None
    import torch  # heavy: only where a device is given

    try:
        torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        return f"must be auto or a torch device such as cpu, cuda or cuda:1, got {show(value)}"
    return None


def _importable(value: Any) -> str | None:
    """the dotted path of a function or class that imports"""
    if not isinstance(value, str) or "." not in value:
        return f"must be a dotted path such as esc.train.run.train, got {show(value)}"
    try:
        found = get_object(value)
    except Exception as err:  # ImportError, AttributeError, or the module's own failure
        return f"{value}: cannot be imported ({type(err).__name__})"
    return None if callable(found) else f"{value}: is not a function or class"


FileName = Annotated[Any, check(_file_name)]
"""A name that becomes part of a file name (a target's, a role-player's, a judge's)."""

ExistingFile = Annotated[str, check(_existing("file"))]

ExistingDir = Annotated[str, check(_existing("dir"))]

ExistingPath = Annotated[str, check(_existing("any"))]

T = TypeVar("T")

NonEmpty = Annotated[list[T], Field(min_length=1)]
"""A list of at least one item (an empty list selects nothing)."""

Paths = ExistingPath | NonEmpty[ExistingPath]
"""One existing path, or a non-empty list of them."""

Device = Annotated[str, check(_device)]
"""`auto`, or a device torch knows (`cpu`, `cuda`, `cuda:1`, `mps`, ...)."""

Target = Annotated[str, check(_importable)]
"""A `_target_`: the dotted path of a function or class that imports (the one way a config names code)."""


def ratios(*parts: str) -> Any:
    """One number >= 0 for each of `parts` (e.g. train, val, test), the first > 0: what a split
    divides by (`[0, 0, 0]` divides nothing)."""
    size, named = len(parts), " : ".join(parts)

    def first_above_zero(value: list[Any]) -> str | None:
        return None if value[0] > 0 else f"{parts[0]}'s share must be above 0 ({named}), got {show(value)}"

    return Annotated[
        list[Annotated[float, Field(ge=0)]],
        Field(min_length=size, max_length=size, description=named),
        check(first_above_zero, f"{parts[0]}'s above 0"),
    ]


def path_problem(kind: Literal["file", "dir", "any"] = "any") -> Callable[[Any], str | None]:
    """What is wrong with a path that must exist (a file, a directory, either), or None."""
    return _existing(kind)
