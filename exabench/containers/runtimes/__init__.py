"""Container runtimes: one module per runtime (a new runtime is one module here plus its golden
test), each with `FACTS` (exabench.containers.runtimes.facts.RuntimeFacts: where it sits in the
launch line, how host MPI and the interconnect are injected, its GPU flags, mounts, the image
reference it takes, the launchers it needs) and `argv(site, image, binds, env, mount=None)`; a
runtime whose image goes into the batch header also has `directives(site, image)`. Sources in
each module's docstring. Every list of runtimes elsewhere is derived from FACTS."""

from __future__ import annotations

from types import ModuleType

from exabench.plugins import discover

NONE = "none"  # a site without a container runtime: the runner starts natively

RUNTIMES: dict[str, ModuleType] = discover(__path__, __name__)


def register(module) -> None:
    """Add a runtime module (or any object with FACTS and argv) to the registry (tests, plug-ins)."""
    RUNTIMES[module.FACTS.name] = module


def unregister(name: str) -> None:
    RUNTIMES.pop(name, None)


def facts(name: str):
    return RUNTIMES[name].FACTS


def names(**wanted) -> tuple[str, ...]:
    """The runtimes whose facts have the given values: names(builds_sif=True)."""
    return tuple(n for n, m in RUNTIMES.items() if all(getattr(m.FACTS, k) == v for k, v in wanted.items()))


def valid_names() -> str:
    """What a site file's container.runtime may say, for error messages."""
    return ", ".join((NONE, *sorted(RUNTIMES)))


def directives(name: str, site, image: str) -> list[str]:
    """The batch-header options the runtime needs (Shifter's --image=...); [] for most."""
    module = RUNTIMES.get(name)
    return list(module.directives(site, image)) if module is not None and hasattr(module, "directives") else []
