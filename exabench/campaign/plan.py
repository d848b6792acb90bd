"""Expand an experiment config x a site into a table of runs with stable, readable ids.

A run id is built only from what distinguishes the run: benchmark, optional label,
preset, the benchmark's id parameters (e.g. precision), every swept parameter, the
layout (nodes, ranks per node, threads per rank, GPUs per rank) and the repeat.
The same config and site always give the same ids, so Snakemake can resume.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass, field

from exabench import benchmarks
from exabench.errors import ConfigError, LayoutError
from exabench.containers.runtime import check_image_runs
from exabench.campaign import allocation, launchers
from exabench.campaign.site import (LAYOUT_KEYS, WALLTIME_MARGIN_MIN, Layout, Site,
                                   check_walltime, job_minutes, node_counts, ranks_per_node_of,
                                   resolve_layout)

RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"


@dataclass(frozen=True)
class Run:
    run_id: str
    benchmark: str
    suite: str
    framework: str
    preset: str
    params: dict
    layout: Layout
    swept: dict = field(default_factory=dict)
    repeat: int = 1
    campaign: str = "campaign"
    timeout_s: int = 1800
    workload: dict = field(default_factory=dict)  # the benchmark's facts (Benchmark.workload)
    resized: dict = field(default_factory=dict)  # key -> the campaign's own value, where preset_sizes replaced it

    def to_dict(self) -> dict:
        """dataclasses.asdict(self) with the layout's own to_dict, in the same key order, built
        directly (asdict's generic walk was a third of a 10,000-run render)."""
        d = {f.name: plain(getattr(self, f.name)) for f in _RUN_FIELDS}
        d["layout"] = self.layout.to_dict()
        if not d["resized"]:  # only a rehearsal's runs say it (preset_sizes)
            del d["resized"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Run":
        """The run that to_dict gave `d` (a run job renders its own files from it: run.smk)."""
        names = {f.name for f in dataclasses.fields(Layout)}  # to_dict adds `ranks`, a property
        layout = {k: v for k, v in d["layout"].items() if k in names}
        return cls(**{**{f.name: d[f.name] for f in _RUN_FIELDS if f.name in d}, "layout": Layout(**layout)})


_RUN_FIELDS = dataclasses.fields(Run)
_SCALARS = (str, int, float, bool, type(None))


@dataclass
class _Box:
    value: object


def plain(value):
    """What dataclasses.asdict makes of one value, with the JSON-like cases (scalars, plain dicts,
    lists and tuples) done directly; anything else goes through asdict itself."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {plain(k): plain(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return kind(plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return dataclasses.asdict(_Box(value))["value"]


def _sweep_keys_help(key: str, cls) -> str:
    """What a sweep may name, the closest first (a typo of ranks_per_node is a layout key's)."""
    import difflib
    params = list(cls.param_fields())
    close = difflib.get_close_matches(key, [*LAYOUT_KEYS, *params], n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return (f"{hint}layout keys: {', '.join(LAYOUT_KEYS)}; parameters of '{cls.name}': {', '.join(params)}")


def _id_token(value) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return "m" + _id_token(-value)  # -1 is not 1 (a run id keeps no '-' at a token's start)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-") or "x"


def make_run_id(name: str, label: str | None, preset: str, id_values: dict, swept: dict,
                layout: Layout, repeat: int, repeats: int) -> str:
    parts = [name] + ([label] if label else []) + [preset]
    parts += [_id_token(v) for v in id_values.values()]
    parts += [f"{k}-{_id_token(v)}" for k, v in swept.items() if k not in id_values]
    lay = f"n{layout.nodes}r{layout.ranks_per_node}t{layout.threads_per_rank}"
    if layout.gpus_per_rank:
        lay += f"g{layout.gpus_per_rank}"
    if layout.ranks_per_gpu > 1:
        lay += f"s{layout.ranks_per_gpu}"  # ranks sharing each GPU
    if layout.ranks_per_set:
        lay += f"a{layout.ranks_per_set}"  # ranks pooling cores and GPUs in one set
    if layout.smt > 1:
        lay += f"smt{layout.smt}"
    if layout.cores_per_rank != math.ceil(layout.threads_per_rank / layout.smt):
        lay += f"c{layout.cores_per_rank}"  # more cores held than threads need
    parts.append(lay)
    if repeats > 1:
        parts.append(f"rep{repeat}")
    return ".".join(parts)


def check_timeout(config: dict, site: Site, config_file: str) -> None:
    """A run's time limit must fit the site's longest job, margin included: refused when the plan is
    made (`snakemake -n`), not when the job graph is built or the job is submitted."""
    if site.max_walltime_min:
        longest = (site.max_walltime_min - WALLTIME_MARGIN_MIN) * 60
        if config["timeout_s"] > longest:
            raise ConfigError(config_file, "timeout_s", config["timeout_s"],
                              f"at most {longest} s on site '{site.name}' (its limits.max_walltime_min = "
                              f"{site.max_walltime_min}, less the {WALLTIME_MARGIN_MIN}-minute margin each job "
                              "asks for)", "does not fit the site's longest job")


def check_queue(run_id: str, layout: Layout, timeout_s: int, site: Site, config_file: str,
                where: str = "") -> None:
    """A run's job must fit one of the site's queues (nodes and walltime): refused at planning,
    blaming the node count where no queue takes that many nodes for any time, else timeout_s."""
    minutes = job_minutes(timeout_s)
    try:
        check_walltime(site, 1, layout.nodes)
    except LayoutError as exc:
        raise ConfigError(config_file, f"{where}.sweep.nodes" if where else "nodes", layout.nodes, exc.limit,
                          f"(run '{run_id}') is more nodes than any queue of site '{site.name}' "
                          f"({site.path or site.name}) admits, for any time") from None
    try:
        check_walltime(site, minutes, layout.nodes)
    except LayoutError as exc:
        raise ConfigError(config_file, "timeout_s", timeout_s, exc.limit,
                          f"makes run '{run_id}' a {minutes}-minute job on {layout.nodes} node(s), which no queue "
                          f"of site '{site.name}' ({site.path or site.name}) admits") from None


def queue_counts(runs: list[Run], site: Site) -> dict[str, int]:
    """How many runs each queue gets, each run a job of its own."""
    counts: dict[str, int] = {}
    for r in runs:
        queue = check_walltime(site, job_minutes(r.timeout_s), r.layout.nodes)
        counts[queue] = counts.get(queue, 0) + 1
    return counts


def _machine_sweep(sweep: dict, scale: str | None, site: Site, config_file: str, where: str) -> dict:
    """The sweep with its `nodes` as counts: a ladder, a scale band or fractions resolved by the
    site; an entry without nodes takes the config's `scale` band, if it names one."""
    spec = sweep.get("nodes", scale)
    if spec is None:
        return sweep
    try:
        return {**sweep, "nodes": node_counts(site, spec)}
    except LayoutError as exc:
        key = f"{where}.sweep.nodes" if "nodes" in sweep else "scale"
        raise ConfigError(config_file, key, spec, exc.limit, f"does not fit site '{site.name}' "
                          f"({site.path or site.name}: {exc.field} = {exc.value})") from None


def _one_gpu_per_rank(request: dict, site: Site) -> dict:
    """GPUs per rank derived for a campaign: fewer ranks than GPUs (and no gpus_per_rank or
    ranks_per_gpu asked) gives each rank one GPU, the rest idle, never several: a data-parallel
    rank drives one device, so Summit's 2 ranks must not each get 3 of the node's 6 V100s."""
    rpn = request.get("ranks_per_node")
    if not site.node.gpus or rpn is None or "gpus_per_rank" in request or "ranks_per_gpu" in request:
        return request
    if isinstance(rpn, str):
        try:
            rpn = ranks_per_node_of(site, rpn)  # per_socket on Summit: 2 ranks
        except LayoutError:
            return request  # refused by resolve_layout, naming the value
    if isinstance(rpn, bool) or not isinstance(rpn, int):
        return request
    return {**request, "gpus_per_rank": 1} if 0 < rpn < site.node.gpus else request


def check_campaign_size(config: dict, site: Site, config_file: str) -> None:
    """Refuse a campaign above `max_runs` before expanding it: a sweep's size is the product of its
    value counts, known without making a run (a 10-million-run typo would otherwise run for minutes
    and gigabytes before any message)."""
    limit = config.get("max_runs", 200_000)
    sizes = []
    for i, entry in enumerate(config["benchmarks"]):
        where = f"benchmarks[{i}]"
        sweep = _machine_sweep(entry.get("sweep") or {}, config.get("scale"), site, config_file, where)
        counts = [len(v) if isinstance(v, (list, tuple)) else 1 for v in sweep.values()]
        sizes.append((math.prod(counts) * config["repeats"], where, counts, entry.get("sweep") or {}))
    total = sum(size for size, *_ in sizes)
    if total > limit:
        size, where, counts, sweep = max(sizes, key=lambda s: s[0])
        product = " x ".join(str(c) for c in counts) or "1"
        if config["repeats"] > 1:
            product += f" x {config['repeats']} repeats"
        shown = ", ".join(f"{k}: {len(v) if isinstance(v, (list, tuple)) else 1} values" for k, v in sweep.items())
        raise ConfigError(config_file, f"{where}.sweep", shown or "(none)",
                          f"at most max_runs = {limit:,} runs in the whole campaign (raise `max_runs` on purpose, "
                          "or sweep fewer values)",
                          f"expands to {product} = {size:,} runs (the campaign: {total:,})")


def expand(config: dict, site: Site, config_file: str = "config/config.yaml") -> list[Run]:
    """Every run of the campaign, in config order; raises ConfigError/LayoutError early."""
    check_timeout(config, site, config_file)
    check_campaign_size(config, site, config_file)
    runs: list[Run] = []
    seen: dict[str, tuple[str, dict]] = {}
    for i, entry in enumerate(config["benchmarks"]):
        where = f"benchmarks[{i}]"
        cls = benchmarks.get(entry["name"], config_file, f"{where}.name")
        if cls.launcher_needs == "mpi" and not launchers.facts(site.launcher).mpi:
            raise ConfigError(site.path, "launcher", site.launcher,
                              f"an MPI launcher ({', '.join(launchers.names(mpi=True))}) for benchmark '{cls.name}'",
                              "cannot start an MPI workload")
        check_image_runs(site, cls.framework)  # an x86_64 or CUDA 13 image sent to POWER9 + V100 nodes stops here
        preset = entry.get("preset") or config["preset"]
        sweep = _machine_sweep(entry.get("sweep") or {}, config.get("scale"), site, config_file, where)
        fixed = entry.get("params") or {}
        for key in fixed:
            if key in LAYOUT_KEYS:
                raise ConfigError(config_file, f"{where}.params.{key}", fixed[key],
                                  f"layout keys go under {where}.sweep as a list", "is a layout key")
        # Check every swept value on its own, so the error names the key that is wrong.
        for key, values in sweep.items():
            if key not in LAYOUT_KEYS and key not in cls.param_fields():  # a sweep key is either kind
                raise ConfigError(config_file, f"{where}.sweep.{key}", values, _sweep_keys_help(key, cls),
                                  "is not a layout key or a parameter")
            if key not in LAYOUT_KEYS:
                for value in values:
                    cls.resolve_params(preset, {**fixed, key: value}, config_file, f"{where}.sweep")
        keys = list(sweep)
        for combo in itertools.product(*(sweep[k] for k in keys)):
            point = dict(zip(keys, combo))
            lay_req = _one_gpu_per_rank({k: point.pop(k) for k in LAYOUT_KEYS if k in point}, site)
            try:
                layout = resolve_layout(site, **lay_req)
            except LayoutError as exc:
                raise ConfigError(config_file, f"{where}.sweep", lay_req, exc.limit,
                                  f"does not fit site '{site.name}' ({exc.field} = {exc.value})") from None
            own = {**fixed, **point}
            resized = {}
            if config.get("preset_sizes"):  # a rehearsal: the preset's sizes over the campaign's
                sizes = cls.presets.get(preset, {})
                resized = {k: v for k, v in own.items() if k in sizes and v != sizes[k]}
                own.update(sizes)
            params = cls.resolve_params(preset, own, config_file, f"{where}.params")
            id_values = {k: getattr(params, k) for k in cls.id_params}
            swept = {k: v for k, v in point.items() if len(sweep[k]) > 1}
            for rep in range(1, config["repeats"] + 1):
                run_id = make_run_id(cls.name, entry.get("label"), preset, id_values, swept, layout,
                                     rep, config["repeats"])
                if run_id in seen and seen[run_id][0] == where:  # two values of this entry's sweep
                    raise ConfigError(config_file, f"{where}.sweep", sweep,
                                      "values whose run-id tokens differ (a run id keeps letters, digits, '.' and "
                                      "'-' of each value): change or drop one of them",
                                      f"gives run '{run_id}' for both {seen[run_id][1]} and { {**point, **lay_req} }")
                if run_id in seen:
                    raise ConfigError(config_file, where, entry["name"],
                                      f"distinct runs (also planned by {seen[run_id][0]}); give one entry a 'label'",
                                      f"plans run '{run_id}' twice")
                seen[run_id] = (where, {**point, **lay_req})
                if site.queues:
                    check_queue(run_id, layout, config["timeout_s"], site, config_file, where)
                runs.append(Run(run_id=run_id, benchmark=cls.name, suite=cls.suite, framework=cls.framework,
                                preset=preset, params=plain(params), layout=layout, swept=swept, repeat=rep,
                                campaign=config["campaign"], timeout_s=config["timeout_s"],
                                workload=cls.workload(params), resized=resized))
    return runs


def plan_table(runs: list[Run]):
    """The plan as rows (for plan.csv and `exabench plan`)."""
    rows = []
    for r in runs:
        row = {"run_id": r.run_id, "benchmark": r.benchmark, "suite": r.suite, "framework": r.framework,
               "preset": r.preset, **{k: v for k, v in r.layout.to_dict().items()}, "repeat": r.repeat}
        row.update({f"param.{k}": v for k, v in r.swept.items()})
        rows.append(row)
    return rows


def node_hours(run: Run, site: Site) -> float:
    """Node-hours a run's own job asks for: its nodes for the walltime its header asks
    (allocation.asked_minutes: timeout_s plus the margin, at least the queue's shortest)."""
    return run.layout.nodes * allocation.asked_minutes(site, run.layout.nodes, [run.timeout_s]) / 60


def plan_overview(runs: list[Run], site: Site) -> list[dict]:
    """The plan as a readable table (`exabench plan`): each run's layout, walltime, queue and node-hours."""
    rows = []
    for r in runs:
        lay = r.layout
        minutes = allocation.asked_minutes(site, lay.nodes, [r.timeout_s])
        rows.append({"run": r.run_id, "nodes": lay.nodes, "ranks/node": lay.ranks_per_node,
                     "threads/rank": lay.threads_per_rank, "gpus/rank": lay.gpus_per_rank, "smt": lay.smt,
                     "walltime_min": minutes, "queue": check_walltime(site, minutes, lay.nodes) or "-",
                     "node-hours": round(lay.nodes * minutes / 60, 2)})
    return rows
