"""srun (Slurm): Frontier, Perlmutter, Cori KNL, the loopback slurm-local.

`--cpus-per-task` counts Slurm CPUs, which are hardware threads on sites that expose
them (NERSC: 2 per core on Perlmutter, 4 on Cori KNL), cores elsewhere (Frontier, where
`-c 7` is seven cores): node.scheduler_cpus_per_core says which. Ranks are bound to cores
(`--cpu-bind=cores`), or to hardware threads when the layout uses SMT. A rank that owns
GPUs gets `--gpus-per-task` and `--gpu-bind` (Slurm then sets CUDA/ROCR_VISIBLE_DEVICES);
ranks sharing GPUs get the node's GPUs with `--gpus-per-node` and no per-task binding.

Sources: OLCF Frontier User Guide, "Running Jobs" / "srun" (docs.olcf.ornl.gov/systems/
frontier_user_guide.html: `srun -N2 -n16 -c7 --gpus-per-task=1 --gpu-bind=closest`);
NERSC "Process and Thread Affinity" (docs.nersc.gov/jobs/affinity/: `-c` as
2*floor(64/tasks) on Perlmutter, 4*floor(68/tasks) on Cori KNL, `--cpu-bind=cores`);
Slurm srun man page.
"""

from __future__ import annotations

from exabench.campaign.site import Layout, Site


def cpus_per_task(site: Site, layout: Layout) -> int:
    return layout.cores_per_rank * site.node.scheduler_cpus_per_core


def flags(site: Site, layout: Layout) -> list[str]:
    out = [f"--nodes={layout.nodes}", f"--ntasks={layout.ranks}", f"--ntasks-per-node={layout.ranks_per_node}",
           f"--cpus-per-task={cpus_per_task(site, layout)}",
           f"--cpu-bind={'threads' if layout.smt > 1 else 'cores'}"]
    if layout.gpus_per_rank:
        out.append(f"--gpus-per-task={layout.gpus_per_rank}")
        gpu_bind = site.launcher_options.get("gpu_bind", "closest")
        if gpu_bind:
            out.append(f"--gpu-bind={gpu_bind}")
    elif layout.ranks_per_gpu > 1:
        out.append(f"--gpus-per-node={layout.gpus_per_node}")
    if layout.ranks == 1:
        # A one-task run under snakemake-executor-plugin-slurm is started inside the plugin's own
        # `srun -n1` step (it refuses `mpi` jobs of one task): without --overlap this nested step
        # would wait for CPUs that step holds. Harmless in a plain batch script.
        out.append("--overlap")
    mpi = site.launcher_options.get("srun_mpi", "")
    if mpi:
        out.append(f"--mpi={mpi}")
    return out


def argv(site: Site, layout: Layout, program: list[str]) -> list[str]:
    return ["srun", *flags(site, layout), *program]
