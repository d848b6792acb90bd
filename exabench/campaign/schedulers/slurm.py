"""Slurm: Frontier, Perlmutter, Cori KNL, Stampede2, DGX SuperPOD, the loopback slurm-local and
slurm-cluster.

- Submit: `sbatch script` reads the script's #SBATCH lines (Slurm sbatch(1)).
- Queue: `--partition=Q`, or `--qos=Q` where the site's queues are QOS (NERSC:
  scheduler_options.queue_directive: qos; "Queues and QOS", docs.nersc.gov/jobs/policy/).
- Pinning: `#SBATCH --nodelist=a,b` (sbatch(1), "-w, --nodelist": "Request a specific list of
  hosts"; https://slurm.schedmd.com/sbatch.html#OPT_nodelist).
- Node list: `scontrol show hostnames "$SLURM_JOB_NODELIST"`, one name per line in the allocation's
  order (scontrol(1), "show hostnames"; sbatch(1) OUTPUT ENVIRONMENT VARIABLES).
- The user's jobs in a queue: `squeue -h -u USER -p Q` (or `-q Q` for a QOS), one line per job (squeue(1));
  without -p, the user's pending and running jobs in every partition (squeue's default states).
- Held until others end: `sbatch --dependency=afterany:ID:ID` ("This job can begin execution after the
  specified jobs have terminated"; https://slurm.schedmd.com/sbatch.html#OPT_afterany).
- Allocation-wide settings: `--threads-per-core` where a run asks more hardware threads than Slurm
  gives by default (launchers.srun.threads_per_core), `--gpus-per-node` where the site makes GPUs a
  requested resource (scheduler_options.request_gpus: Perlmutter), `-C nvme` for NVMe staging
  (Frontier), `--core-spec`, `--cpu-freq`, `--exclusive`, `--mem` (90 % of a node: allocation.memory_mb).
- Executor: snakemake-executor-plugin-slurm, whose resources are slurm_partition, slurm_account,
  qos, constraint and slurm_extra (the options it has no resource for), besides nodes, tasks,
  cpus_per_task, mem_mb and runtime (its documentation, "Advanced resource specifications").
"""

from __future__ import annotations

from exabench.campaign.launchers import srun
from exabench.campaign.schedulers.facts import SchedulerFacts

FACTS = SchedulerFacts(
    name="slurm", submit="sbatch", directive="#SBATCH",
    queue="--partition=Q, or --qos=Q where scheduler_options.queue_directive is qos",
    node_list='scontrol show hostnames "$SLURM_JOB_NODELIST"',
    queued_by_user='squeue -h -u "$me" {queue_option} "$1" -o %i 2>/dev/null',
    pin="--nodelist=a,b (https://slurm.schedmd.com/sbatch.html#OPT_nodelist)",
    after=('--dependency=afterany:"$cond"', "%s", ":"), unfinished_by_user='squeue -h -u "$me" -o %i',
    renders=frozenset({"core_spec", "cpu_freq", "exclusive", "request_gpus", "request_memory", "queue_directive",
                       "slot_license"}), asks_memory=True, executor="slurm")


def queue_key(site) -> str:
    return "qos" if site.scheduler_options.get("queue_directive") == "qos" else "partition"


def queue_option(site) -> str:
    """squeue's option selecting one queue: -p (partition) or -q (QOS)."""
    return "-q" if queue_key(site) == "qos" else "-p"


def request(site, layout, node_local: str) -> dict:
    constraint = site.constraint
    if node_local == "nvme" and "nvme" not in constraint.split("&"):
        constraint = "&".join(c for c in (constraint, "nvme") if c)  # Frontier: -C nvme
    return {"smt": srun.threads_per_core(site, layout), "constraint": constraint,
            "gpus_per_node": layout.gpus_per_node if site.scheduler_options.get("request_gpus") else 0}


def pinned(request: dict, site, nodes: tuple[str, ...]) -> dict:
    return {**request, "extra": [*request["extra"], f"--nodelist={','.join(nodes)}"]}


def flags(req) -> list[str]:
    """The sbatch options of an AllocationRequest beyond nodes, tasks, queue, account, QoS and
    constraint (the executor's slurm_extra; the header template writes the same values one per line)."""
    out = [f"--gpus-per-node={req.gpus_per_node}"] if req.gpus_per_node else []
    out += [f"--threads-per-core={req.smt}"] if req.smt else []
    out += [f"--core-spec={req.core_spec}"] if req.core_spec else []
    out += [f"--cpu-freq={req.cpu_freq}"] if req.cpu_freq else []
    out += ["--exclusive"] if req.exclusive else []
    return out


def site_resources(site) -> dict:
    """Where any job of the site is charged and queued: partition, account, QoS, constraint."""
    return {key: value for key, value in (("slurm_partition", site.partition), ("slurm_account", site.account),
                                          ("qos", site.qos), ("constraint", site.constraint)) if value}


def executor_resources(site, job) -> dict:
    """The plugin's resources of a run job beyond the common ones (pipeline.job_resources), each read
    from the run's JobAllocation (`job(wildcards)`), the one its header is rendered from."""
    # The allocation-wide settings as the header says them: GPUs where the site makes them a requested
    # resource (the plugin's own `gpu` resource would add --ntasks-per-gpu in some versions,
    # PLATFORM.md), SMT beyond Slurm's default, core specialisation, CPU frequency, exclusive nodes.
    res = {"slurm_extra": lambda wildcards: " ".join(flags(job(wildcards).request))}
    if site.queues:  # each run's own queue, picked by its nodes and walltime (site.pick_queue)
        res["qos" if queue_key(site) == "qos" else "slurm_partition"] = lambda wildcards: job(wildcards).queue
    if site.constraint or site.storage.get("node_local_kind") == "nvme" and site.storage.get("stage_in_from"):
        res["constraint"] = lambda wildcards: job(wildcards).request.constraint  # NVMe staging adds nvme
    return res
