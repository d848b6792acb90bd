"""Launcher arithmetic against the centres' own documented examples (each test cites its
source), golden job scripts for a 2-node ResNet-50 run on Summit, Frontier and Polaris, and
property tests over random machines and requests."""

from __future__ import annotations

import re
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exabench.errors import LayoutError
from exabench.campaign import allocation
from exabench.campaign.render import batch_request
from exabench.campaign.launchers import jsrun, launch_argv, srun
from exabench.campaign.launchers.mpiexec import usable_cores_by_socket
from exabench.campaign.site import Layout, NodeSpec, Site, resolve_layout

from helpers_sites import GOLDEN, render_config, site

PROG = ["./a.out"]


def line(site_obj, **request) -> str:
    layout = resolve_layout(site_obj, **request)
    return shlex.join(launch_argv(site_obj, layout, PROG))


def flags_of(text: str) -> dict:
    """--name=value / -X value pairs of a launch line, for order-independent comparison."""
    out, words = {}, shlex.split(text)[1:]
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--") and "=" in w:
            k, v = w.split("=", 1)
            out[k] = v
        elif w.startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            out[w] = words[i + 1]
            i += 1
        else:
            out[w] = True
        i += 1
    return out


# --- golden examples from the centres' documentation ------------------------------------------

def test_jsrun_olcf_batch_script_example_2_nodes_6_rs_7_cores_1_gpu():
    # OLCF Batch-Script-Examples (github.com/olcf-tutorials/Batch-Script-Examples), Summit:
    # number_of_resource_sets=12, resource_sets_per_node=6, physical_cores_per_resource_set=7,
    # gpus_per_resource_set=1, mpi_ranks_per_resource_set=1, OMP_NUM_THREADS=1 ->
    # jsrun -n 12 -r 6 -c 7 -g 1 -a 1 -bpacked:7
    s = site("summit")
    layout = resolve_layout(s, nodes=2, ranks_per_node=6, cores_per_rank=7, threads_per_rank=1, gpus_per_rank=1)
    assert launch_argv(s, layout, PROG) == ["jsrun", "-n12", "-r6", "-a1", "-c7", "-g1", "-bpacked:7", "./a.out"]
    assert layout.threads_per_rank == 1  # OMP_NUM_THREADS=1 in the example


def test_jsrun_olcf_quick_start_cpu_only_two_per_node():
    # OLCF jsrun quick start guide (github.com/olcf-tutorials/jsrun_quick_start_guide):
    # 4 resource sets of 1 core, 1 task each, 2 per node: jsrun -n4 -c1 -a1 -r2 (no GPU).
    s = site("summit")
    layout = resolve_layout(s, nodes=2, ranks_per_node=2, threads_per_rank=1, gpus_per_rank=0)
    argv = launch_argv(s, layout, PROG)
    assert argv[0] == "jsrun" and set(argv[1:-1]) == {"-n4", "-r2", "-a1", "-c1", "-g0", "-bpacked:1"}


def test_jsrun_ranks_sharing_gpus_use_gpumps_and_smt_alloc_flags():
    # OLCF Summit User Guide, "Hardware threads" and "MPS" (-alloc_flags "smt4 gpumps"): 12 ranks
    # per node on 6 GPUs = one resource set per GPU holding 2 ranks, placed packed.
    s = site("summit")
    layout = resolve_layout(s, nodes=1, ranks_per_node=12, smt=4)
    rs = jsrun.resource_set(layout)
    assert (rs.count, rs.per_node, rs.tasks, rs.gpus, rs.cores, rs.bind_cores) == (6, 6, 2, 1, 6, 3)
    assert "-dpacked" in launch_argv(s, layout, PROG)
    assert list(allocation.request(s, layout).alloc_flags) == ["smt4", "gpumps"]
    assert layout.threads_per_rank == 12  # 3 cores x SMT4


def test_srun_frontier_user_guide_2_nodes_8_gcds():
    # OLCF Frontier User Guide, "srun" examples: srun -N2 -n16 -c7 --gpus-per-task=1 --gpu-bind=closest
    s = site("frontier")
    f = flags_of(line(s, nodes=2))  # default: one rank per GCD, 56 usable cores / 8 = 7
    assert (f["--nodes"], f["--ntasks"], f["--cpus-per-task"], f["--gpus-per-task"], f["--gpu-bind"]) == \
        ("2", "16", "7", "1", "closest")


