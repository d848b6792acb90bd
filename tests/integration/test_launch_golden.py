"""Golden launch lines: for each site profile, the layouts its centre's user guide documents
(the pages the site file cites), with the exact line exabench renders and a check that it asks
for what the document's line asks for. Each test names the document and section. Where
exabench's line spells an option another way or adds one, `same_request` says which and why;
where it differs on purpose, the test says so and checks what both lines have in common."""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess

import pytest

from exabench.errors import ExabenchError, LayoutError
from exabench.campaign.launchers import jsrun, launch_argv, mpiexec, place, srun, usable_node
from exabench.campaign import allocation
from exabench.campaign.render import batch_request
from exabench.campaign.site import NodeSpec, resolve_layout

from helpers_sites import GOLDEN, site

PROG = ["./a.out"]
OLCF_SUMMIT = "OLCF Summit User Guide (docs.olcf.ornl.gov/systems/summit_user_guide.html)"
OLCF_FRONTIER = "OLCF Frontier User Guide (docs.olcf.ornl.gov/systems/frontier_user_guide.html)"
ALCF_AURORA = "ALCF Running Jobs on Aurora (docs.alcf.anl.gov/aurora/running-jobs-aurora/)"


def line(site_obj, **request) -> str:
    return shlex.join(launch_argv(site_obj, resolve_layout(site_obj, **request), PROG))


# Spellings of one option, and the values a launcher takes when the option is left out.
ALIASES = {"-N": "--nodes", "-n": "--ntasks", "-c": "--cpus-per-task", "-m": "--distribution"}
JSRUN_SHORT = {"-n": "--nrs", "-a": "--tasks_per_rs", "-c": "--cpu_per_rs", "-g": "--gpu_per_rs", "-r": "--rs_per_host",
               "-b": "--bind", "-d": "--launch_distribution", "-l": "--latency_priority"}


def options(text: str) -> dict:
    """A launch line's options as {long name: value}, whatever the spelling (-n12, -n 12, --x=v, --x v)."""
    words = shlex.split(text)
    launcher, words = words[0], words[1:]
    names = JSRUN_SHORT if launcher == "jsrun" else ALIASES
    out, i = {}, 0
    while i < len(words) and words[i].startswith("-"):
        w = words[i]
        if w.startswith("--") and "=" in w:
            k, v = w.split("=", 1)
        elif not w.startswith("--") and len(w) > 2 and (launcher == "jsrun" or w[2].isdigit()):
            k, v = w[:2], w[2:]  # -n12, -bpacked:7
        elif i + 1 < len(words) and not words[i + 1].startswith(("-", "./")):
            k, v = w, words[i + 1]
            i += 1
        else:
            k, v = w, ""
        key = names.get(k, k)
        out[key] = v.lower() if key in ("--bind", "--launch_distribution", "--latency_priority") else v
        i += 1
    return out


def same_request(ours: str, documented: str, defaults: dict, extra: set = frozenset()) -> None:
    """Our line and the document's ask for the same thing: equal options once the launcher's
    documented defaults fill in what either leaves out; `extra` are options only ours gives,
    each explained by the caller."""
    mine, theirs = options(ours), options(documented)
    for k in extra:
        mine.pop(k)
    assert {**defaults, **mine} == {**defaults, **theirs}


# --- OLCF Summit: jsrun -------------------------------------------------------------------------
# jsrun defaults, from the guide's "Common jsrun Options" table: bind packed:1, launch
# distribution packed, latency priority gpu-cpu.
JSRUN_DEFAULTS = {"--bind": "packed:1", "--launch_distribution": "packed", "--latency_priority": "gpu-cpu"}


