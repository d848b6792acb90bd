"""The launcher stand-ins (jsrun, aprun, mpiexec of Cray PALS and of MPICH/Hydra, ibrun): check a
launch line against the launcher's rule book and the site file's node shape, then start the ranks
here with Open MPI's mpirun, their number scaled down to this machine (EXABENCH_REHEARSAL_RANKS),
so that the run writes its real record.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field

from exabench.campaign.site import Site
from exabench.errors import ExabenchError
from exabench.rehearsal.rules import book, real_command, refuse, setting

DEFAULT_RANKS = 2   # ranks a launch starts here when the rehearsal does not say


@dataclass
class Launch:
    values: dict          # what each option means (the book's `means`) -> its value
    options: dict         # option as given -> value
    program: list
    env: dict = field(default_factory=dict)


def _lookup(book_name: str) -> dict:
    """Every spelling of every option -> (its canonical name, its entry)."""
    table = {}
    for name, entry in book(book_name)["options"].items():
        for spelling in (name, entry.get("long")):
            if spelling:
                table[spelling] = (name, entry)
    return table


def parse(book_name: str, argv: list[str]) -> Launch:
    """Options up to the program; each form (-n 6, -n6, --nrs=6, --nrs 6) is accepted, an unknown
    option refused."""
    table, glued = _lookup(book_name), book(book_name).get("glued_short", False)
    launch = Launch({}, {}, [])
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("-"):
            launch.program = argv[i:]
            break
        value = None
        if word not in table and "=" in word:
            word, value = word.split("=", 1)
        if word not in table and glued and word[:2] in table and table[word[:2]][1]["kind"] not in ("flag", "pair"):
            word, value = word[:2], word[2:]   # jsrun's -n6, -bpacked:7
        if word not in table:
            raise refuse(book_name, "known_option", f"'{argv[i]}'")
        name, entry = table[word]
        if entry["kind"] == "flag":
            value = "yes"
        elif value is None:
            i += 1
            if i >= len(argv):
                raise refuse(book_name, "value_form", f"{word} without a value")
            value = argv[i]
        if entry["kind"] == "pair":   # Hydra -genv NAME VALUE
            i += 1
            launch.env[value] = argv[i] if i < len(argv) else ""
        elif entry["kind"] == "env":  # PALS --env NAME=VALUE
            key, _, val = value.partition("=")
            launch.env[key] = val
        elif entry["kind"] == "int" and not (value.isdigit() and int(value) >= 0):
            raise refuse(book_name, "value_form", f"{word} {value}")
        launch.options[name] = value
        if entry.get("means"):
            launch.values[entry["means"]] = int(value) if entry["kind"] == "int" else value
        i += 1
    if not launch.program:
        raise refuse(book_name, "known_option", "no program to launch")
    return launch


def job_nodes(book_name: str) -> int:
    """The nodes of the batch job the launcher runs in (its header's count, not this machine's)."""
    inside = book(book_name).get("inside")
    if inside and not os.environ.get(inside):
        raise refuse(book_name, "inside", f"no {inside} in the environment")
    return int(setting("NODES", "1"))


def check_jsrun(site: Site, launch: Launch, nodes: int) -> int:
    v, n = launch.values, site.node
    if "--erf_input" in launch.options or "-U" in launch.options:
        return nodes   # an explicit resource file places its ranks itself
    cores, gpus, per_node = v.get("cores_per_set", 1), v.get("gpus_per_set", 0), v.get("sets_per_node")
    if cores > n.usable_cores or gpus > n.gpus:
        raise refuse("jsrun", "set_fits_node", f"-c {cores} -g {gpus} on a {site.name} node of "
                     f"{n.usable_cores} usable cores and {n.gpus} GPUs")
    if per_node and (per_node * cores > n.usable_cores or per_node * gpus > n.gpus):
        raise refuse("jsrun", "sets_per_node", f"-r {per_node} sets of -c {cores} -g {gpus} on a {site.name} node "
                     f"of {n.usable_cores} usable cores and {n.gpus} GPUs")
    per_node = per_node or min(n.usable_cores // cores, n.gpus // gpus if gpus else n.usable_cores)
    sets = v.get("resource_sets", per_node * nodes)
    if sets > per_node * nodes:
        raise refuse("jsrun", "sets_fit_job", f"-n {sets} sets at {per_node} per node on {nodes} node(s)")
    tasks = v.get("tasks_per_set", 1)
    bind = v.get("bind", "none")
    packed = re.fullmatch(r"packed:(\d+)", bind)
    if not packed and bind not in ("rs", "none"):
        raise refuse("jsrun", "value_form", f"-b {bind}")
    if packed and tasks * int(packed.group(1)) > cores:
        raise refuse("jsrun", "bind", f"-a {tasks} tasks x packed:{packed.group(1)} in a set of -c {cores}")
    return sets * tasks


def _fits_job(book_name: str, ranks: int, per_node: int, nodes: int, flag: str) -> None:
    if ranks > per_node * nodes:
        raise refuse(book_name, "ranks_fit_job", f"-n {ranks} at {flag} {per_node} on {nodes} node(s)")


def check_aprun(site: Site, launch: Launch, nodes: int) -> int:
    v, n = launch.values, site.node
    ranks, j, depth = v.get("ranks", 1), v.get("threads_per_core", 1), v.get("depth", 1)
    if not 1 <= j <= n.smt:
        raise refuse("aprun", "threads_per_core", f"-j {j} on a {site.name} node of SMT {n.smt}")
    per_node = v.get("ranks_per_node", min(ranks, n.usable_cores * j // depth))
    if per_node * depth > n.usable_cores * j:
        raise refuse("aprun", "node_fits", f"-N {per_node} x -d {depth} on {n.usable_cores} cores x -j {j}")
    _fits_job("aprun", ranks, per_node, nodes, "-N")
    bind = v.get("bind", "depth")
    if bind not in ("depth", "none", "numa_node", "cpu") and not re.fullmatch(r"[0-9,:\-]+", bind):
        raise refuse("aprun", "bind", f"-cc {bind}")
    return ranks


def check_mpiexec_pals(site: Site, launch: Launch, nodes: int) -> int:
    v, n = launch.values, site.node
    logical = n.cores * n.smt
    ranks, depth = v.get("ranks", 1), v.get("depth", 1)
    per_node = v.get("ranks_per_node", min(ranks, logical // depth))
    if per_node * depth > logical:
        raise refuse("mpiexec-pals", "node_fits",
                     f"--ppn {per_node} x --depth {depth} on {n.cores} cores x SMT {n.smt}")
    _fits_job("mpiexec-pals", ranks, per_node, nodes, "--ppn")
    bind = v.get("bind", "depth")
    if bind.startswith("list:"):
        ranges = bind[5:].split(":")
        cpus = [int(x) for r in ranges for x in re.findall(r"\d+", r)]
        if len(ranges) < per_node or not cpus or max(cpus) >= logical:
            raise refuse("mpiexec-pals", "bind", f"--cpu-bind {bind[:40]} for {per_node} rank(s) per node "
                         f"on {logical} logical processors")
    elif bind not in ("depth", "core", "numa", "none", "socket"):
        raise refuse("mpiexec-pals", "value_form", f"--cpu-bind {bind}")
    return ranks


def check_mpiexec_hydra(site: Site, launch: Launch, nodes: int) -> int:
    v, n = launch.values, site.node
    ranks = v.get("ranks", 1)
    per_node = v.get("ranks_per_node", ranks)
    if v.get("ranks_per_node") and per_node > n.cores * n.smt:
        raise refuse("mpiexec-hydra", "node_fits", f"-ppn {per_node} on {n.cores} cores x SMT {n.smt}")
    bind = v.get("bind")
    if bind and bind.split(":")[0] not in ("hwthread", "core", "socket", "numa", "board", "none", "l1cache",
                                            "l2cache", "l3cache"):
        raise refuse("mpiexec-hydra", "bind", f"-bind-to {bind}")
    return ranks


def check_ibrun(site: Site, launch: Launch, nodes: int) -> int:
    # The tasks the site's header asked for (a Slurm rehearsal keeps them: the loopback job has fewer).
    tasks = int(setting("TASKS") or os.environ.get("SLURM_NTASKS", "0") or 0)
    ranks, offset = launch.values.get("ranks", tasks or 1), launch.values.get("offset", 0)
    if tasks and offset + ranks > tasks:
        raise refuse("ibrun", "ranks_fit_job", f"-n {ranks} -o {offset} in a job of {tasks} task(s)")
    return ranks


CHECKS = {"jsrun": check_jsrun, "aprun": check_aprun, "mpiexec-pals": check_mpiexec_pals,
          "mpiexec-hydra": check_mpiexec_hydra, "ibrun": check_ibrun}


def threads_here(ranks_here: int) -> dict[str, str]:
    """The threads of each rank scaled to this machine as its ranks are: the CPUs this process may use
    shared among the ranks started here, as OMP_NUM_THREADS (numpy, OpenMP) and as the runner's cap of
    its intra-op threads. Without it a rehearsed 32-thread rank runs 32 threads on each of 2 cores."""
    threads = str(max(1, len(os.sched_getaffinity(0)) // max(1, ranks_here)))
    return {"OMP_NUM_THREADS": threads, "EXABENCH_MAX_THREADS": threads}


def ranks_argv(ranks: int, launch: Launch) -> tuple[list[str], int]:
    """How the ranks start here: within a real Slurm job of a Slurm rehearsal (ibrun on Stampede2), as
    a step of that job through the real srun; otherwise through mpirun."""
    if os.environ.get("SLURM_JOB_ID") and setting("HERE"):
        here = max(1, min(ranks, int(setting("RANKS", str(DEFAULT_RANKS))),
                          int(os.environ.get("SLURM_NTASKS", "0") or ranks)))
        nodes = min(here, int(os.environ.get("SLURM_JOB_NUM_NODES", "1")))
        return [real_command("srun"), f"--nodes={nodes}", f"--ntasks={here}", "--mpi=pmix", *launch.program], here
    return mpirun_argv(ranks, launch)


def mpirun_argv(ranks: int, launch: Launch) -> tuple[list[str], int]:
    """Open MPI's mpirun for the launch, skipping the stand-ins' folder: (argv, ranks started here)."""
    here = min(ranks, int(setting("RANKS", str(DEFAULT_RANKS))))
    bin_dir = setting("BIN")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir)
    mpirun = shutil.which("mpirun", path=path)
    if mpirun is None:
        raise ExabenchError("the rehearsal starts ranks with Open MPI's mpirun, and this machine has none on PATH")
    forwarded = [w for k in {**launch.env, **threads_here(here)} for w in ("-x", k)]
    # --noprefix: mpirun called by its full path would put its own bin folder first on the ranks' PATH
    # (as --prefix does), and `python3` would no longer be the rehearsal's Python.
    return [mpirun, "--noprefix", "--oversubscribe", "-np", str(here), *forwarded, *launch.program], here
