"""One-module-per-concept packages (launchers, schedulers, container runtimes): every module of the
package but its `facts` module declares `FACTS` with a `name`, and the package's registry is found
here, by name, in one pass over the package's modules."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from types import ModuleType


def discover(path: Iterable[str], package: str, found: Callable[[ModuleType], None] = lambda module: None,
             not_members: frozenset[str] = frozenset({"facts"})) -> dict[str, ModuleType]:
    """{FACTS.name: module} of the package at `path` (its __path__) called `package` (its __name__),
    in module-name order; `found` is told of each module as it is imported (pairing, name lists)."""
    modules = {}
    for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
        if info.name not in not_members:
            module = importlib.import_module(f"{package}.{info.name}")
            modules[module.FACTS.name] = module
            found(module)
    return modules