@pytest.mark.parametrize("request_,ours,documented", [
    # "Jsrun Examples" > "Single MPI Task, single GPU per RS" (2 nodes)
    (dict(nodes=2, ranks_per_node=6, cores_per_rank=1, threads_per_rank=1, gpus_per_rank=1),
     "jsrun -n12 -r6 -a1 -c1 -g1 -bpacked:1 ./a.out", "jsrun -n12 -r6 -a1 -g1 -c1 ./a.out"),
    # "Jsrun Examples" > "Multiple tasks, single GPU per RS": 2 ranks share each GPU (2 nodes)
    (dict(nodes=2, ranks_per_node=12, ranks_per_gpu=2, cores_per_rank=1, threads_per_rank=1),
     "jsrun -n12 -r6 -a2 -c2 -g1 -bpacked:1 -dpacked ./a.out", "jsrun -n12 -a2 -g1 -c2 -dpacked ./a.out"),
    # "Jsrun Examples" > "Multiple Task, Multiple GPU per RS": 6 ranks pool 3 GPUs and 6 cores (2 nodes)
    (dict(nodes=2, ranks_per_node=12, ranks_per_gpu=2, ranks_per_set=6, cores_per_rank=1, threads_per_rank=1),
     "jsrun -n4 -r2 -a6 -c6 -g3 -bpacked:1 -dpacked ./a.out", "jsrun -n 4 -a 6 -c 6 -g 3 -d packed -l GPU-CPU ./a.out"),
    # "Common Use Cases" table, one row each (1 node)
    (dict(ranks_per_node=42, ranks_per_set=42, cores_per_rank=1, threads_per_rank=1, gpus_per_rank=0),
     "jsrun -n1 -r1 -a42 -c42 -g0 -bpacked:1 -dpacked ./a.out", "jsrun -n1 -a42 -c42 -g0 ./a.out"),
    (dict(ranks_per_node=1, cores_per_rank=1, threads_per_rank=1, gpus_per_rank=1),
     "jsrun -n1 -r1 -a1 -c1 -g1 -bpacked:1 ./a.out", "jsrun -n1 -a1 -c1 -g1 ./a.out"),
    (dict(ranks_per_node=2, ranks_per_gpu=2, cores_per_rank=1, threads_per_rank=1),
     "jsrun -n1 -r1 -a2 -c2 -g1 -bpacked:1 -dpacked ./a.out", "jsrun -n1 -a2 -c2 -g1 ./a.out"),
    (dict(ranks_per_node=1, cores_per_rank=1, threads_per_rank=1, gpus_per_rank=2),
     "jsrun -n1 -r1 -a1 -c1 -g2 -bpacked:1 ./a.out", "jsrun -n1 -a1 -c1 -g2 ./a.out"),
    (dict(ranks_per_node=1, cores_per_rank=21, threads_per_rank=21, gpus_per_rank=3),
     "jsrun -n1 -r1 -a1 -c21 -g3 -bpacked:21 ./a.out", "jsrun -n1 -a1 -c21 -g3 -bpacked:21 ./a.out"),
    # "Example: Single Task, Single GPU, Multiple Threads per RS" (OMP_NUM_THREADS=4, 2 nodes)
    (dict(nodes=2, ranks_per_node=6, cores_per_rank=4, threads_per_rank=4, gpus_per_rank=1),
     "jsrun -n12 -r6 -a1 -c4 -g1 -bpacked:4 ./a.out", "jsrun -n12 -a1 -c4 -g1 -b packed:4 -d packed ./a.out"),
])
def test_summit_jsrun_examples(request_, ours, documented):
    # OLCF_SUMMIT, sections named on each case. exabench always gives -r (RS per node: the
    # guide's 2-node examples leave jsrun to fill nodes, which gives the same count per node).
    s = site("summit")
    assert line(s, **request_) == ours
    same_request(ours, documented, JSRUN_DEFAULTS, extra={"--rs_per_host"} - set(options(documented)))


def test_summit_hardware_threads_example_smt4():
    # OLCF_SUMMIT, "Hardware Threads": jsrun -n1 -a2 -c8 -g1 -bpacked:4 -dpacked -EOMP_NUM_THREADS=16
    # (2 tasks sharing a GPU, 4 cores each at SMT4 = 16 threads; -alloc_flags smt4, and gpumps for the shared GPU).
    s = site("summit")
    layout = resolve_layout(s, ranks_per_node=2, ranks_per_gpu=2, cores_per_rank=4, smt=4, threads_per_rank=16)
    assert shlex.join(launch_argv(s, layout, PROG)) == "jsrun -n1 -r1 -a2 -c8 -g1 -bpacked:4 -dpacked ./a.out"
    assert list(allocation.request(s, layout).alloc_flags) == ["smt4", "gpumps"]
    assert layout.threads_per_rank == 16  # OMP_NUM_THREADS, exported by the job script


def test_summit_one_resource_set_per_node_climate_segmentation_layout():
    # The climate-segmentation reference on Summit: jsrun -n<nodes> -a 6 -c 42 -g 6 -r 1
    # --bind=proportional-packed:7 --launch_distribution=packed: one RS per node with all 6 GPUs
    # and 42 cores, 6 tasks of 7 cores each (each picks its GPU by local rank). exabench binds
    # with packed:7, which gives each task the same 7 cores as proportional-packed does here.
    s = site("summit")
    layout = resolve_layout(s, nodes=4, ranks_per_node=6, ranks_per_set=6)
    assert shlex.join(launch_argv(s, layout, PROG)) == "jsrun -n4 -r1 -a6 -c42 -g6 -bpacked:7 -dpacked ./a.out"
    assert (layout.gpus_per_rank, layout.threads_per_rank, layout.ranks) == (1, 7, 24)
    documented = "jsrun -n4 -a 6 -c 42 -g 6 -r 1 --bind=packed:7 --launch_distribution=packed ./a.out"
    same_request(shlex.join(launch_argv(s, layout, PROG)), documented, JSRUN_DEFAULTS)


# --- OLCF Frontier: srun ------------------------------------------------------------------------
# Frontier's srun defaults ("Srun" options table): --cpu-bind=threads, --threads-per-core=1,
# -m block:cyclic.
FRONTIER_DEFAULTS = {"--cpu-bind": "threads", "--threads-per-core": "1", "--distribution": "block:cyclic"}
# exabench always names --ntasks-per-node (the task count per node the layout decided).
SRUN_EXTRA = {"--ntasks-per-node"}


