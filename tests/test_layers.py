"""The packages stay in the order of the data flow (docs/architecture.md, "Rooms"): the import-linter
contract in pyproject.toml holds, every module imports, and the graph of every import statement
(those inside functions included) has no cycle once the imports still listed as moves to do are
taken out; a listed import that no longer exists must leave the list."""

from __future__ import annotations

import ast
import graphlib
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import esc

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent


def _contract() -> dict:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = config["tool"]["importlinter"]["contracts"]
    return contract


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((REPO / "esc").rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


#: (importer, imported) pairs of `esc` modules still imported inside a function, each with its
#: reason; anything else imports at the top of its file, where a reader (and import-linter) sees it
INSIDE_FUNCTIONS: dict[tuple[str, str], str] = {}


def import_graph(
    inside_functions_only: bool = False, modules: dict[str, Path] | None = None
) -> set[tuple[str, str]]:
    """(importer, imported) for every `import`/`from ... import` of an `esc` module, at any depth
    of the file (inside functions too; only those with `inside_functions_only`); `from esc.a
    import b` counts as importing `esc.a.b` when that is a module, else `esc.a`. `modules`: the
    package's modules by name (default: those of esc/)."""
    modules = _modules() if modules is None else modules
    edges = set()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = ast.walk(tree)
        if inside_functions_only:
            functions = (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
            nodes = (node for function in functions for node in ast.walk(function))
        for node in nodes:
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            for target in targets:
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target in modules and target != name and target.startswith("esc"):
                    edges.add((name, target))
    return edges


def _listed_moves() -> set[tuple[str, str]]:
    return {tuple(item.split(" -> ")) for item in _contract().get("ignore_imports", [])}


def test_the_import_contract_holds() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 kept, 0 broken" in done.stdout


def test_every_module_of_esc_imports() -> None:
    for module in pkgutil.walk_packages(esc.__path__, "esc."):
        if module.name.rpartition(".")[2] == "__main__":
            continue  # importing one runs its command
        importlib.import_module(module.name)


def test_the_import_graph_has_no_cycle_but_the_listed_moves() -> None:
    edges = import_graph() - _listed_moves()
    graph: dict[str, set[str]] = {}
    for importer, imported in edges:
        graph.setdefault(importer, set()).add(imported)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        raise AssertionError(f"import cycle: {' -> '.join(err.args[1])}") from None


def test_every_listed_move_is_still_an_import() -> None:
    """A move done takes its line out of `ignore_imports`, so the list only shrinks."""
    stale = _listed_moves() - import_graph()
    assert not stale, f"no longer imported, remove from pyproject.toml ignore_imports: {sorted(stale)}"


def test_esc_modules_import_each_other_at_the_top_of_the_file() -> None:
    """No import inside a function hides an arrow from a top-of-file reading (and from a cycle
    check that only reads module level): the few left are listed above with their reason."""
    inside = import_graph(inside_functions_only=True)
    assert not inside - INSIDE_FUNCTIONS.keys(), (
        f"import these at the top of the file: {sorted(inside - INSIDE_FUNCTIONS.keys())}"
    )
    assert not INSIDE_FUNCTIONS.keys() - inside, (
        f"no longer inside a function, remove: {sorted(INSIDE_FUNCTIONS.keys() - inside)}"
    )


def test_the_graph_sees_imports_inside_functions(tmp_path: Path) -> None:
    """The checker itself: an import inside a function is an edge like any other (esc has none
    left, so a small package shows it)."""
    (tmp_path / "top.py").write_text("from esc import low\n\n\ndef f():\n    from esc.deep import inner\n")
    for name in ("low", "deep"):
        (tmp_path / f"{name}.py").write_text("")
    modules = {
        "esc.top": tmp_path / "top.py",
        "esc.low": tmp_path / "low.py",
        "esc.deep": tmp_path / "deep.py",
    }
    assert import_graph(modules=modules) == {("esc.top", "esc.low"), ("esc.top", "esc.deep")}
    assert import_graph(inside_functions_only=True, modules=modules) == {("esc.top", "esc.deep")}
    assert ("esc.chat.build", "esc.chat.base") in import_graph()  # and on the real package


def room(module: str) -> str:
    """The room a module is in: its folder directly under esc/ (`esc.secrets`), or the module
    itself where it is a file of esc/ (`esc.jsonl`)."""
    return ".".join(module.split(".")[:2])


def room_cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    graph: dict[str, set[str]] = {}
    for importer, imported in edges:
        if room(importer) != room(imported):
            graph.setdefault(room(importer), set()).add(room(imported))
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        return list(err.args[1])
    return None


def test_no_two_rooms_import_each_other() -> None:
    """A folder of esc/ and another folder or module never import each other, even where each
    module's imports run downward (`esc/secrets/` held the masking above `esc/jsonl.py` and the
    filter below it)."""
    cycle = room_cycle(import_graph())
    assert cycle is None, f"rooms import each other: {' -> '.join(cycle)}"


def test_a_room_cycle_is_seen_through_modules_of_one_folder() -> None:
    """The checker itself: two modules of one folder on either side of another room are a cycle."""
    edges = {("esc.secrets.masking", "esc.jsonl"), ("esc.jsonl", "esc.secrets.redaction")}
    assert room_cycle(edges) is not None
    assert room_cycle({("esc.masking", "esc.jsonl"), ("esc.jsonl", "esc.secrets.redaction")}) is None
