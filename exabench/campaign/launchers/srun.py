"""srun (Slurm): Frontier, Perlmutter, Cori KNL, the loopback slurm-local.

`--cpus-per-task` counts Slurm CPUs. NERSC's Slurm counts every hardware thread as a CPU
(2 per core on Perlmutter, 4 on Cori KNL: node.scheduler_cpus_per_core), so `-c` is always
cores x that, whatever SMT the run uses. Frontier's counts one per core by default
(`--threads-per-core=1`): a run using both hardware threads of its cores must ask for
`--threads-per-core=2`, in the job's header and in the step, and `-c` then counts hardware
threads (7 cores at SMT2 is `-c 14`). Ranks are bound with the site's documented
`--cpu-bind` (launcher_options.cpu_bind: NERSC `cores`, OLCF `threads`). A rank that owns GPUs
gets `--gpus-per-task` and `--gpu-bind` (Slurm then sets CUDA/ROCR_VISIBLE_DEVICES); ranks
sharing GPUs get `--ntasks-per-gpu` (and no `--ntasks-per-node`, which Slurm refuses beside
it: the ranks spread evenly over `--nodes`); one set per node (every rank sees the node's GPUs) gets
`--gpus-per-node`.

Sources: OLCF Frontier User Guide, "Srun" and "Multithreading" (docs.olcf.ornl.gov/systems/
frontier_user_guide.html: `srun -N2 -n16 -c7 --gpus-per-task=1 --gpu-bind=closest`;
`--threads-per-core=2` in salloc/sbatch and -c as logical cores; `--ntasks-per-gpu=2`);
NERSC "Process and Thread Affinity" (docs.nersc.gov/jobs/affinity/) and "Running jobs on
Perlmutter's GPU nodes" (`-c` as 2*floor(64/tasks), `--cpu-bind=cores`); Slurm srun man page.
"""

from __future__ import annotations

from exabench.errors import LayoutError
from exabench.campaign.launchers.facts import LauncherFacts
from exabench.campaign.site import Layout, Site

FACTS = LauncherFacts(name="srun", schedulers=("slurm",), mpi=True, rank_sets=True, binds_gpus=True,
                      smt="--threads-per-core, -c in hardware threads",
                      on_nodes="--nodes=N --nodelist=a,b (srun(1))",
                      node_step="srun --nodes=N --ntasks-per-node=1 --overlap (srun(1); a step started "
                                "from inside another: Slurm job steps)")


def node_step() -> str:
    """One task per node over the job's nodes ($count of them, $nodelist), as node-health checks
    run (Slurm srun(1): --ntasks-per-node=1). Each task's `srun --nodes=1 --nodelist=<its node>`
    is a step of the same job started from a compute node (srun works anywhere inside the
    allocation: it reads SLURM_JOB_ID); `--overlap` lets that step share the node's CPUs and memory
    with this one ("allows steps to share all resources ... with all other steps", srun(1)), and
    `--kill-on-bad-exit=0` keeps a failing node from stopping the others."""
    return ('srun --nodes="$count" --ntasks="$count" --ntasks-per-node=1 --nodelist="$nodelist" '
            "--overlap --cpu-bind=none --kill-on-bad-exit=0")


# srun(1)'s short options that take a value (`-n 4`): the word after one is not yet the program.
_SHORT_WITH_VALUE = set("AbcCDdeGiJLmMnNopqrSTtWwx")
# The options on_nodes sets, in every spelling srun takes; the line's own are dropped (each once).
_PINNED = {"--nodes": "-N", "--nodelist": "-w"}


def on_nodes(argv: list[str], nodes: tuple[str, ...], ranks_per_node: int) -> list[str]:
    """Slurm srun(1): `--nodelist` the named nodes, `--nodes` as many, in place of the line's own
    node count or list (srun's options end at the program's first word; those after are its own),
    and `--kill-on-bad-exit=1`: a rank that fails ends the step ("terminate a job if any task exits
    with a non-zero exit code", srun(1)), so its partner in an acceptance pair does not wait out the
    run's time limit for it. (This is the node-pinned line of acceptance runs only.)"""
    kept, i = [], 1
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        name, eq, _ = word.partition("=")
        takes_next = not eq and len(word) == 2 and word[1] in _SHORT_WITH_VALUE
        if name == "--kill-on-bad-exit" or word == "-K" or word.startswith("-K") and word[2:].isdigit():
            i += 1  # set below; srun's optional value is always in the same word (-K1, --kill-on-bad-exit=0)
            continue
        if name in _PINNED or word[:2] in _PINNED.values():
            i += 2 if word in _PINNED.values() or (name in _PINNED and not eq) else 1
            continue
        kept += argv[i:i + 2] if takes_next else [word]
        i += 2 if takes_next else 1
    return [argv[0], f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}", "--kill-on-bad-exit=1", *kept,
            *argv[i:]]


def threads_per_core(site: Site, layout: Layout) -> int:
    """`--threads-per-core` the job and step must ask for (0: Slurm's default already exposes them)."""
    return layout.smt if layout.smt > site.node.scheduler_cpus_per_core else 0


def cpus_per_task(site: Site, layout: Layout) -> int:
    """`-c`: the rank's cores in Slurm CPUs (hardware threads where Slurm counts them)."""
    return layout.cores_per_rank * max(site.node.scheduler_cpus_per_core, layout.smt)


def shares_gpus(layout: Layout) -> bool:
    """Ranks sharing GPUs are placed with --ntasks-per-gpu, which Slurm refuses beside
    --ntasks-per-node (srun(1)): the job and the step then give only --nodes and --ntasks."""
    return layout.ranks_per_gpu > 1 and not layout.ranks_per_set


def flags(site: Site, layout: Layout) -> list[str]:
    per_node = [] if shares_gpus(layout) else [f"--ntasks-per-node={layout.ranks_per_node}"]
    out = [f"--nodes={layout.nodes}", f"--ntasks={layout.ranks}", *per_node,
           f"--cpus-per-task={cpus_per_task(site, layout)}"]
    if threads_per_core(site, layout):
        out.append(f"--threads-per-core={threads_per_core(site, layout)}")
    out.append(f"--cpu-bind={site.launcher_options.get('cpu_bind') or 'cores'}")
    gpu_bind = site.launcher_options.get("gpu_bind", "closest")
    if layout.ranks_per_set:
        if layout.ranks_per_set != layout.ranks_per_node:
            raise LayoutError(site.name, "ranks_per_set", layout.ranks_per_set,
                              f"ranks_per_node = {layout.ranks_per_node} with srun (every rank of a node sees its "
                              "GPUs); smaller sets need jsrun")
        out.append(f"--gpus-per-node={layout.gpus_per_node}")
    elif layout.gpus_per_rank:
        out.append(f"--gpus-per-task={layout.gpus_per_rank}")
        if gpu_bind:
            out.append(f"--gpu-bind={gpu_bind}")
    elif shares_gpus(layout):
        out.append(f"--ntasks-per-gpu={layout.ranks_per_gpu}")
        if gpu_bind:
            out.append(f"--gpu-bind={gpu_bind}")
    if layout.ranks == 1:
        # A one-task run under snakemake-executor-plugin-slurm is started inside the plugin's own
        # `srun -n1` step (it refuses `mpi` jobs of one task): without --overlap this nested step
        # would wait for CPUs that step holds. Harmless in a plain batch script.
        out.append("--overlap")
    mpi = site.launcher_options.get("srun_mpi", "")
    if mpi:
        out.append(f"--mpi={mpi}")
    return out


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    return ["srun", *flags(site, layout), *program]
