"""Per-job resources for Snakemake's cluster executor plugins (slurm, lsf), from the plan and the site.

With a plugin each run is one job; the rule then runs the rendered launch line (srun, jsrun...)
inside that allocation. With no scheduler the dict is empty."""

from __future__ import annotations

from .launch import walltime_min
from .launchers import srun as srun_arith


def job_resources(site, get_run) -> dict:
    """Snakemake `resources` of a run job for the executor plugins (callables of wildcards)."""
    if site.scheduler not in ("slurm", "lsf"):
        return {}

    def lay(wildcards):
        return get_run(wildcards).layout

    # Whole nodes, evenly: ranks per node where there are several (the plugin then asks for
    # --ntasks-per-node), else the total (one per node). The plugin takes one or the other.
    def tasks(wildcards):
        layout = lay(wildcards)
        return layout.ranks if layout.ranks_per_node == 1 else 0

    def tasks_per_node(wildcards):
        layout = lay(wildcards)
        return layout.ranks_per_node if layout.ranks_per_node > 1 else 0

    def slurm_extra(wildcards):
        # GPUs where the site makes them a requested resource (Perlmutter); the plugin's own
        # `gpu` resource would add --ntasks-per-gpu in some versions (PLATFORM.md).
        gpus = lay(wildcards).gpus_per_node
        return f"--gpus-per-node={gpus}" if gpus and site.scheduler_options.get("request_gpus") else ""

    def cpus_per_task(wildcards):
        return srun_arith.cpus_per_task(site, lay(wildcards))

    def runtime(wildcards):
        return walltime_min(site, get_run(wildcards).timeout_s)

    def mpi(wildcards):
        # The rule's own shell starts the ranks with the site's launcher: the plugin's documented
        # `mpi` resource keeps its job step from wrapping the rule in another srun. The plugin
        # refuses `mpi` with one task, so one-rank runs go without it (srun.py adds --overlap).
        return site.launcher if lay(wildcards).ranks > 1 else ""

    res = {
        "nodes": lambda wildcards: lay(wildcards).nodes,
        "tasks": tasks,
        "tasks_per_node": tasks_per_node,
        "cpus_per_task": cpus_per_task,
        "runtime": runtime,
        "mpi": mpi,
    }
    if site.node.memory_gb:
        res["mem_mb"] = int(site.node.memory_gb * 1000 * 0.9)
    if site.scheduler == "slurm":
        if site.partition:
            res["slurm_partition"] = site.partition
        if site.account:
            res["slurm_account"] = site.account
        if site.qos:
            res["qos"] = site.qos
        if site.constraint:
            res["constraint"] = site.constraint
        if site.scheduler_options.get("request_gpus"):
            res["slurm_extra"] = slurm_extra
    else:
        if site.partition:
            res["lsf_queue"] = site.partition
        if site.account:
            res["lsf_project"] = site.account
    return res
