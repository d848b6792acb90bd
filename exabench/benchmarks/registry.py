"""The benchmark registry: benchmarks are found by name, and a name costs the import of its own
module only.

Each benchmark module registers its classes with `@register` when it is imported. Which module
holds which name is read from the modules' source with `ast`, without importing any of them
(`index`): a `@register` class whose body sets `name = "..."`, and the names a module lists in a
module-level `BENCHMARKS = (...)` tuple (for classes it registers through a function, under names
made at import time). `get(name)` imports that one module, so a run's process (and a plan) loads
the workloads it uses and no other. A name the index does not know is looked up the old way, by
importing every module (`load_all`), so a module that forgets to declare a made name still works.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

from exabench.benchmarks.base import Benchmark
from exabench.errors import ConfigError

PACKAGE = __name__.rpartition(".")[0]  # exabench.benchmarks
PACKAGE_DIR = Path(__file__).resolve().parent
REGISTRY: dict[str, type[Benchmark]] = {}  # the benchmarks imported so far (and any registered in code)


def register(cls: type[Benchmark]) -> type[Benchmark]:
    if cls.name in REGISTRY:
        raise ValueError(f"benchmark {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _is_register(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "register") or \
        (isinstance(node, ast.Attribute) and node.attr == "register")


def _literal_strings(node: ast.expr) -> list[str] | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def names_in_source(source: str, filename: str = "<source>") -> list[str]:
    """The benchmark names a module's source declares: `@register` classes with a literal `name`,
    and a module-level `BENCHMARKS` tuple of names."""
    names: list[str] = []
    for node in ast.parse(source, filename).body:
        if isinstance(node, ast.ClassDef) and any(_is_register(d) for d in node.decorator_list):
            for stmt in node.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                    [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else []
                if any(isinstance(t, ast.Name) and t.id == "name" for t in targets):
                    names += _literal_strings(stmt.value) or []
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BENCHMARKS"
                                                  for t in node.targets):
            names += _literal_strings(node.value) or []
    return names


@functools.cache
def index() -> dict[str, str]:
    """Benchmark name -> the module that registers it, read from the sources (nothing imported)."""
    found: dict[str, str] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        source = path.read_text()
        if "register" not in source and "BENCHMARKS" not in source:
            continue
        module = _module_of(path)
        for name in names_in_source(source, str(path)):
            if found.get(name, module) != module:
                raise ValueError(f"benchmark {name!r} declared by both {found[name]} and {module}")
            found[name] = module
    return found


def modules() -> list[str]:
    """Every module under exabench/benchmarks/."""
    return [_module_of(p) for p in sorted(PACKAGE_DIR.rglob("*.py"))]


def load_all() -> dict[str, type[Benchmark]]:
    """Import every benchmark module (for listings and checks over all of them): the registry, full."""
    for module in modules():
        importlib.import_module(module)
    return REGISTRY


def names() -> list[str]:
    """Every benchmark name, sorted, without importing a workload (where the modules declare them)."""
    return sorted(set(index()) | set(REGISTRY))


def get(name: str, file: str = "(config)", key: str = "name") -> type[Benchmark]:
    if name not in REGISTRY and name in index():
        importlib.import_module(index()[name])
    if name not in REGISTRY:
        load_all()  # a name made at import time that its module does not list in BENCHMARKS
    if name not in REGISTRY:
        raise ConfigError(file, key, name, "one of " + ", ".join(names()), "is not a known benchmark")
    return REGISTRY[name]