@pytest.mark.parametrize("request_,ours,documented", [
    # "Multithreading" > "2 MPI ranks - each with 2 OpenMP threads", second (correct) attempt
    (dict(ranks_per_node=2, cores_per_rank=2, threads_per_rank=2, gpus_per_rank=0),
     "srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=2 --cpu-bind=threads ./a.out",
     "srun -N1 -n2 -c2 ./a.out"),
    # "CPU Mapping" > "8 MPI Ranks (round-robin)"
    (dict(ranks_per_node=8, cores_per_rank=1, threads_per_rank=1, gpus_per_rank=0),
     "srun --nodes=1 --ntasks=8 --ntasks-per-node=8 --cpus-per-task=1 --cpu-bind=threads ./a.out",
     "srun -N1 -n8 -c1 --cpu-bind=threads --threads-per-core=1 -m block:cyclic ./a.out"),
    # "GPU Mapping" > Example 1: 8 ranks, 7 cores and 1 GPU each (OMP_NUM_THREADS=7)
    (dict(nodes=1),
     "srun --nodes=1 --ntasks=8 --ntasks-per-node=8 --cpus-per-task=7 --cpu-bind=threads --gpus-per-task=1 "
     "--gpu-bind=closest ./a.out", "srun -N1 -n8 -c7 --gpus-per-task=1 --gpu-bind=closest ./a.out"),
    # "GPU Mapping" > Example 3: the same on 2 nodes
    (dict(nodes=2),
     "srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=7 --cpu-bind=threads --gpus-per-task=1 "
     "--gpu-bind=closest ./a.out", "srun -N2 -n16 -c7 --gpus-per-task=1 --gpu-bind=closest ./a.out"),
    # "Mapping multiple MPI ranks to a single GPU" > Example 4: 16 ranks, 2 per GPU
    (dict(ranks_per_node=16, ranks_per_gpu=2, cores_per_rank=1, threads_per_rank=1),
     "srun --nodes=1 --ntasks=16 --cpus-per-task=1 --cpu-bind=threads --ntasks-per-gpu=2 --gpu-bind=closest ./a.out",
     "srun -N1 -n16 -c1 --ntasks-per-gpu=2 --gpu-bind=closest ./a.out"),
    # ... and its 2-node form: srun -N2 -n32 -c1 --ntasks-per-gpu=2 --gpu-bind=closest (no --ntasks-per-node:
    # srun(1) refuses it beside --ntasks-per-gpu)
    (dict(nodes=2, ranks_per_node=16, ranks_per_gpu=2, cores_per_rank=1, threads_per_rank=1),
     "srun --nodes=2 --ntasks=32 --cpus-per-task=1 --cpu-bind=threads --ntasks-per-gpu=2 --gpu-bind=closest ./a.out",
     "srun -N2 -n32 -c1 --ntasks-per-gpu=2 --gpu-bind=closest ./a.out"),
])
def test_frontier_srun_examples(request_, ours, documented):
    # OLCF_FRONTIER, sections named on each case.
    s = site("frontier")
    assert line(s, **request_) == ours
    same_request(ours, documented, FRONTIER_DEFAULTS, extra=SRUN_EXTRA & set(options(ours)))


def test_frontier_shared_gpus_leave_ntasks_per_node_out_of_the_header_too():
    # srun(1): --ntasks-per-gpu "is not compatible with ... --ntasks-per-node", and srun reads
    # SLURM_NTASKS_PER_NODE (set by an #SBATCH --ntasks-per-node) as that option.
    s = site("frontier")
    shared = resolve_layout(s, nodes=2, ranks_per_node=16, ranks_per_gpu=2, cores_per_rank=1, threads_per_rank=1)
    assert batch_request(s, shared, "job", 30, GOLDEN)["ranks_per_node"] == 0
    assert batch_request(s, resolve_layout(s, nodes=2), "job", 30, GOLDEN)["ranks_per_node"] == 8


def test_frontier_one_rank_one_gpu_example_adds_only_overlap():
    # OLCF_FRONTIER, "GPU Mapping" > Example 2: srun -N1 -n1 -c7 --gpus-per-task=1 --gpu-bind=closest.
    # A one-task step gets --overlap (it may start inside the Slurm executor plugin's own step).
    ours = line(site("frontier"), ranks_per_node=1, gpus_per_rank=1, cores_per_rank=7)
    assert ours == ("srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=7 --cpu-bind=threads "
                    "--gpus-per-task=1 --gpu-bind=closest --overlap ./a.out")
    same_request(ours, "srun -N1 -n1 -c7 --gpus-per-task=1 --gpu-bind=closest ./a.out", FRONTIER_DEFAULTS,
                 extra=SRUN_EXTRA | {"--overlap"})


