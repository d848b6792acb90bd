"""The package's floor plan (docs/architecture.md): no import circles, no stage importing a later
one, and rule files that import the package through exabench.pipeline only.

Every import counts, the ones inside functions too: a lazy import still ties the two modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "exabench"

# The pipeline's order, earliest first: a module may import from its own stage or an earlier one.
# Stages on one line are peers and never import each other.
STAGES = [
    ("errors", "processes", "rendered", "lazy", "plugins", "stacks"),
    ("config", "io", "markdown"),
    ("energy",),
    ("containers",),
    ("models", "data", "training"),
    ("benchmarks",),
    ("campaign",),
    ("records",),
    ("analysis",),
    ("perf",),
    ("runner",),
    ("execute",),
    ("pipeline", "gpucheck", "rehearsal"),
    ("cli",),
    ("__main__",),
]
RANK = {name: rank for rank, names in enumerate(STAGES) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports (a `from pkg import thing` counts as pkg.thing when that
    is a module, and as pkg always: Python runs pkg/__init__ and looks the name up there, so a
    module importing a sibling through its own package is tied to that package's __init__)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names} | {base}
    out = set()
    for target in found:
        while target and target not in known:  # exabench.x.y.function -> exabench.x.y
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def stage_of(module: str) -> str | None:
    """The stage a module belongs to: its folder under exabench/, or its own name at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # the package root (__version__) belongs to none


def backward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in graph.items():
        here = stage_of(module)
        for target in targets:
            there = stage_of(target)
            if here is None or there is None or here == there:
                continue
            if here not in RANK or there not in RANK:
                bad.append(f"{module} -> {target}: stage {here if here not in RANK else there} has no place in STAGES")
            elif RANK[there] >= RANK[here]:
                bad.append(f"{module} ({here}) imports {target} ({there}), a later or peer stage")
    return sorted(bad)


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []


def test_no_stage_imports_a_later_one():
    assert backward_imports(import_graph()) == []


def test_the_checks_catch_a_circle_and_a_backward_import():
    # The checks themselves, on a graph with both faults: they must not pass vacuously.
    graph = {"exabench.records.record": {"exabench.analysis.runs"},
             "exabench.analysis.runs": {"exabench.records.record"},
             "exabench.campaign.plan": {"exabench.models.convnets"},
             "exabench.models.convnets": {"exabench.data.images"}}
    assert circles(graph) == [["exabench.analysis.runs", "exabench.records.record"]]
    assert backward_imports(graph) == [
        "exabench.models.convnets (models) imports exabench.data.images (data), a later or peer stage",
        "exabench.records.record (records) imports exabench.analysis.runs (analysis), a later or peer stage",
    ]


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "exabench"
    (pkg / "records").mkdir(parents=True)
    (pkg / "records" / "__init__.py").write_text("")
    src = "from . import tidy\n\ndef f():\n    from exabench.analysis.runs import cell\n"
    (pkg / "records" / "record.py").write_text(src)
    known = {"exabench.records", "exabench.records.tidy", "exabench.records.record", "exabench.analysis.runs"}
    found = imports_of("exabench.records.record", pkg / "records" / "record.py", known)
    assert found == {"exabench.records", "exabench.records.tidy", "exabench.analysis.runs"}


def test_a_module_importing_its_sibling_through_the_package_is_a_circle(tmp_path):
    # The package's __init__ re-exports the model; the model imports a sibling through the
    # package (`from pkg import atoms`), which runs that __init__: a circle. Through the module
    # that defines the name (`from pkg.atoms import atom`), there is none.
    pkg = tmp_path / "exabench" / "models" / "fold"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from exabench.models.fold.model import Fold\n")
    (pkg / "atoms.py").write_text("def atom(): ...\n")
    names = {"exabench.models.fold": pkg / "__init__.py", "exabench.models.fold.atoms": pkg / "atoms.py",
             "exabench.models.fold.model": pkg / "model.py"}

    def graph():
        return {n: imports_of(n, p, set(names)) for n, p in names.items()}

    (pkg / "model.py").write_text("from exabench.models.fold import atoms\nclass Fold: ...\n")
    assert circles(graph()) == [["exabench.models.fold", "exabench.models.fold.model"]]
    (pkg / "model.py").write_text("from exabench.models.fold.atoms import atom\nclass Fold: ...\n")
    assert circles(graph()) == []


# `import exabench.x`, `from exabench.x import y` (module exabench.x), `from exabench import x` (exabench.x)
RULE_IMPORT = re.compile(r"^\s*(?:import\s+(exabench[\w.]*)|from\s+(exabench\.[\w.]*)\s+import"
                         r"|from\s+exabench\s+import\s+(\w+))", re.M)


@pytest.mark.parametrize("rule_file", sorted((REPO / "workflow" / "rules").glob("*.smk")) + [REPO / "Snakefile"],
                         ids=lambda p: p.name)
def test_rule_files_import_the_package_through_pipeline_only(rule_file):
    imported = {a or b or f"exabench.{c}" for a, b, c in RULE_IMPORT.findall(rule_file.read_text())}
    assert imported <= {"exabench.pipeline"}, imported
