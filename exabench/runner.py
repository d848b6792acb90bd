"""The one entry point every launcher starts, once per rank:

    python -m exabench.runner --spec results/<site>/runs/<run_id>/spec.json

Each rank runs the benchmark; rank 0 alone writes the result record (with --node-world, one
launch across every node: each node's rank 0 its node's record, see node_world). A rank that
raises writes its error to runs/<run_id>/errors/rank<N>.txt and exits non-zero,
so the launcher stops the others and `exabench execute` records the failure.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from exabench import benchmarks, energy, stacks
from exabench.benchmarks.base import Metric, Outcome
from exabench.energy.summary import energy_metrics, summarise
from exabench.errors import ExabenchError, NotRunnableHere
from exabench.training.distributed import Collectives, World, detect_world, set_run_timeout
from exabench.records.record import base_record, error_dir, headline_metric, now_iso, provenance, write_record

# Where set, the most intra-op threads a rank starts (the record's environment shows it).
MAX_THREADS_ENV = "EXABENCH_MAX_THREADS"

# How long rank 0 waits for the other ranks' energy readings (plain srun/torchrun: files in the run
# directory) before it writes the record without them, naming the ranks that are missing.
ENERGY_WAIT_S = 60.0


@dataclass
class Context:
    """What a benchmark may know about where it runs."""

    spec: dict
    world: World
    run_dir: Path
    _collectives: Collectives | None = field(default=None, repr=False)

    @property
    def layout(self) -> dict:
        return self.spec["layout"]

    @property
    def threads(self) -> int:
        """The rank's intra-op threads: the layout's, or fewer where EXABENCH_MAX_THREADS caps them (a
        rehearsal of a 64-core node on a 2-core machine: 64 threads a rank there would crawl here)."""
        planned = int(self.layout["threads_per_rank"])
        cap = os.environ.get(MAX_THREADS_ENV, "")
        return min(planned, int(cap)) if cap.isdigit() and int(cap) > 0 else planned

    @property
    def collectives(self) -> Collectives:
        if self._collectives is None:
            self._collectives = Collectives(self.world)
        return self._collectives


def _write_host(ctx: Context) -> Path | None:
    """Each rank names its host in the run directory before the benchmark starts; see _hosts."""
    if ctx.world.size == 1 or ctx.world.mpi:
        return None
    folder = ctx.run_dir / "hosts"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank{ctx.world.rank}"
    path.write_text(socket.gethostname())
    return path


def _hosts(ctx: Context, host_file: Path | None) -> list[str]:
    """Every rank's host. Over MPI a collective; otherwise (torchrun, plain srun) the benchmark has
    shut its torch.distributed group down by now, so rank 0 reads the files each rank wrote before
    the benchmark started: every rank got that far before the group it joined could form."""
    if host_file is None:
        return ctx.collectives.allgather(socket.gethostname())
    if ctx.world.rank != 0:
        return []
    folder = host_file.parent
    return [(folder / f"rank{r}").read_text() for r in range(ctx.world.size)]


def run(spec: dict, world: World | None = None) -> dict | None:
    """Run the benchmark on this rank; returns the record on rank 0."""
    world = world or detect_world()
    set_run_timeout(spec.get("timeout_s"))  # the collectives give up at the run's limit, not a fixed 600 s
    ctx = Context(spec=spec, world=world, run_dir=Path(spec["paths"]["run_dir"]))
    start = now_iso()
    cls = benchmarks.get(spec["benchmark"])
    params = cls.Params(**spec["params"])
    host_file = _write_host(ctx)
    meter = energy.open_meter(world.local_rank)
    energy.activate(meter)  # the benchmark's timed_region() reports to it
    meter.begin("run")
    try:
        outcome = cls().run(params, ctx)
    except NotRunnableHere as exc:  # every rank checks its own device and stops here alike
        outcome = Outcome(metrics={}, skipped=str(exc))
    finally:
        meter.end("run")
        energy.deactivate()
        meter.close()
    end = now_iso()
    hosts = _hosts(ctx, host_file)
    reports, missing = _energy_reports(ctx, meter.report(world.rank), host_file)
    if world.rank != 0:
        return None
    failed = outcome.failed_checks
    record = base_record(spec)
    record.update({
        "status": "skipped" if outcome.skipped else "failed" if failed else "ok",
        "error": outcome.skipped or "; ".join(f"sanity check '{c.name}' failed: {c.detail}" for c in failed) or None,
        "metrics": {name: m.to_dict() for name, m in outcome.metrics.items()},
        "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in outcome.checks],
        "info": outcome.info,
        "provenance": provenance(start, end, hosts, env_names=tuple(spec.get("env", {}))),
    })
    _add_energy(record, reports, missing, hosts)
    return record


def _energy_reports(ctx: Context, report: dict, host_file: Path | None) -> tuple[list[dict], list[int]]:
    """Every rank's energy readings on rank 0 (others get []), and the ranks whose readings did not
    come. Over MPI a collective; otherwise (no process group left, see _hosts) each rank writes its
    readings beside its host file and rank 0 waits up to ENERGY_WAIT_S for them."""
    if ctx.world.size == 1:
        return [report], []
    if host_file is None:
        return ctx.collectives.allgather(report), []
    folder = ctx.run_dir / "energy"
    folder.mkdir(parents=True, exist_ok=True)
    mine = folder / f"rank{ctx.world.rank}.json"
    tmp = mine.with_suffix(".tmp")
    tmp.write_text(json.dumps(report))
    tmp.replace(mine)  # whole or absent: rank 0 never reads half a file
    if ctx.world.rank != 0:
        return [], []
    deadline = time.monotonic() + ENERGY_WAIT_S
    paths = [folder / f"rank{r}.json" for r in range(ctx.world.size)]
    while not all(p.exists() for p in paths) and time.monotonic() < deadline:
        time.sleep(0.2)
    return ([json.loads(p.read_text()) for p in paths if p.exists()],
            [r for r, p in enumerate(paths) if not p.exists()])


def _add_energy(record: dict, reports: list[dict], missing: list[int], hosts: list[str]) -> None:
    """The record's `energy` section, and its measured figures as metrics (energy, power, the
    headline per joule)."""
    section = summarise(reports, hosts)
    if missing:
        section["ranks_missing"] = missing
    record["energy"] = section
    for name, m in energy_metrics(section, record["metrics"], headline_metric(record)).items():
        record["metrics"][name] = Metric(m["value"], m["unit"], m["samples"], higher_is_better=m["higher_is_better"],
                                         description=m["description"]).to_dict()


def node_world(run_spec: str | Path) -> tuple[dict, World, dict]:
    """This rank's part of a launch across every node of an allocation (the every-node job under an
    MPI launcher: exabench.campaign.node_sweep): its node's prepared spec of the run, and the world
    of its node's ranks alone, split from MPI_COMM_WORLD by node name, so that each node runs the
    run by itself as its own job would. The third value is what its record says of the launch
    (provenance.node_world); the spec's launch line says which run's line was widened to every node."""
    from mpi4py import MPI

    from exabench.campaign.node_agent import node_spec_path, this_node
    from exabench.training.distributed import use_node_world
    path = node_spec_path(run_spec, this_node())
    node, comm = path.parent.name, MPI.COMM_WORLD
    nodes = sorted(set(comm.allgather(node)))
    world = use_node_world(comm.Split(nodes.index(node), key=comm.Get_rank()))
    spec = json.loads(path.read_text())
    run_line = json.loads(Path(run_spec).read_text())["launch_line"]
    spec["launch_line"] = f"one launch across every node (node worlds), each node running: {run_line}"
    return spec, world, {"node": node, "ranks": world.size, "launch_ranks": comm.Get_size(), "launch_nodes": len(nodes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exabench.runner", description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="the run's spec.json (written by the render rule)")
    ap.add_argument("--node-world", action="store_true",
                    help="one launch across every node: run this node's prepared spec of the run with this "
                         "node's ranks (exabench node-prepare wrote it)")
    args = ap.parse_args(argv)
    if args.node_world:
        try:
            spec, world, launch = node_world(args.spec)
        except ExabenchError as exc:  # no spec for this node: the whole launch stops (node-collect says so)
            print(f"{socket.gethostname()}: {exc}", file=sys.stderr, flush=True)
            os._exit(1)
    else:
        spec, world, launch = json.loads(Path(args.spec).read_text()), detect_world(), None
    stacks.arm(error_dir(Path(spec["paths"]["run_dir"])), world.rank)  # where this rank was, if the run hangs
    if launch:  # which of its node's ranks the launch stopped, and which died without a word
        stacks.mark_stops(error_dir(Path(spec["paths"]["run_dir"])), world.rank)
    try:
        record = run(spec, world)
        if record is not None:
            if launch:
                record["provenance"]["node_world"] = launch
            write_record(record, spec["paths"]["record"], spec["paths"]["archive_dir"])
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the record
        errors = error_dir(Path(spec["paths"]["run_dir"]))
        errors.mkdir(parents=True, exist_ok=True)
        summary = f"rank {world.rank} on {socket.gethostname()}: {type(exc).__name__}: {exc}"
        (errors / f"rank{world.rank}.txt").write_text(summary + "\n\n" + traceback.format_exc())
        print(summary, file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)  # skip atexit/destructors that could hang waiting for peers
    return 0


if __name__ == "__main__":
    sys.exit(main())