def test_frontier_smt2_asks_for_threads_per_core_and_counts_hardware_threads():
    # OLCF_FRONTIER, "Multithreading" > third attempt: the job is allocated with
    # --threads-per-core=2 and -c then counts logical cores: 2 threads on one core is -c2.
    s = site("frontier")
    layout = resolve_layout(s, ranks_per_node=2, cores_per_rank=1, smt=2, threads_per_rank=2, gpus_per_rank=0)
    ours = shlex.join(launch_argv(s, layout, PROG))
    assert ours == ("srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=2 --threads-per-core=2 "
                    "--cpu-bind=threads ./a.out")
    # The documented step inherits --threads-per-core=2 from its allocation; exabench names it in both.
    same_request(ours, "srun -N1 -n2 -c2 --threads-per-core=2 ./a.out", FRONTIER_DEFAULTS, extra=SRUN_EXTRA)
    assert batch_request(s, layout, "job", 30, GOLDEN)["threads_per_core"] == 2
    # The audit's case: 8 ranks x 7 cores at SMT2 run 14 threads on 14 hardware threads, not on -c7.
    full = resolve_layout(s, nodes=1, smt=2)
    assert full.threads_per_rank == 14
    assert srun.cpus_per_task(s, full) == 14 and srun.threads_per_core(s, full) == 2
    assert "--cpus-per-task=14 --threads-per-core=2" in shlex.join(launch_argv(s, full, PROG))


def test_frontier_header_asks_for_smt_only_when_used():
    s = site("frontier")
    assert batch_request(s, resolve_layout(s, nodes=2), "job", 30, GOLDEN)["threads_per_core"] == 0


# --- NERSC Perlmutter and Cori KNL: srun ----------------------------------------------------------

def test_perlmutter_gpu_nodes_examples():
    # NERSC "Running Jobs on Perlmutter's GPU nodes" > "Controlling task and GPU binding":
    # -c = floor(64 / tasks per node) * 2, --cpu-bind=cores. Its examples give no --gpu-bind, so
    # the site's gpu_bind is cleared here.
    s = site("perlmutter")
    s = dataclasses.replace(s, launcher_options={**s.launcher_options, "gpu_bind": ""})
    # "srun -C gpu -N 1 -n 2 -c 64 --cpu-bind=cores --gpus-per-task=1" (the constraint is the header's)
    ours = line(s, ranks_per_node=2, gpus_per_rank=1)
    assert ours == ("srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=64 --cpu-bind=cores "
                    "--gpus-per-task=1 ./a.out")
    same_request(ours, "srun -N 1 -n 2 -c 64 --cpu-bind=cores --gpus-per-task=1 ./a.out", {}, extra=SRUN_EXTRA)
    # "1 node, 4 tasks, 4 GPUs": #SBATCH -n 4 --ntasks-per-node=4 -c 32 --gpus-per-task=1, SLURM_CPU_BIND=cores
    assert line(s, nodes=1) == ("srun --nodes=1 --ntasks=4 --ntasks-per-node=4 --cpus-per-task=32 --cpu-bind=cores "
                                "--gpus-per-task=1 ./a.out")


def test_perlmutter_smt_changes_threads_not_the_srun_line():
    # NERSC "Process and Thread Affinity": -c counts hyperthreads (2 per core) whatever OpenMP uses,
    # so SMT2 needs no --threads-per-core; OMP_PLACES=threads puts a thread on each.
    s = site("perlmutter")
    one, two = resolve_layout(s, nodes=1), resolve_layout(s, nodes=1, smt=2)
    assert (one.threads_per_rank, two.threads_per_rank) == (16, 32)
    assert shlex.join(launch_argv(s, one, PROG)) == shlex.join(launch_argv(s, two, PROG))
    assert "--threads-per-core" not in shlex.join(launch_argv(s, two, PROG))


@pytest.mark.parametrize("ranks_per_node,cpus", [(64, 4), (16, 16), (4, 68)])
def test_cori_knl_affinity_rule(ranks_per_node, cpus):
    # NERSC "Process and Thread Affinity", Cori KNL: -c 4*floor(68/tasks per node), --cpu-bind=cores.
    ours = line(site("cori-knl"), nodes=2, ranks_per_node=ranks_per_node)
    assert ours == (f"srun --nodes=2 --ntasks={2 * ranks_per_node} --ntasks-per-node={ranks_per_node} "
                    f"--cpus-per-task={cpus} --cpu-bind=cores ./a.out")


# --- ALCF Polaris: mpiexec ----------------------------------------------------------------------

def test_polaris_gpu_example():
    # ALCF Polaris "Running Jobs" / "Using GPUs": mpiexec -n ${NTOTRANKS} --ppn ${NRANKS_PER_NODE}
    # --depth=${NDEPTH} --cpu-bind depth --env OMP_NUM_THREADS=${NTHREADS} ./set_affinity_gpu_polaris.sh
    # (2 nodes, 4 ranks of 8 cores, 1 thread); the wrapper stands in for set_affinity_gpu_polaris.sh.
    argv = launch_argv(site("polaris"), resolve_layout(site("polaris"), nodes=2, ranks_per_node=4, cores_per_rank=8,
                                                       threads_per_rank=1), PROG)
    assert shlex.join(argv[:10]) == "mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth --env OMP_NUM_THREADS=1"
    assert run_wrapper(argv, "PMI_LOCAL_RANK", "CUDA_VISIBLE_DEVICES", 4) == ["0", "1", "2", "3"]