def test_srun_perlmutter_gpu_nersc_affinity():
    # NERSC "Process and thread affinity" (docs.nersc.gov/jobs/affinity/), Perlmutter GPU nodes:
    # 4 tasks per node: -c 2*floor(64/4) = 32, --cpu-bind=cores, --gpus-per-task=1.
    s = site("perlmutter")
    f = flags_of(line(s, nodes=2))
    assert (f["--ntasks"], f["--ntasks-per-node"], f["--cpus-per-task"], f["--cpu-bind"], f["--gpus-per-task"]) == \
        ("8", "4", "32", "cores", "1")


@pytest.mark.parametrize("ranks_per_node,cpus", [(64, 4), (16, 16), (4, 68)])
def test_srun_cori_knl_nersc_affinity(ranks_per_node, cpus):
    # NERSC "Process and thread affinity", Cori KNL: -c 4*floor(68/tasks_per_node), --cpu-bind=cores.
    s = site("cori-knl")
    f = flags_of(line(s, nodes=2, ranks_per_node=ranks_per_node))
    assert f["--cpus-per-task"] == str(cpus) == str(4 * (68 // ranks_per_node))
    assert f["--cpu-bind"] == "cores"


def test_aprun_theta_alcf_example():
    # ALCF Theta "Job and queue scheduling": aprun -n 128 -N 64 -d 1 -j 1 -cc depth (2 nodes).
    s = site("theta")
    assert line(s, nodes=2, ranks_per_node=64) == "aprun -n 128 -N 64 -d 1 -j 1 -cc depth ./a.out"


def test_aprun_titan_one_rank_per_node_16_threads():
    # OLCF Titan User Guide, "aprun": aprun -n 2 -N 1 -d 16 (one rank per node, 16 threads).
    s = site("titan")
    assert line(s, nodes=2, ranks_per_node=1, gpus_per_rank=1) == "aprun -n 2 -N 1 -d 16 -j 1 -cc depth ./a.out"


def test_ibrun_stampede2_header_carries_the_layout():
    # TACC Stampede2 User Guide: #SBATCH -N 4 -n 32 (8 tasks per node), then plain `ibrun ./a.out`.
    s = site("stampede2")
    layout = resolve_layout(s, nodes=4, ranks_per_node=8)
    assert launch_argv(s, layout, PROG) == ["ibrun", "./a.out"]
    req = batch_request(s, layout, "job", 30, GOLDEN)
    assert (req["nodes"], req["ranks"]) == (4, 32)


def test_mpiexec_polaris_alcf_example():
    # ALCF Polaris "Running jobs": NRANKS_PER_NODE=4 NDEPTH=8 NTHREADS=1 ->
    # mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth --env OMP_NUM_THREADS=1 ./set_affinity_gpu_polaris.sh ./a.out
    s = site("polaris")
    layout = resolve_layout(s, nodes=2, ranks_per_node=4, cores_per_rank=8, threads_per_rank=1)
    argv = launch_argv(s, layout, PROG)
    assert argv[:9] == ["mpiexec", "-n", "8", "--ppn", "4", "--depth=8", "--cpu-bind", "depth", "--env"]
    assert argv[9] == "OMP_NUM_THREADS=1"
    assert argv[10:12] == ["bash", "-c"] and "CUDA_VISIBLE_DEVICES" in argv[12]  # the affinity wrapper
    assert argv[-1] == "./a.out"


def test_mpirun_local_unchanged():
    s = site("local")
    layout = resolve_layout(s, nodes=1, ranks_per_node=1)
    assert launch_argv(s, layout, PROG)[:7] == ["mpirun", "-np", "1", "--map-by",
                                              f"ppr:1:node:PE={layout.cores_per_rank}", "--bind-to", "core"]


def test_gpu_affinity_wrapper_gives_each_local_rank_its_own_gpus(tmp_path):
    # The wrapper mpiexec/mpirun use where the launcher does not set device visibility.
    import subprocess
    s = site("polaris")
    layout = resolve_layout(s, nodes=1, ranks_per_node=2, gpus_per_rank=2)
    argv = launch_argv(s, layout, ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"])
    wrapper = argv[argv.index("bash"):]
    seen = [subprocess.run(wrapper, env={"PMI_LOCAL_RANK": str(r), "PATH": "/usr/bin:/bin"}, capture_output=True,
                           text=True, check=True).stdout.strip() for r in range(2)]
    assert seen == ["0,1", "2,3"]


# --- golden scripts: 2-node ResNet-50 -------------------------------------------------------

@pytest.mark.parametrize("name", ["summit", "frontier", "polaris"])
def test_resnet50_two_node_scripts_match_golden(name):
    s = site(name, python="python3")
    [(run_id, text, _)] = render_config(GOLDEN / "resnet50-2nodes.yaml", s)
    golden = (GOLDEN / f"resnet50-2nodes.{name}.sh").read_text()
    assert text == golden, "re-render with: python tests/make_golden.py (then review the diff)"


def test_golden_scripts_say_what_the_centres_document():
    summit = (GOLDEN / "resnet50-2nodes.summit.sh").read_text()
    assert "#BSUB -nnodes 2" in summit and "#BSUB -P ABC123" in summit and "#BSUB -W 01:00" in summit
    assert "jsrun -n12 -r6 -a1 -c7 -g1 -bpacked:7" in summit
    frontier = (GOLDEN / "resnet50-2nodes.frontier.sh").read_text()
    assert "#SBATCH --nodes=2" in frontier and "#SBATCH --account=ABC123" in frontier
    assert re.search(r"srun .*--ntasks=16 .*--cpus-per-task=7 .*--gpus-per-task=1 --gpu-bind=closest", frontier)
    polaris = (GOLDEN / "resnet50-2nodes.polaris.sh").read_text()
    assert "#PBS -l select=2:system=polaris" in polaris and "#PBS -l filesystems=home:eagle" in polaris
    assert "mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth" in polaris


# --- property tests ---------------------------------------------------------------------------

def mpiexec_cpus(s, argv: list[str]) -> list[set[int]]:
    """Each local rank's logical processors under an mpiexec line: the `list:` sets, or what
    `--depth=D --cpu-bind depth` hands out (D usable first hardware threads per rank, in order)."""
    bind = next(a for a in argv if a.startswith("--cpu-bind=list:") or a.startswith("--depth="))
    if bind.startswith("--depth="):
        depth, rpn = int(bind.split("=")[1]), int(argv[argv.index("--ppn") + 1])
        cores = [c for socket in usable_cores_by_socket(s.node) for c in socket]
        return [set(cores[j * depth:(j + 1) * depth]) for j in range(rpn)]
    out = []
    for rank in bind.split(":", 1)[1].split(":"):
        ids = set()
        for part in rank.split(","):
            lo, _, hi = part.partition("-")
            ids.update(range(int(lo), int(hi or lo) + 1))
        out.append(ids)
    return out


@st.composite
def machines(draw):
    sockets = draw(st.integers(1, 4))
    cores = draw(st.integers(1, 64))
    smt = draw(st.sampled_from([1, 2, 4, 8]))
    node = NodeSpec(sockets=sockets, cores_per_socket=cores, reserved_cores=draw(st.integers(0, sockets * cores - 1)),
                    smt=smt, gpus=draw(st.integers(0, 8)), gpu_vendor="nvidia",
                    scheduler_cpus_per_core=draw(st.sampled_from([c for c in (1, 2, 4, 8) if c <= smt])))
    launcher = draw(st.sampled_from(["jsrun", "srun", "aprun", "mpiexec", "mpirun", "ibrun"]))
    return Site(name="prop", scheduler="slurm", launcher=launcher, node=node, max_nodes=draw(st.integers(1, 16)))


maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
requests = st.fixed_dictionaries({
    "nodes": st.integers(0, 20), "ranks_per_node": maybe(st.integers(0, 130)),
    "threads_per_rank": maybe(st.integers(0, 130)), "gpus_per_rank": maybe(st.integers(0, 9)),
    "smt": maybe(st.integers(0, 9)), "cores_per_rank": maybe(st.integers(0, 70)),
    "ranks_per_gpu": maybe(st.integers(0, 4)), "ranks_per_set": maybe(st.integers(0, 8))})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(), requests)
def test_every_accepted_layout_fits_and_every_rejection_names_the_limit(s, req):
    try:
        layout = resolve_layout(s, **req)
    except LayoutError as exc:
        msg = str(exc)
        assert f"site '{s.name}'" in msg and exc.field in msg and "limit:" in msg and exc.limit
        return
    n = s.node
    assert 1 <= layout.nodes <= s.max_nodes
    assert layout.ranks_per_node * layout.cores_per_rank <= n.usable_cores
    assert layout.threads_per_rank <= layout.cores_per_rank * layout.smt
    assert layout.smt <= n.smt
    assert layout.gpus_per_node <= n.gpus
    partial_sets = layout.ranks_per_set and layout.ranks_per_set < layout.ranks_per_node
    if partial_sets and s.launcher in ("aprun", "ibrun", "srun"):
        with pytest.raises(LayoutError):  # sets of ranks these launchers cannot give their own GPUs
            launch_argv(s, layout, PROG)
        return
    argv = launch_argv(s, layout, PROG)
    if s.launcher == "jsrun":
        rs = jsrun.resource_set(layout)
        assert rs.per_node * rs.cores <= n.usable_cores and rs.per_node * rs.gpus <= n.gpus
        assert rs.count * rs.tasks == layout.ranks
    elif s.launcher == "srun":
        f = flags_of(shlex.join(argv))
        cpus_per_core = max(n.scheduler_cpus_per_core, int(f.get("--threads-per-core", 1)))
        per_node = int(f.get("--ntasks-per-node", layout.ranks_per_node))  # absent beside --ntasks-per-gpu
        assert "--ntasks-per-node" in f or "--ntasks-per-gpu" in f
        assert per_node * int(f["--cpus-per-task"]) <= n.usable_cores * cpus_per_core
        assert int(f["--cpus-per-task"]) >= layout.threads_per_rank  # one Slurm CPU per thread at least
        assert int(f["--ntasks"]) == layout.ranks
    elif s.launcher == "aprun":
        depth = int(argv[argv.index("-d") + 1])
        assert depth * layout.ranks_per_node <= n.usable_cores * n.smt
    elif s.launcher == "mpiexec":
        per_rank = mpiexec_cpus(s, argv)
        assert len(per_rank) == layout.ranks_per_node
        flat = [c for cpus in per_rank for c in cpus]
        assert len(flat) == len(set(flat)) == layout.ranks_per_node * layout.cores_per_rank * layout.smt
        assert all(len(cpus) >= layout.threads_per_rank for cpus in per_rank)
        usable = {c for socket in usable_cores_by_socket(n) for c in socket}
        assert all(c % n.cores in usable for c in flat)  # never a reserved core's hardware thread
    assert argv[-1] == "./a.out"


@pytest.mark.parametrize("request_,field,limit", [
    ({"nodes": 2, "ranks_per_node": 7, "gpus_per_rank": 1}, "ranks_per_node x gpus_per_rank", "6 GPUs per node"),
    ({"nodes": 1, "ranks_per_node": 6, "cores_per_rank": 8}, "ranks_per_node x cores_per_rank", "42 usable cores"),
    ({"nodes": 5000}, "nodes", "max_nodes = 4608"),
    ({"nodes": 1, "ranks_per_node": 4}, "ranks_per_node", "6 GPUs"),
    ({"nodes": 1, "smt": 8}, "smt", "node.smt = 4"),
    ({"nodes": 1, "ranks_per_node": 6, "cores_per_rank": 2, "threads_per_rank": 9, "smt": 4},
     "threads_per_rank", "hardware threads per rank"),
])
def test_impossible_summit_layouts_are_rejected_naming_the_limit(request_, field, limit):
    with pytest.raises(LayoutError) as info:
        resolve_layout(site("summit"), **request_)
    assert info.value.site == "summit" and info.value.field == field and limit in info.value.limit


def test_srun_cpus_per_task_counts_hyperthreads_where_the_site_does():
    layout = Layout(nodes=1, ranks_per_node=4, threads_per_rank=16)
    assert srun.cpus_per_task(site("perlmutter"), layout) == 32
    assert srun.cpus_per_task(site("frontier"), Layout(1, 8, 7)) == 7


@pytest.mark.parametrize("request_,seen", [
    ({"ranks_per_node": 4, "ranks_per_set": 2}, ["0,1", "0,1", "2,3", "2,3"]),  # 2 ranks pool 2 GPUs
    ({"ranks_per_node": 8, "ranks_per_gpu": 2}, ["0", "0", "1", "1", "2", "2", "3", "3"]),
    ({"ranks_per_node": 4}, ["0", "1", "2", "3"]),
])
def test_gpu_affinity_wrapper_gives_each_set_its_gpus(request_, seen):
    import subprocess
    s = site("polaris")
    argv = launch_argv(s, resolve_layout(s, nodes=1, **request_), ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"])
    wrapper = argv[argv.index("bash"):]
    assert [subprocess.run(wrapper, env={"PMI_LOCAL_RANK": str(r), "PATH": "/usr/bin:/bin"}, capture_output=True,
                           text=True, check=True).stdout.strip() for r in range(len(seen))] == seen
