"""One registry class for every kind of plugin: chat backends, judges, rank.py's modes, report pages.

A `Registry` maps names to what they build (a class, a factory, a page builder). Two rules hold for
every kind, where four hand-rolled registries held them two different ways:

* a second, different thing under a taken name is refused (`ValueError`), never a silent
  replacement; the same thing registered again (its module imported twice) is no change;
* plugins are found by scanning their package: the first read imports every module of `package`
  once, so a new module is a new plugin with no import line anywhere else.

A registry is a read-only `Mapping` (`name in registry`, `registry[name]`, `sorted(registry)`), so
the code that looks plugins up needs nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

T = TypeVar("T")
F = TypeVar("F")


def _origin(item: Any) -> str:
    """Where `item` was defined: two registrations of one name agree when their origins do."""
    thing = item if hasattr(item, "__qualname__") else type(item)
    return f"{thing.__module__}.{thing.__qualname__}"


class Registry(Mapping[str, T]):
    """Named plugins of one kind. `what` names the kind in errors ("judge", "page kind");
    `package`: the dotted package whose modules are imported before the first read; `origin`: what
    identifies an entry when a name is registered twice (default: where the entry was defined)."""

    def __init__(
        self, what: str, package: str | None = None, origin: Callable[[T], Any] | None = None
    ) -> None:
        self.what = what
        self.package = package
        self._origin = origin or _origin
        self._items: dict[str, T] = {}
        self._scanned = package is None
        self._scanning = False  # the scanning thread's own reads (a module that looks a plugin up)
        self._lock = threading.Lock()  # guards the entries
        self._scan_lock = threading.RLock()  # one scan at a time; other threads wait for it

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {sorted(self._items)})"

    # --- registering ------------------------------------------------------------------------------

    def add(self, name: str, item: T) -> T:
        """Register `item` as `name`; a different item under a taken name is a ValueError."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.what} needs a name, got {name!r}")
        with self._lock:
            known = self._items.get(name)
            if known is not None and self._origin(known) != self._origin(item):
                raise ValueError(
                    f"{self.what} {name!r} is registered twice: {self._origin(known)}, {self._origin(item)}"
                )
            self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register the decorated class or function as `name`."""

        def decorate(item: F) -> F:
            self.add(name, item)  # type: ignore[arg-type]
            return item

        return decorate

    def remove(self, name: str) -> None:
        """Drop `name` (tests that register a toy plugin); no error when it is not there."""
        with self._lock:
            self._items.pop(name, None)

    # --- reading (the package scanned first, once) ---------------------------------------------

    def scan(self) -> None:
        """Import every module of `package` and its subpackages once (each registers its plugins as
        it is imported)."""
        if self._scanned:
            return
        with self._scan_lock:  # another thread waits here until the scan is done, never reads half
            if self._scanned or self._scanning:  # done, or this thread's own scan reading
                return
            self._scanning = True
            try:
                package = importlib.import_module(str(self.package))
                for info in pkgutil.walk_packages(package.__path__, f"{self.package}."):
                    importlib.import_module(info.name)  # subpackages too: a task is a folder
                self._scanned = True  # only when every module imported: a failed import is raised again
            finally:
                self._scanning = False

    def __getitem__(self, name: str) -> T:
        self.scan()
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        self.scan()
        return iter(list(self._items))

    def __len__(self) -> int:
        self.scan()
        return len(self._items)
