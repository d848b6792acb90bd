"""mpiexec for PBS Pro with Cray PALS/MPICH: Polaris.

`-n` ranks, `--ppn` ranks per node, `--depth` CPUs per rank and `--cpu-bind depth`.
mpiexec does not set device visibility: ALCF's set_affinity_gpu_polaris.sh exports
CUDA_VISIBLE_DEVICES from the local rank; with launcher_options.gpu_affinity_wrapper the
same is done inline (exabench.campaign.launchers.mpirun.gpu_affinity_wrapper).

Source: ALCF Polaris "Running Jobs" (docs.alcf.anl.gov/polaris/running-jobs/:
`mpiexec -n ${NTOTRANKS} --ppn ${NRANKS_PER_NODE} --depth=${NDEPTH} --cpu-bind depth
--env OMP_NUM_THREADS=${NTHREADS} ./set_affinity_gpu_polaris.sh ./hello_affinity`).
"""

from __future__ import annotations

from exabench.campaign.site import Layout, Site
from exabench.campaign.launchers.mpirun import gpu_affinity_wrapper


def argv(site: Site, layout: Layout, program: list[str]) -> list[str]:
    depth = layout.cores_per_rank * layout.smt
    out = ["mpiexec", "-n", str(layout.ranks), "--ppn", str(layout.ranks_per_node), f"--depth={depth}",
           "--cpu-bind", "depth", "--env", f"OMP_NUM_THREADS={layout.threads_per_rank}"]
    return out + gpu_affinity_wrapper(site, layout, "PMI_LOCAL_RANK") + program
