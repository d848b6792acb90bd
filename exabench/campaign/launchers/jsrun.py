"""jsrun (IBM Job Step Manager, LSF/CSM): Summit, Summitdev.

Resource sets (RS) hold whole cores and GPUs of one node; every RS of a jsrun is alike.
The layout's sets (Layout.set_size ranks, Layout.gpus_per_set GPUs) are the RS:
- A rank that owns GPUs: one RS per rank, `-a 1 -c cores -g gpus`, `-r` RS per node.
- Ranks sharing a GPU (ranks_per_gpu k): one RS per GPU holding its k ranks
  (`-a k -g 1 -c k*cores`); needs `-alloc_flags gpumps` (MPS) in the header
  (exabench.campaign.allocation asks for it).
- ranks_per_set k: one RS per k ranks pooling their cores and GPUs (`-a 6 -c 42 -g 6 -r 1`:
  one RS per Summit node, each rank seeing the node's 6 GPUs).
- CPU-only: one RS per rank with `-g 0`.
`-d packed` places the ranks of an RS in order.
`-b packed:N` binds each rank to N cores; with SMT>1 its threads use the cores' hardware
threads (`-alloc_flags smtN` in the header). jsrun sets CUDA_VISIBLE_DEVICES per RS.

Sources: OLCF Summit User Guide, "Job Launcher (jsrun)" (docs.olcf.ornl.gov/systems/
summit_user_guide.html#job-launcher-jsrun); OLCF jsrun quick start guide
(github.com/olcf-tutorials/jsrun_quick_start_guide); OLCF batch script examples
(github.com/olcf-tutorials/Batch-Script-Examples: -n12 -r6 -c7 -g1 -a1 -bpacked:7).
"""

from __future__ import annotations

from dataclasses import dataclass

from exabench.campaign.launchers.facts import LauncherFacts
from exabench.campaign.site import Layout, Site

FACTS = LauncherFacts(name="jsrun", schedulers=("lsf",), mpi=True, rank_sets=True, binds_gpus=True,
                      smt="-bpacked:N with -alloc_flags smtN in the header")


@dataclass(frozen=True)
class ResourceSet:
    count: int        # -n, over all nodes
    per_node: int     # -r
    tasks: int        # -a
    cores: int        # -c
    gpus: int         # -g
    bind_cores: int   # -b packed:N

    def flags(self) -> list[str]:
        out = [f"--nrs={self.count}", f"--rs_per_host={self.per_node}", f"--tasks_per_rs={self.tasks}",
               f"--cpu_per_rs={self.cores}", f"--gpu_per_rs={self.gpus}", f"--bind=packed:{self.bind_cores}"]
        if self.tasks > 1:
            out.append("--launch_distribution=packed")
        return out

    def short_flags(self) -> list[str]:
        out = [f"-n{self.count}", f"-r{self.per_node}", f"-a{self.tasks}", f"-c{self.cores}", f"-g{self.gpus}",
               f"-bpacked:{self.bind_cores}"]
        if self.tasks > 1:
            out.append("-dpacked")
        return out


def resource_set(layout: Layout) -> ResourceSet:
    k = layout.set_size
    per_node = layout.ranks_per_node // k
    return ResourceSet(per_node * layout.nodes, per_node, k, k * layout.cores_per_rank, layout.gpus_per_set,
                       layout.cores_per_rank)


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    out = ["jsrun", *resource_set(layout).short_flags()]
    smpiargs = site.launcher_options.get("smpiargs", "")
    if smpiargs:
        out.append(f"--smpiargs={smpiargs}")
    return out + program