def test_polaris_hyperthreads_example_holds_each_ranks_own_cores():
    # ALCF Polaris "Running Jobs" > "Running MPI+OpenMP Applications": 8 ranks per node, 8 threads,
    # `-d 8 --cpu-bind depth`, one thread per hardware thread of the 64. Depth binding hands rank j
    # logical processors 8j..8j+7, so ranks 0 and 4 share cores 0-7. exabench gives each rank its own
    # 4 cores with both hardware threads (--cpu-bind=list): the same 64 hardware threads, each once.
    s = site("polaris")
    layout = resolve_layout(s, nodes=4, ranks_per_node=8, smt=2, gpus_per_rank=0)
    assert layout.threads_per_rank == 8
    argv = launch_argv(s, layout, PROG)
    assert argv[5] == "--cpu-bind=list:0-3,32-35:4-7,36-39:8-11,40-43:12-15,44-47:16-19,48-51:20-23,52-55:" \
                      "24-27,56-59:28-31,60-63"
    ours = [set(parse_ranges(r)) for r in argv[5].split(":", 1)[1].split(":")]
    documented = [set(range(8 * j, 8 * j + 8)) for j in range(8)]
    assert sorted(c for r in ours for c in r) == sorted(c for r in documented for c in r) == list(range(64))
    assert all({c % 32 for c in r} & {c % 32 for c in other} == set() for r in ours for other in ours if r is not other)


# --- ALCF Aurora: mpiexec -----------------------------------------------------------------------

def test_aurora_cores_example_1_depth_binding():
    # ALCF_AURORA, "Binding MPI ranks and threads to cores" > Example 1: 2 nodes, 4 ranks/node, 1 thread:
    # mpiexec -n 8 -ppn 4 --depth 1 --cpu-bind=depth (= --cpu-bind=list:1:2:3:4)
    s = site("aurora")
    layout = resolve_layout(s, nodes=2, ranks_per_node=4, cores_per_rank=1, threads_per_rank=1, gpus_per_rank=0)
    assert shlex.join(launch_argv(s, layout, PROG)) == \
        "mpiexec -n 8 --ppn 4 --depth=1 --cpu-bind depth --env OMP_NUM_THREADS=1 ./a.out"
    assert mpiexec.depth_placement(s.node, layout) == [[1], [2], [3], [4]]


def test_aurora_cores_example_2_two_threads():
    # ALCF_AURORA, Example 2: OMP_NUM_THREADS=2 mpiexec -n 4 -ppn 2 --depth=2 --cpu-bind=depth
    # (= --cpu-bind=list:1,2:3,4)
    s = site("aurora")
    layout = resolve_layout(s, nodes=2, ranks_per_node=2, cores_per_rank=2, threads_per_rank=2, gpus_per_rank=0)
    assert shlex.join(launch_argv(s, layout, PROG)) == \
        "mpiexec -n 4 --ppn 2 --depth=2 --cpu-bind depth --env OMP_NUM_THREADS=2 ./a.out"
    assert mpiexec.depth_placement(s.node, layout) == [[1, 2], [3, 4]]


AURORA_12 = "1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100"


def test_aurora_cores_example_4_twelve_ranks_list_binding():
    # ALCF_AURORA, Example 4: 12 ranks/node of 8 cores need
    # --cpu-bind=list:1-8:...:93-100; `--depth=8 --cpu-bind=depth` would give rank 6 HWT 49-51,53-57,
    # split across the sockets. exabench finds the split and uses the list.
    s = site("aurora")
    layout = resolve_layout(s, ranks_per_node=12, cores_per_rank=8, threads_per_rank=1, gpus_per_rank=0)
    depth = mpiexec.depth_placement(s.node, layout)
    assert depth[6] == [49, 50, 51, 53, 54, 55, 56, 57] and mpiexec.straddles(s.node, depth)
    assert shlex.join(launch_argv(s, layout, PROG)) == \
        f"mpiexec -n 12 --ppn 12 --cpu-bind=list:{AURORA_12} --env OMP_NUM_THREADS=1 ./a.out"


