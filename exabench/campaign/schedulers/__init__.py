"""The batch schedulers: one module each (slurm, lsf, pbs, cobalt, none), declaring its facts
(exabench.campaign.schedulers.facts.SchedulerFacts) and the few functions its facts call for.
Every per-scheduler table elsewhere is read from here: a new scheduler is its module (and its header
template, workflow/templates/batch/<name>.sh.j2, or the module's HEADER text), nothing else.

The numbers a job asks for (nodes, tasks, CPUs, GPUs, memory, queue, time) are worked out once, in
exabench.campaign.allocation; these modules only say how their scheduler is told them.
"""

from __future__ import annotations

import shlex
from types import ModuleType

from exabench.campaign.site import SCHEDULER_EXECUTORS, SCHEDULER_NAMES, pair_launcher, unpair_launcher
from exabench.plugins import discover


def _name(module) -> None:  # the site file's check of `scheduler:` and `submit:` reads these
    SCHEDULER_NAMES.add(module.FACTS.name)
    SCHEDULER_EXECUTORS[module.FACTS.name] = module.FACTS.executor


SCHEDULERS: dict[str, ModuleType] = discover(__path__, __name__, _name)


def register(module) -> None:
    """Add a scheduler module (or any object with FACTS) to the registry (tests, plug-ins)."""
    SCHEDULERS[module.FACTS.name] = module
    SCHEDULER_NAMES.add(module.FACTS.name)
    SCHEDULER_EXECUTORS[module.FACTS.name] = module.FACTS.executor
    for launcher in module.FACTS.launchers:
        pair_launcher(launcher, (module.FACTS.name,))


def unregister(name: str) -> None:
    module = SCHEDULERS.pop(name, None)
    SCHEDULER_NAMES.discard(name)
    SCHEDULER_EXECUTORS.pop(name, None)
    for launcher in module.FACTS.launchers if module is not None else ():
        unpair_launcher(launcher, (name,))


def names(**wanted) -> tuple[str, ...]:
    """The schedulers whose facts have the given values: names(executor="slurm")."""
    return tuple(n for n, m in SCHEDULERS.items() if all(getattr(m.FACTS, k) == v for k, v in wanted.items()))


def of(site):
    """The module of the site's scheduler."""
    return SCHEDULERS[site.scheduler]


def facts(name: str):
    return SCHEDULERS[name].FACTS


def submit_line(site, script) -> str:
    """The shell line that submits the batch script at `script` on `site` (the path quoted): every
    submit line, submit script and pending-job message is written from the module's FACTS.submit."""
    return f"{of(site).FACTS.submit} {shlex.quote(str(script))}"


def queue_key(site) -> str:
    """Where the queue picked by size goes: "partition" (the header's queue option), or where the
    scheduler module says otherwise for the site (Slurm QOS at NERSC: "qos")."""
    pick = getattr(of(site), "queue_key", None)
    return pick(site) if pick else "partition"


def can_pin(site) -> bool:
    return bool(of(site).FACTS.pin)


def pinned(request: dict, site, nodes: tuple[str, ...]) -> dict:
    """A header request placed on exactly `nodes` (node groups), as the site's scheduler documents it."""
    return of(site).pinned(dict(request), site, tuple(nodes))


def request_parts(site, layout, node_local: str) -> dict:
    """The AllocationRequest fields the site's scheduler sets beyond the site's own."""
    parts = getattr(of(site), "request", None)
    return parts(site, layout, node_local) if parts else {}


def site_resources(site) -> dict:
    """The executor plugin's resources every job of the site gets (queue, account), or none."""
    give = getattr(of(site), "site_resources", None)
    return give(site) if give else {}


def rehearsal_book(site, tool: str | None = None) -> str:
    """The rule book the rehearsal's stand-in for `tool` (the site's submit command by default)
    checks: the site's scheduler's, or the first scheduler submitting with that tool."""
    module = of(site)
    if tool is not None and tool != module.FACTS.submit_tool:
        module = next(m for m in SCHEDULERS.values() if m.FACTS.submit_tool == tool and m.FACTS.rehearsal_book)
    pick = getattr(module, "rehearsal_book", None)
    return pick(site) if callable(pick) else module.FACTS.rehearsal_book


def header_template(template_name: str) -> str | None:
    """The header template text a scheduler module carries itself (its HEADER), for
    `batch/<name>.sh.j2` when no such file exists; None otherwise (jinja2's FunctionLoader)."""
    stem = template_name.removeprefix("batch/").removesuffix(".sh.j2")
    module = SCHEDULERS.get(stem) if template_name.startswith("batch/") else None
    return getattr(module, "HEADER", None)
