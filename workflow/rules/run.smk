# Execute each rendered job script; a record exists afterwards whatever happened.
# With a cluster executor plugin (slurm, lsf) each run is one job whose resources come from
# the plan and the site (get_job_resources); the rule's shell then runs the rendered launch
# line (srun/jsrun ...) inside that allocation. With no scheduler the dict is empty.
from exabench.launch import walltime_min
from exabench.launchers import srun as srun_arith


def get_job_resources():
    if SITE.scheduler not in ("slurm", "lsf"):
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
        return f"--gpus-per-node={gpus}" if gpus and SITE.scheduler_options.get("request_gpus") else ""

    def cpus_per_task(wildcards):
        return srun_arith.cpus_per_task(SITE, lay(wildcards))

    def runtime(wildcards):
        return walltime_min(SITE, get_run(wildcards).timeout_s)

    def mpi(wildcards):
        # The rule's own shell starts the ranks with the site's launcher: the plugin's documented
        # `mpi` resource keeps its job step from wrapping the rule in another srun. The plugin
        # refuses `mpi` with one task, so one-rank runs go without it (srun.py adds --overlap).
        return SITE.launcher if lay(wildcards).ranks > 1 else ""

    res = {
        "nodes": lambda wildcards: lay(wildcards).nodes,
        "tasks": tasks,
        "tasks_per_node": tasks_per_node,
        "cpus_per_task": cpus_per_task,
        "runtime": runtime,
        "mpi": mpi,
    }
    if SITE.node.memory_gb:
        res["mem_mb"] = int(SITE.node.memory_gb * 1000 * 0.9)
    if SITE.scheduler == "slurm":
        if SITE.partition:
            res["slurm_partition"] = SITE.partition
        if SITE.account:
            res["slurm_account"] = SITE.account
        if SITE.qos:
            res["qos"] = SITE.qos
        if SITE.constraint:
            res["constraint"] = SITE.constraint
        if SITE.scheduler_options.get("request_gpus"):
            res["slurm_extra"] = slurm_extra
    else:
        if SITE.partition:
            res["lsf_queue"] = SITE.partition
        if SITE.account:
            res["lsf_project"] = SITE.account
    return res


rule run_benchmark:
    input:
        script=f"{RESULTS}/runs/{{run_id}}/job.sh",
        spec=f"{RESULTS}/runs/{{run_id}}/spec.json",
    output:
        record=f"{RESULTS}/records/{{run_id}}.json",
    log:
        f"{LOGS}/runs/{{run_id}}.log",
    threads: get_run_threads
    resources:
        **get_job_resources(),
    shell:
        "{EXABENCH} execute --spec {input.spec} > {log} 2>&1 && tail -n 1 {log}"
