"""`esc.registry.Registry`: one way for every kind of plugin (backends, judges, modes, page kinds)."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from esc.registry import Registry

REGISTRY_MODULE = "from esc.registry import Registry\nTOYS = Registry('toy', __name__)\n"


def test_a_name_taken_by_another_plugin_is_refused_and_the_same_one_again_is_no_change() -> None:
    things: Registry[type] = Registry("thing")

    @things.register("a")
    class A:
        pass

    things.add("a", A)  # its module imported twice: the same origin
    with pytest.raises(ValueError, match="thing 'a' is registered twice"):

        @things.register("a")
        class B:
            pass

    assert things["a"] is A and list(things) == ["a"]
    things.remove("a")
    assert "a" not in things
    with pytest.raises(ValueError, match="needs a name"):
        things.add("", A)


def test_plugins_are_found_by_scanning_their_package_once(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "toy_plugins"
    package.mkdir()
    (package / "__init__.py").write_text(REGISTRY_MODULE)
    for name in ("one", "two"):
        (package / f"{name}.py").write_text(
            textwrap.dedent(f"""
                from toy_plugins import TOYS
                IMPORTS = globals().setdefault("IMPORTS", 0) + 1

                @TOYS.register("{name}")
                def make():
                    return "{name}"
            """)
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import toy_plugins

        assert sorted(toy_plugins.TOYS) == ["one", "two"]  # no import line names them
        assert toy_plugins.TOYS["two"]() == "two"
        assert len(toy_plugins.TOYS) == 2 and sys.modules["toy_plugins.one"].IMPORTS == 1
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "toy_plugins"]:
            del sys.modules[name]


def test_a_scan_that_fails_is_not_taken_for_a_finished_one(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "broken_plugins"
    package.mkdir()
    (package / "__init__.py").write_text(REGISTRY_MODULE)
    (package / "bad.py").write_text("raise ImportError('a missing dependency')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import broken_plugins

        for _ in range(2):  # raised again on the next read, never an incomplete registry
            with pytest.raises(ImportError, match="a missing dependency"):
                list(broken_plugins.TOYS)
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "broken_plugins"]:
            del sys.modules[name]


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("esc.chat.base", "REGISTRY"),
        ("esc.scoring.judge", "REGISTRY"),
        ("esc.tasks.task", "MODES"),
        ("esc.site.pages", "PAGE_KINDS"),
    ],
)
def test_every_plugin_kind_uses_the_one_registry(module: str, name: str) -> None:
    import importlib

    registry = getattr(importlib.import_module(module), name)
    assert isinstance(registry, Registry) and registry.package and len(registry) >= 2


def test_a_thread_reading_during_another_threads_scan_waits_for_all_plugins(
    tmp_path: Path, monkeypatch
) -> None:
    import threading

    package = tmp_path / "slow_plugins"
    package.mkdir()
    (package / "__init__.py").write_text(REGISTRY_MODULE)
    for name in ("a_first", "b_slow"):
        pause = "import time; time.sleep(0.5)\n" if name == "b_slow" else ""
        (package / f"{name}.py").write_text(
            f"{pause}from slow_plugins import TOYS\nTOYS.add('{name}', len)\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import slow_plugins

        seen: dict[str, list[str]] = {}

        def read(who: str) -> None:
            seen[who] = sorted(slow_plugins.TOYS)

        first = threading.Thread(target=read, args=("first",))
        first.start()
        time.sleep(0.2)  # the first thread is inside the scan, in b_slow's import
        read("second")
        first.join()
        assert seen == {"first": ["a_first", "b_slow"], "second": ["a_first", "b_slow"]}
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "slow_plugins"]:
            del sys.modules[name]