def test_aurora_gpu_example_1_one_rank_per_tile():
    # ALCF_AURORA, "Binding MPI ranks to GPUs" > Example 1 (explicit scaling): 12 ranks, the list above,
    # gpu_tile_compact.sh: rank 0 -> GPU 0 tile 0 (0.0), rank 1 -> 0.1, rank 2 -> 1.0, ... With
    # ZE_FLAT_DEVICE_HIERARCHY=FLAT (the frameworks module's, set by the site) tile t of GPU g is
    # device 2g + t, which the per-rank wrapper puts in ZE_AFFINITY_MASK.
    s = site("aurora")
    assert s.env["ZE_FLAT_DEVICE_HIERARCHY"] == "FLAT"
    argv = launch_argv(s, resolve_layout(s, nodes=1), PROG)  # the default: one rank per tile, 8 cores each
    assert argv[:6] == ["mpiexec", "-n", "12", "--ppn", "12", f"--cpu-bind=list:{AURORA_12}"]
    documented = ["0.0", "0.1", "1.0", "1.1", "2.0", "2.1", "3.0", "3.1", "4.0", "4.1", "5.0", "5.1"]
    flat = [str(2 * int(g) + int(t)) for g, t in (d.split(".") for d in documented)]
    assert run_wrapper(argv, "PMI_LOCAL_RANK", "ZE_AFFINITY_MASK", 12) == flat


def test_aurora_gpu_example_2_one_rank_per_gpu():
    # ALCF_AURORA, "Binding MPI ranks to GPUs" > Example 2 (implicit scaling): 6 ranks,
    # --cpu-bind=list:1-16:17-32:33-48:53-68:69-84:85-100, gpu_dev_compact.sh: rank i -> GPU i,
    # that is its two tiles 2i and 2i+1 as FLAT devices.
    s = site("aurora")
    argv = launch_argv(s, resolve_layout(s, ranks_per_node=6, cores_per_rank=16, threads_per_rank=1), PROG)
    assert argv[5] == "--cpu-bind=list:1-16:17-32:33-48:53-68:69-84:85-100"
    assert run_wrapper(argv, "PMI_LOCAL_RANK", "ZE_AFFINITY_MASK", 6) == [f"{2 * i},{2 * i + 1}" for i in range(6)]


