"""Modules loaded when first used, not when imported.

Every Snakemake process of a campaign (the dry run, the one that runs it, each `run:` job it starts
in a process of its own, each job step an executor plugin starts on a compute node) imports
exabench.pipeline to read the workflow, and parsing the workflow uses no table: pandas and numpy,
imported by the analysis and performance-model modules it names, were 0.8 s of each start.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """The module `name`, executed at the first attribute read from it (at once if already imported)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
