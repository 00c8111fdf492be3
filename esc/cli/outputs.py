"""What a file tool may write: never over one of its own inputs, and never over an existing file
unless told (`--force`). Each refusal is one line naming the file (issue 36: imports that replaced
existing labels and scores, and an import that wrote over its own task file)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from esc.errors import UserError


def new_output(out: Path, inputs: Iterable[Path] = (), force: bool = False, flag: str = "--out") -> Path:
    """`out`, after checking that it is none of `inputs` (even with `force`) and, without `force`, that
    it does not exist yet; a UserError naming the file otherwise."""
    out = Path(out)
    target = out.resolve()
    for source in inputs:
        if Path(source).resolve() == target:
            raise UserError(f"{out}: {flag} is one of this command's inputs; name another file")
    if out.exists() and not out.is_dir() and not force:  # a folder: the command's own check names it
        raise UserError(f"{out}: {flag} exists; name a new file, or add --force to replace it")
    return out