def test_aurora_sample_script_28_ranks_of_depth_4_does_not_fit_whole_cores():
    # ALCF_AURORA, "Running MPI+OpenMP+SYCL Applications": 28 ranks/node, --depth=4, 4 threads "(1 per CPU
    # core)": 112 cores, more than the node's 102 usable ones, so depth binding wraps onto second
    # hardware threads. exabench refuses 4 whole cores per rank, naming the limit; 2 cores at SMT2
    # give the same 4 threads per rank, each rank on its own cores and socket.
    s = site("aurora")
    with pytest.raises(LayoutError) as info:
        resolve_layout(s, nodes=4, ranks_per_node=28, cores_per_rank=4, threads_per_rank=4, gpus_per_rank=0)
    assert "102 usable cores" in info.value.limit
    layout = resolve_layout(s, nodes=4, ranks_per_node=28, cores_per_rank=2, smt=2, threads_per_rank=4, gpus_per_rank=0)
    argv = launch_argv(s, layout, PROG)
    ranks = [parse_ranges(r) for r in argv[5].split(":", 1)[1].split(":")]
    assert len(ranks) == 28 and all(len(r) == 4 for r in ranks)
    assert all(len({(c % 104) // 52 for c in r}) == 1 for r in ranks)  # no rank spans sockets
    assert 0 not in {c % 104 for r in ranks for c in r} and 52 not in {c % 104 for r in ranks for c in r}


def test_aurora_pytorch_twelve_ranks_split_evenly_over_sockets():
    # ALCF "PyTorch on Aurora" > "CPU bindings for best performance": 12 ranks per node, 4 cores each,
    # "evenly split across the 2 CPU sockets" (list:4-7:...:24-27:56-59:...:76-79). exabench puts ranks
    # 0-5 (tiles 0-5) on socket 0 and 6-11 on socket 1, from each socket's first usable core.
    s = site("aurora")
    argv = launch_argv(s, resolve_layout(s, ranks_per_node=12, cores_per_rank=4, threads_per_rank=4), PROG)
    assert argv[5] == "--cpu-bind=list:1-4:5-8:9-12:13-16:17-20:21-24:53-56:57-60:61-64:65-68:69-72:73-76"
    documented = "4-7:8-11:12-15:16-19:20-23:24-27:56-59:60-63:64-67:68-71:72-75:76-79".split(":")
    sockets = [[c // 52 for c in parse_ranges(r)] for r in argv[5].split(":", 1)[1].split(":")]
    assert [set(s_) for s_ in sockets] == [{c // 52 for c in parse_ranges(r)} for r in documented]


# --- ALCF Theta, OLCF Titan: aprun; TACC Stampede2: ibrun ----------------------------------------

@pytest.mark.parametrize("request_,documented", [
    # ALCF Theta "Affinity on Theta" (docs.alcf.anl.gov/theta/queueing-and-running-jobs/affinity-theta/),
    # its four examples: 64 ranks per node, 1 thread each (2 nodes) ...
    (dict(nodes=2, ranks_per_node=64), "aprun -n 128 -N 64 -d 1 -j 1 --cc depth ./a.out"),
    # ... 32 ranks per node, 4 threads on 2 cores x 2 hardware threads (OMP_NUM_THREADS=4) ...
    (dict(nodes=2, ranks_per_node=32, cores_per_rank=2, smt=2, threads_per_rank=4),
     "aprun -n 64 -N 32 -d 4 -j 2 --cc depth ./a.out"),
    # ... one rank of 64 threads on 64 cores ...
    (dict(nodes=1, ranks_per_node=1, threads_per_rank=64), "aprun -n 1 -N 1 -d 64 -j 1 -cc depth ./a.out"),
    # ... and one rank of 64 threads on 16 cores x 4 hardware threads.
    (dict(nodes=1, ranks_per_node=1, cores_per_rank=16, smt=4, threads_per_rank=64),
     "aprun -n 1 -N 1 -d 64 -j 4 -cc depth ./a.out"),
])
def test_theta_aprun_affinity_examples(request_, documented):
    # -d counts the rank's hardware threads (cores x -j); exabench spells --cc as -cc, as Theta's
    # "Job and queue scheduling" page does.
    assert line(site("theta"), **request_) == documented.replace("--cc", "-cc")


def test_titan_aprun_example():
    # OLCF Titan User Guide, "aprun": aprun -n 2 -N 1 -d 16 (one rank per node, 16 threads; -j 1)
    assert line(site("titan"), nodes=2, ranks_per_node=1, gpus_per_rank=1) == \
        "aprun -n 2 -N 1 -d 16 -j 1 -cc depth ./a.out"


def test_stampede2_ibrun_example():
    # TACC Stampede2 User Guide, "Launching Applications": #SBATCH -N 4 -n 32, then `ibrun ./a.out`.
    s = site("stampede2")
    layout = resolve_layout(s, nodes=4, ranks_per_node=8)
    assert launch_argv(s, layout, PROG) == ["ibrun", "./a.out"]
    req = batch_request(s, layout, "job", 30, GOLDEN)
    assert (req["nodes"], req["ranks"], req["cpus_per_task"]) == (4, 32, 0)


# --- every-node acceptance: one run placed on named nodes, per launcher ----------------------------

def placed(site_name: str, hosts: tuple[str, ...], index: int | None, **request):
    s = site(site_name)
    layout = resolve_layout(s, **request)
    return place(launch_argv(s, layout, PROG), hosts, layout, index, NodeSpec(**usable_node(s.node)))


@pytest.mark.parametrize("request_,rank_sets", [
    # OLCF_SUMMIT "Jsrun Examples" (6 RS of 1 task, 7 cores, 1 GPU per node): -n6 -r6 -a1 -c7 -g1 -bpacked:7
    (dict(nodes=1, ranks_per_node=6, cores_per_rank=7, threads_per_rank=7, gpus_per_rank=1), "6x1"),
    # OLCF_SUMMIT "Hardware Threads" at SMT4 with ranks sharing GPUs (MPS): 12 ranks, 2 per GPU, 3 cores each
    (dict(nodes=1, ranks_per_node=12, ranks_per_gpu=2, cores_per_rank=3, smt=4, threads_per_rank=12), "6x2"),
])
def test_summit_every_node_run_goes_to_its_erf_host(request_, rank_sets):
    # IBM JSM "Explicit Resource File (ERF) format": `jsrun --erf_input=FILE`, the command on the jsrun
    # line, one `rank: R: { host: H; cpu: {..}; gpu: {..} }` per rank; H counts compute nodes from 1
    # (0 is the launch node, CODARcode gen_erf_summit.sh). OLCF "ERF CPU Indexing": logical CPUs are
    # hardware threads, 0-167 at SMT4, socket 1 from 84 (21 cores x 4). The 5th compute node (index 4)
    # of the allocation is host 5. Golden: tests/golden/every-node.summit.<sets>.erf.
    p = placed("summit", ("a01n05",), 4, **request_)
    assert p.argv == ["jsrun", "--erf_input=placement.erf", "./a.out"] and p.env == ()
    [(name, erf)] = p.files
    assert name == "placement.erf" and erf == (GOLDEN / f"every-node.summit.{rank_sets}.erf").read_text()
    ranks = re.findall(r"^rank: (\d+): \{ host: 5; cpu: \{(\d+)-(\d+)\}; gpu: \{(\d)\} \}$", erf, re.M)
    assert [int(r[0]) for r in ranks] == list(range(request_["ranks_per_node"]))
    smt = request_.get("smt", 1)
    # Each rank holds its own cores x SMT hardware threads; the sets of GPUs 3-5 sit on socket 1.
    for rank, lo, hi, gpu in ranks:
        assert int(hi) - int(lo) + 1 == request_["cores_per_rank"] * smt
        assert (int(lo) >= 21 * smt) == (int(gpu) >= 3)


def test_summit_erf_host_numbers_follow_the_nodes_of_a_group():
    # Two nodes from the allocation's 1st: hosts 1 and 2, ranks numbered on across them.
    p = placed("summit", ("a01n01", "a01n02"), 0, nodes=2, ranks_per_node=2, threads_per_rank=84, smt=4)
    assert p.files[0][1] == ("cpu_index_using: logical\n"
                             "rank: 0: { host: 1; cpu: {0-83}; gpu: {0-2} }\nrank: 1: { host: 1; cpu: {84-167}; gpu: {3-5} }\n"
                             "rank: 2: { host: 2; cpu: {0-83}; gpu: {0-2} }\nrank: 3: { host: 2; cpu: {84-167}; gpu: {3-5} }\n")


def test_stampede2_every_node_run_takes_its_node_task_slots():
    # TACC Stampede2 User Guide, "More than One MPI Application Running Concurrently": `ibrun -n 64 -o 0
    # task_affinity ./myprogram input1 &`, -n tasks from entry -o of the job's hostfile; TACC Horizon
    # "MPS": TACC_TASKS_PER_NODE sets the hostfile's entries per node. The 4th node (index 3) of a run
    # of 4 ranks per node starts at entry 12.
    p = placed("stampede2", ("c401-004",), 3, nodes=1, ranks_per_node=4, threads_per_rank=17)
    assert (shlex.join(p.argv), p.env, p.files) == ("ibrun -n 4 -o 12 task_affinity ./a.out",
                                                    (("TACC_TASKS_PER_NODE", "4"),), ())
    def shape(words):  # the line with its counts left out: the same switches in the same order
        return [w if not w.isdigit() else "N" for w in words]
    assert shape(p.argv) == shape(shlex.split("ibrun -n 64 -o 0 task_affinity ./a.out"))


@pytest.mark.parametrize("site_name,request_,node,ours", [
    # Cray aprun(1): "-L node_list ... (such as -L 23,24,25)", numeric NIDs (Titan, Theta)
    ("theta", dict(nodes=1, ranks_per_node=64), "nid03012", "aprun -L 3012 -n 64 -N 64 -d 1 -j 1 -cc depth ./a.out"),
    ("titan", dict(nodes=1, ranks_per_node=1, gpus_per_rank=1), "nid00042", "aprun -L 42 -n 1 -N 1 -d 16 -j 1 -cc depth ./a.out"),
    # Slurm srun(1): --nodelist, --nodes as many (Frontier)
    ("frontier", dict(nodes=1, ranks_per_node=8, cores_per_rank=7, threads_per_rank=7, gpus_per_rank=1), "frontier00042",
     "srun --nodes=1 --nodelist=frontier00042 --kill-on-bad-exit=1 --ntasks=8 --ntasks-per-node=8 --cpus-per-task=7 "
     "--cpu-bind=threads --gpus-per-task=1 --gpu-bind=closest ./a.out"),
])
def test_name_placed_launchers_need_no_index(site_name, request_, node, ours):
    p = placed(site_name, (node,), None, **request_)
    assert (shlex.join(p.argv), p.files, p.env) == (ours, (), ())


def test_polaris_every_node_run_goes_to_its_nodes_through_a_hostfile():
    # ALCF Polaris "Running Jobs": "--hostfile indicate file with hostnames (the default is --hostfile
    # $PBS_NODEFILE)"; argonne-lcf/GettingStarted Examples/Polaris/ensemble ("Users can use multiple
    # hostfiles to run different applications across different nodes within a single job"):
    # `mpiexec -n ${NTOTRANKS} --ppn ${NRANKS_PER_NODE} --hostfile ${lh} --depth=${NDEPTH} --cpu-bind depth`.
    # Before: `--host x3001c0s13b0n0:4`, Open MPI's form, which PALS's mpiexec is not documented to take.
    p = placed("polaris", ("x3001c0s13b0n0", "x3001c0s13b1n0"), None, nodes=2, ranks_per_node=4)
    assert p.argv[:3] == ["mpiexec", "--hostfile", "hosts.txt"] and "--host" not in p.argv and p.env == ()
    assert p.files == (("hosts.txt", "x3001c0s13b0n0\nx3001c0s13b1n0\n"),)
    assert p.argv[3:7] == ["-n", "8", "--ppn", "4"]  # the line's own ranks per node place them on each


def test_index_placed_launchers_refuse_a_node_without_its_place():
    with pytest.raises(ExabenchError, match=r"launcher 'jsrun' places a run by the node's place in the allocation "
                                            r".*came without one; valid: `exabench node-run ... --index N`"):
        placed("summit", ("a01n05",), None, nodes=1, ranks_per_node=6, gpus_per_rank=1)


# --- helpers -------------------------------------------------------------------------------------

def parse_ranges(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def run_wrapper(argv: list[str], rank_var: str, visible_var: str, ranks: int) -> list[str]:
    """What the per-rank GPU wrapper of `argv` sets for local ranks 0..ranks-1 (run for real with bash)."""
    wrapper = argv[argv.index("bash"):-1] + ["sh", "-c", f"echo ${visible_var}"]
    return [subprocess.run(wrapper, env={rank_var: str(r), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                           check=True).stdout.strip() for r in range(ranks)]
