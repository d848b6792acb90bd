"""IBM Spectrum LSF with CSM (OLCF Summit, SummitDev).

- Submit: `bsub < script`. LSF reads #BSUB lines from a script on standard input (IBM Spectrum LSF
  10.1 command reference, bsub "command": "bsub options can also be specified in the standard input
  if the line begins with #BSUB"); `bsub script` parses them only where lsf.conf sets
  LSB_BSUB_PARSE_SCRIPT=Y (bsub "job_script"), so it is not used.
  https://www.ibm.com/docs/SSWRJV_10.1.0/lsf_command_ref/bsub.zz1argument.command.1.html
- Queue: `-q Q`.
- Pinning: in CSM expert mode only. IBM LSF bsub -csm "Enables expert mode for the CSM job
  submission, which allows you to specify a full resource requirement string for CSM resources"
  (www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.csm.1.html), and -nnodes, the easy mode's
  node count, "Do not use with the -csm y option" (.../bsub.nnodes.1.html): so no `-nnodes` and no
  `-m host` beside it (-m names candidate hosts, it does not place a CSM allocation). The resource
  string asks one launch node and each named compute node's usable cores, as jobs on Summit write it:
  `-R "1*{select[LN]span[hosts=1]} + 84*{select[CN && (hname == 'a01n01' || hname == 'a01n02')]
  order[!-slots:maxslots]span[ptile=42]}"` (csm_resources).
- Node list: the job's host file names each host once per slot, the host running the job script
  first (Summit's batch node, SummitDev's login node), which is no compute node and is jsrun's ERF
  host 0: `awk '!seen[$0]++' "$LSB_DJOB_HOSTFILE" | tail -n +2`.
- The user's jobs in a queue: `bjobs -noheader -o jobid -u USER -q Q` (bjobs reference); without -q,
  the user's unfinished jobs in every queue.
- Held until others end: `bsub -w 'ended(ID) && ended(ID)'` (ended: "The job state is EXIT or DONE"; "If
  you specify a dependency on a job that LSF cannot find ..., your job submission fails":
  https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.w.1.html).
- Allocation-wide settings: `-alloc_flags` sets the nodes' SMT mode for the whole job (OLCF Summit
  User Guide, "Hardware Threads"), `gpumps` starts NVIDIA MPS on every node for ranks sharing GPUs,
  `nvme` the node-local NVMe; `-core_isolation N`.
- Executor: snakemake-executor-plugin-lsf, whose resources are lsf_queue, lsf_project and lsf_extra.
"""

from __future__ import annotations

from exabench.campaign.schedulers.facts import SchedulerFacts

FACTS = SchedulerFacts(
    name="lsf", submit="bsub <", directive="#BSUB", queue="-q Q",
    node_list="awk '!seen[$0]++' \"$LSB_DJOB_HOSTFILE\" | tail -n +2",
    queued_by_user='bjobs -noheader -o jobid -u "$me" -q "$1" 2>/dev/null',
    after=('-w "$cond"', "ended(%s)", " && "), unfinished_by_user='bjobs -noheader -o jobid -u "$me"',
    pin="CSM expert mode: -csm y -R with the hosts' names, no -nnodes "
        "(https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.csm.1.html)",
    renders=frozenset({"core_spec", "alloc_flags"}), executor="lsf", rehearsal_book="lsf-olcf")


def request(site, layout, node_local: str) -> dict:
    smt = layout.smt if site.node.smt > 1 else 0
    gpu_mode = "mps" if layout.ranks_per_gpu > 1 else ""
    flags = [f"smt{smt}"] if smt else []
    flags += ["gpumps"] if gpu_mode == "mps" else []
    flags += ["nvme"] if node_local == "nvme" else []
    flags += [w for w in site.scheduler_options.get("alloc_flags", []) if w not in flags]
    return {"smt": smt, "gpu_mode": gpu_mode, "alloc_flags": tuple(flags)}


def csm_resources(site, nodes: tuple[str, ...]) -> str:
    """The CSM expert-mode resource requirement (bsub -csm y -R) placing a job on exactly `nodes`:
    the launch node, then every usable core (LSF's slots) of each named compute node."""
    cores = site.node.usable_cores
    hosts = " || ".join(f"hname == '{n}'" for n in nodes)
    return (f"1*{{select[LN]span[hosts=1]}} + {cores * len(nodes)}*{{select[CN && ({hosts})]"
            f"order[!-slots:maxslots]span[ptile={cores}]}}")


def pinned(request: dict, site, nodes: tuple[str, ...]) -> dict:
    return {**request, "lsf_resources": csm_resources(site, nodes)}  # the header's -csm y -R, not -nnodes


def flags(req) -> str:
    """The bsub options of an AllocationRequest beyond nodes, walltime, queue and project, as the
    executor plugin's lsf_extra (pasted into the bsub command line a shell parses) and as the header
    writes them: `-alloc_flags` once, its words space-separated in double quotes (OLCF Summit User
    Guide, "Allocation-wide Options": "Only one instance of the flag is accepted, and multiple
    alloc_flags values should be enclosed in quotes and space-separated"), `-core_isolation N`. The
    words are the schema's [a-z0-9_] only, so the quotes need no escaping."""
    out = [f'-alloc_flags "{" ".join(req.alloc_flags)}"'] if req.alloc_flags else []
    out += [f"-core_isolation {req.core_spec}"] if req.core_spec else []
    return " ".join(out)


def site_resources(site) -> dict:
    """Where any job of the site is charged and queued: queue and project."""
    return {key: value for key, value in (("lsf_queue", site.partition), ("lsf_project", site.account)) if value}


def executor_resources(site, job) -> dict:
    # As the header says it (-alloc_flags "smt4 gpumps", -core_isolation).
    res = {"lsf_extra": lambda wildcards: flags(job(wildcards).request)}
    if site.queues:  # each run's own queue, picked by its nodes and walltime (site.pick_queue)
        res["lsf_queue"] = lambda wildcards: job(wildcards).queue
    return res
