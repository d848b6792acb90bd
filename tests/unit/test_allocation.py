"""One allocation request per run (exabench.campaign.allocation): the batch header and the executor's
resources come from it, a bundle holds only runs whose requests are equal, every real site's default
campaign fits its queues without idle nodes, and a machine-scale ladder asks for what it uses."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from exabench.campaign import allocation, schedulers
from exabench.campaign.schedulers import lsf, slurm
from exabench.campaign.bundles import IDLE_SHARE, mixed_requests, plan_bundles
from exabench.campaign.plan import expand, node_hours
from exabench.campaign.render import render_bundle, render_script, RunPaths
from exabench.campaign.site import check_walltime, pick_queue, resolve_layout
from exabench.config import load_and_validate, validate
from exabench.errors import ConfigError
from exabench.pipeline import job_resources
from helpers_sites import FIXED_ROOT, PROFILES, REAL_SITES, REPO, site



def _default(name: str):
    s = site(name)
    config_file = f"profiles/{name}/campaign.yaml"
    config = load_and_validate(REPO / config_file, "config")
    runs = expand(config, s, config_file)
    return s, runs, plan_bundles(runs, s, config["campaign"], config_file)


@pytest.mark.parametrize("name", REAL_SITES)
def test_every_real_sites_default_campaign_has_no_bundle_mixing_allocation_settings(name):
    s, runs, bundles = _default(name)
    assert [b.name for b in bundles if mixed_requests(b, s)] == []
    for b in bundles:
        assert check_walltime(s, b.minutes, b.nodes) == b.queue  # fits a named queue of the site
        assert b.idle_node_hours <= IDLE_SHARE * b.node_hours
    hours = sum(b.node_hours for b in bundles)
    assert sum(b.idle_node_hours for b in bundles) <= IDLE_SHARE * hours


@pytest.mark.parametrize("name", REAL_SITES)
def test_every_real_site_models_its_queues_with_the_page_that_documents_them(name):
    s = site(name)
    assert s.queues, name
    for q in s.queues:
        assert q.source.startswith("https://") and q.max_walltime_min > 0, (name, q.name)
    if name == "theta":  # ALCF: default's 128-node minimum, 3 h below 256 nodes, debug 1-8 nodes for 1 h
        (debug,) = [q for q in s.queues if q.name == "debug-cache-quad"]
        smallest = min((q for q in s.queues if q.submit_as == "default"), key=lambda q: q.max_nodes)
        assert (debug.max_nodes, debug.max_walltime_min) == (8, 60)
        assert (smallest.charged_min_nodes, smallest.max_nodes, smallest.max_walltime_min,
                smallest.min_walltime_min) == (128, 255, 180, 30)
    if name == "titan":  # OLCF Titan bin 5: 1-125 nodes, 2 h
        assert [(q.min_nodes, q.max_nodes, q.max_walltime_min) for q in s.queues][0] == (1, 125, 120)


def test_theta_plan_names_the_debug_queue_that_runs_one_bundle_at_a_time():
    from exabench.campaign.bundles import running_limits
    s, _, bundles = _default("theta")
    sent = sum(b.queue == "debug-cache-quad" for b in bundles)
    assert running_limits(bundles, s) == {"debug-cache-quad": (sent, 1)} and sent > 1


def test_summits_smt4_analytics_runs_never_share_an_smt1_allocation():
    # The CORAL-2 BDAS sweep at SMT1 and SMT4: before, 26 of 47 bundles ran 84-thread SMT4 runs
    # under -alloc_flags "smt1" (the widest run's).
    s, runs, bundles = _default("summit")
    assert {r.layout.smt for r in runs} == {1, 4}
    for b in bundles:
        smts = {r.layout.smt for r in b.runs}
        assert len(smts) == 1, b.name
        text = render_bundle(list(b.runs), s, Path(FIXED_ROOT), b.name)
        assert f'#BSUB -alloc_flags "smt{smts.pop()}' in text, b.name


def test_a_bundle_of_runs_whose_requests_differ_is_refused_naming_the_setting():
    s, runs, _ = _default("summit")
    smt1 = next(r for r in runs if r.layout.smt == 1 and r.benchmark == "kmeans")
    smt4 = next(r for r in runs if r.layout.smt == 4 and r.benchmark == "kmeans")
    with pytest.raises(ConfigError, match=r"mixes allocation-wide settings \(smt 1 vs 4"):
        render_bundle([smt1, smt4], s, Path(FIXED_ROOT), "mixed")
    # planning splits them instead
    bundles = plan_bundles([smt1, smt4], s, "c", "c.yaml")
    assert [len(b.runs) for b in bundles] == [1, 1] and not any(mixed_requests(b, s) for b in bundles)


def test_the_header_and_the_executors_resources_come_from_the_same_request():
    # Frontier at SMT2 (--threads-per-core=2), NVMe staging (-C nvme); Perlmutter's GPUs per node.
    fr = site("frontier", storage={**site("frontier").storage, "stage_in_from": "/lustre/data",
                                   "node_local": "/mnt/bb/$USER", "node_local_kind": "nvme"})
    pm = site("perlmutter")
    sm = site("summit")
    cases = [(fr, resolve_layout(fr, nodes=2, smt=2)), (pm, resolve_layout(pm, nodes=2)),
             (sm, resolve_layout(sm, nodes=2, ranks_per_node=12, smt=4))]
    for s, layout in cases:
        cfg = validate({"timeout_s": 600, "benchmarks": [{"name": "kmeans"}]}, "config", "c.yaml")
        run = dataclasses.replace(expand(cfg, s, "c.yaml")[0], layout=layout)
        text, _ = render_script(run, s, RunPaths(Path(FIXED_ROOT) / s.name, run.run_id))
        req = allocation.request(s, layout)
        res = job_resources(s, lambda wildcards: run)
        if s.scheduler == "slurm":
            for flag in slurm.flags(req):
                assert f"#SBATCH {flag}\n" in text and flag in res["slurm_extra"](None), (s.name, flag)
            if req.constraint:
                assert f"#SBATCH --constraint={req.constraint}\n" in text
                assert res["constraint"](None) == req.constraint
        else:
            words = " ".join(req.alloc_flags)
            assert f'#BSUB -alloc_flags "{words}"\n' in text and res["lsf_extra"](None) == f'-alloc_flags "{words}"'
    assert slurm.flags(allocation.request(*cases[0])) == ["--threads-per-core=2"]
    assert allocation.request(*cases[0]).constraint.endswith("nvme")
    assert slurm.flags(allocation.request(*cases[1])) == ["--gpus-per-node=4"]
    assert allocation.request(*cases[2]).alloc_flags == ("smt4", "gpumps")


def test_lsf_alloc_flags_reach_bsub_as_one_quoted_word_list_from_header_and_executor_alike():
    # OLCF Summit User Guide, "Allocation-wide Options": -alloc_flags once, "multiple alloc_flags values
    # enclosed in quotes and space-separated" (#BSUB -alloc_flags "gpumps smt1"). Summit with core
    # isolation: the executor's lsf_extra, which the LSF plugin pastes into a `bsub ...` command line
    # run by a shell, must give bsub the same arguments as the header, core isolation included.
    s = site("summit", scheduler_options={**site("summit").scheduler_options, "core_spec": 2})
    layout = resolve_layout(s, nodes=2, ranks_per_node=12, ranks_per_gpu=2, cores_per_rank=3, smt=4,
                            threads_per_rank=12)
    cfg = validate({"timeout_s": 600, "benchmarks": [{"name": "kmeans"}]}, "config", "c.yaml")
    run = dataclasses.replace(expand(cfg, s, "c.yaml")[0], layout=layout)
    text, _ = render_script(run, s, RunPaths(Path(FIXED_ROOT) / s.name, run.run_id))
    extra = job_resources(s, lambda wildcards: run)["lsf_extra"](None)
    assert extra == '-alloc_flags "smt4 gpumps" -core_isolation 2'
    header = [shlex.split(line)[1:] for line in text.splitlines()
              if line.startswith(("#BSUB -alloc_flags", "#BSUB -core_isolation"))]
    assert shlex.split(extra) == [w for words in header for w in words] == [
        "-alloc_flags", "smt4 gpumps", "-core_isolation", "2"]
    assert lsf.flags(allocation.request(s, resolve_layout(s, nodes=1))) == \
        '-alloc_flags "smt1" -core_isolation 2'


def test_a_setting_the_scheduler_cannot_render_is_refused():
    s = site("theta", scheduler_options={**site("theta").scheduler_options, "cpu_freq": "high"})
    with pytest.raises(ConfigError, match=r"scheduler_options.cpu_freq.*unset with scheduler cobalt.*slurm"):
        allocation.request(s, resolve_layout(s))


def test_the_summit_machine_ladder_asks_for_the_node_hours_it_uses():
    # ResNet-50 from 1 to 4,096 nodes: before, one 4,096-node 395-minute bundle, 26,965 node-hours
    # requested for 4,778 of work; now one bundle per node count, nothing idle.
    s = site("summit")
    cfg = validate({"campaign": "ladder", "timeout_s": 1800, "benchmarks": [
        {"name": "resnet50", "sweep": {"nodes": "1..4096", "ranks_per_node": ["per_gpu"],
                                       "threads_per_rank": ["fill"], "precision": ["fp16"]}}]},
                   "config", "ladder.yaml")
    runs = expand(cfg, s, "ladder.yaml")
    bundles = plan_bundles(runs, s, "ladder", "ladder.yaml")
    requested = sum(b.node_hours for b in bundles)
    assert len(bundles) == 13 and sum(b.idle_node_hours for b in bundles) == 0
    assert requested == pytest.approx(8191 * 35 / 60)  # 4,778.1: each run's nodes for its own job
    assert sum(b.working_node_hours for b in bundles) == pytest.approx(8191 * 30 / 60)
    assert [pick_queue(s, b.nodes, b.minutes) for b in bundles] == ["batch"] * 13


def test_a_run_no_queue_admits_names_its_nodes_walltime_and_the_closest_queue():
    s = site("theta")
    cfg = validate({"timeout_s": 14400, "benchmarks": [{"name": "kmeans", "sweep": {"nodes": [16]}}]},
                   "config", "theta.yaml")
    with pytest.raises(ConfigError) as err:
        expand(cfg, s, "theta.yaml")
    text = str(err.value)
    assert re.search(r"run 'kmeans\S+n16\S*' a 245-minute job on 16 node\(s\)", text), text
    assert "closest: default-128 via default (1-255 nodes, charged as at least 128 nodes, 30-180 min)" in text


def test_theta_charges_small_default_jobs_128_nodes_and_30_minutes():
    # ALCF: "Jobs smaller than the minimum allocation will be allocated and charged for" 128 nodes;
    # "a minimum job time of thirty minutes". A 16-node, 20-minute run: its bundle is charged 128
    # nodes (112 of them idle) for the 30 minutes its header asks (the plan counts those, not 20).
    s = site("theta")
    cfg = validate({"campaign": "t", "timeout_s": 900, "benchmarks": [{"name": "kmeans", "sweep": {"nodes": [16]}}]},
                   "config", "theta.yaml")
    (b,) = plan_bundles(expand(cfg, s, "theta.yaml"), s, "t", "theta.yaml")
    assert (b.nodes, b.charged_nodes, b.minutes, b.queue) == (16, 128, 30, "default")
    assert b.idle_node_hours == pytest.approx(112 * 15 / 60)
    assert b.node_hours == pytest.approx(128 * 30 / 60)
    text = render_bundle(list(b.runs), s, Path(FIXED_ROOT), b.name)
    assert "#COBALT -n 16\n" in text and "#COBALT -t 30\n" in text


# The nodes and walltime a batch header asks for, per scheduler, as the schedulers read them.
HEADER_NODES = re.compile(r"^#(?:SBATCH (?:-N ?|--nodes[= ])|BSUB -nnodes |PBS -l (?:select|nodes)=|COBALT -n )(\d+)",
                          re.M)
HEADER_TIME = re.compile(r"^#(?:SBATCH (?:-t ?|--time[= ])|BSUB -W |PBS -l walltime=|COBALT -t )(\S+)", re.M)


def _header_minutes(text: str) -> int:
    """[D-]HH:MM:SS, HH:MM or MM (Slurm, LSF, PBS, Cobalt) -> minutes; a part-minute counts whole."""
    (spec,) = HEADER_TIME.findall(text)
    days, _, clock = spec.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if len(parts) == 3:
        minutes = parts[0] * 60 + parts[1] + (parts[2] > 0)
    elif len(parts) == 2:
        minutes = parts[0] * 60 + parts[1]
    else:
        minutes = parts[0]
    return int(days or 0) * 1440 + minutes


def _header_node_hours(text: str) -> float:
    (nodes,) = HEADER_NODES.findall(text)
    return int(nodes) * _header_minutes(text) / 60


@pytest.mark.parametrize("name", REAL_SITES)
def test_the_plans_node_hours_are_what_the_rendered_headers_ask(name):
    # Theta, `scale: machine`, timeout_s 60: the plan said 807.9 node-hours (6 minutes a job) while
    # every header on 128-4,096 nodes asked the default queue's shortest job, 30 minutes: 4,033.5.
    # Each site's own campaign with that short time limit, its runs and its bundles alike.
    s = site(name)
    config_file = f"profiles/{name}/campaign.yaml"
    config = validate({**load_and_validate(REPO / config_file, "config"), "timeout_s": 60}, "config", config_file)
    runs = expand(config, s, config_file)
    bundles = plan_bundles(runs, s, config["campaign"], config_file)
    assert all(b.charged_nodes in (0, b.nodes) for b in bundles)  # the headers' nodes are the nodes charged
    root = Path(FIXED_ROOT) / s.name
    headers = sum(_header_node_hours(render_bundle(list(b.runs), s, Path(FIXED_ROOT), b.name)) for b in bundles)
    assert sum(b.node_hours for b in bundles) == pytest.approx(headers)
    scripts = [render_script(r, s, RunPaths(root, r.run_id))[0] for r in runs]
    assert sum(node_hours(r, s) for r in runs) == pytest.approx(sum(_header_node_hours(t) for t in scripts))
    executor = job_resources(s, lambda wildcards: runs[-1])  # what a Snakemake executor plugin asks (Slurm, LSF)
    assert "runtime" not in executor or executor["runtime"](None) == _header_minutes(scripts[-1])


# --- the header and the executor ask for one allocation --------------------------------------------

# sbatch options written apart from their value (the Slurm plugin's command line), and short names.
TAKES_VALUE = {"--job-name", "--output", "--comment", "-A", "-p", "-t", "-C", "--mem", "--mem-per-cpu", "-D",
               "--clusters"}
LONG_NAME = {"-A": "--account", "-p": "--partition", "-t": "--time", "-C": "--constraint", "-N": "--nodes",
             "-n": "--ntasks", "-c": "--cpus-per-task"}
ASKED = ("--nodes", "--cpus-per-task", "--gpus-per-node", "--threads-per-core", "--partition", "--qos",
         "--account", "--constraint", "--core-spec", "--cpu-freq", "--exclusive")


def _sbatch_options(words) -> dict:
    out, it = {}, iter(words)
    for word in it:
        if not word.startswith("-"):
            continue
        name, eq, value = word.partition("=")
        if not eq:
            value = next(it) if name in TAKES_VALUE else True
        out[LONG_NAME.get(name, name)] = value
    return out


def _clock_minutes(spec: str) -> int:
    return _header_minutes(f"#SBATCH --time={spec}") if ":" in spec else int(spec)


def _asked(opts: dict) -> dict:
    """What a set of sbatch options asks, in one form: tasks in total and per node, memory per node
    in MB (None: not asked), minutes, and the other allocation options as written."""
    nodes = int(opts["--nodes"])
    tasks = int(opts["--ntasks"]) if "--ntasks" in opts else nodes * int(opts["--ntasks-per-node"])
    mem = opts.get("--mem")
    return {**{k: str(opts[k]) for k in ASKED if k in opts},
            "tasks": tasks, "tasks_per_node": int(opts.get("--ntasks-per-node", tasks // nodes)),
            "mem_mb": int(str(mem).removesuffix("M")) if mem else None,
            "minutes": _clock_minutes(opts["--time"])}


class _Resources(dict):
    __getattr__ = dict.__getitem__


def _slurm_submit_command(res: dict) -> str:
    """The sbatch command line snakemake-executor-plugin-slurm builds from a job's resources
    (its own submit_string), after Snakemake's default mem_mb where the rule gives none."""
    from types import SimpleNamespace
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    resources = _Resources({"mem_mb": 1000, **res})  # `snakemake --help`: mem_mb=min(max(2*input.size_mb, 1000), 8000)
    job = SimpleNamespace(resources=resources, threads=1)
    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": "c", "workdir": "",
              "account": f"-A {res['slurm_account']}" if res.get("slurm_account") else "",
              "partition": f"-p {res['slurm_partition']}" if res.get("slurm_partition") else ""}
    return get_submit_command(job, params)


def _default_plan_runs(name: str):
    """One run per distinct layout and time limit of the profile's default campaign (its configfile)."""
    import yaml
    profile = yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())
    config_file = profile.get("configfile", "config/config.yaml")  # the Snakefile's default (profiles/local)
    runs = expand(load_and_validate(REPO / config_file, "config"), site(name), config_file)
    return list({(r.layout, r.timeout_s): r for r in runs}.values())


def _header_asks(s, text: str) -> dict:
    """What a rendered header asks, read as its scheduler reads it: the sbatch options (Slurm), or the
    rehearsal stand-in's reading of the #BSUB/#PBS/#COBALT lines (the directives bsub and qsub parse;
    those headers ask nodes, queue and time only: the launch line sizes tasks, CPUs and GPUs)."""
    from exabench.rehearsal import batch
    from exabench.rehearsal.rules import book
    if s.scheduler == "slurm":
        asked = _asked(_sbatch_options(w for line in text.splitlines() if line.startswith("#SBATCH ")
                                       for w in shlex.split(line)[1:]))
        return {"nodes": int(asked["--nodes"]), "tasks": asked["tasks"], "minutes": asked["minutes"],
                "cpus_per_task": int(asked.get("--cpus-per-task", 0)),
                "gpus_per_node": int(asked.get("--gpus-per-node", 0)), "mem_mb": asked["mem_mb"] or 0,
                "queue": asked.get("--qos" if allocation.queue_key(s) == "qos" else "--partition", "")}
    if s.scheduler == "none":
        return {}
    name = schedulers.rehearsal_book(s)
    job = batch.job_of(name, batch.parse_options(name, batch.directives(text, book(name)["directive"])), s)
    return {"nodes": job.nodes, "minutes": job.minutes, "queue": job.queue}


def _executor_asks(s, res: dict, run) -> dict:
    """What the executor plugin asks for a run: the sbatch line snakemake-executor-plugin-slurm builds
    from its resources; the LSF plugin's resources as they are."""
    values = {k: v(run) if callable(v) else v for k, v in res.items()}
    if s.scheduler == "slurm":
        asked = _asked(_sbatch_options(shlex.split(_slurm_submit_command(values))))
        return {"nodes": int(asked["--nodes"]), "tasks": asked["tasks"], "minutes": asked["minutes"],
                "cpus_per_task": int(asked.get("--cpus-per-task", 0)),
                "gpus_per_node": int(asked.get("--gpus-per-node", 0)), "mem_mb": asked["mem_mb"] or 0,
                "queue": asked.get("--qos" if allocation.queue_key(s) == "qos" else "--partition", "")}
    return {"nodes": values["nodes"], "minutes": values["runtime"], "queue": values.get("lsf_queue", ""),
            "tasks": values["tasks"] or values["nodes"] * values["tasks_per_node"],
            "cpus_per_task": max(0, values["cpus_per_task"]), "mem_mb": values["mem_mb"]}


@pytest.mark.parametrize("name", PROFILES)
def test_every_profiles_header_and_executor_ask_for_the_one_allocation_of_each_job(name):
    # One JobAllocation per job (allocation.run_job): every profile's header asks its nodes, tasks,
    # CPUs per task, GPUs, memory, queue and time, as the scheduler reads the header, and the executor
    # plugin (Slurm, LSF) asks the same. Stampede2 (ibrun) before: the header asked no CPUs per task,
    # the executor --cpus-per-task=128 for a 32-core rank; every Slurm executor job asked 90 % of a
    # node's memory (or Snakemake's 1,000 MB), no header any (TACC refuses --mem: now neither asks).
    s = site(name)
    runs = _default_plan_runs(name)
    assert runs, name
    res = job_resources(s, lambda wildcards: wildcards)  # the wildcards stand for the run they name
    assert bool(res) == bool(schedulers.of(s).FACTS.executor), name  # PBS, Cobalt, none: bundles only
    for run in runs:
        job = allocation.run_job(s, run)
        text, _ = render_script(run, s, RunPaths(Path(FIXED_ROOT) / s.name, run.run_id))
        header = _header_asks(s, text)
        one = {"nodes": job.nodes, "tasks": job.tasks, "cpus_per_task": job.cpus_per_task,
               "gpus_per_node": job.gpus_per_node, "mem_mb": job.mem_mb, "minutes": job.minutes,
               "queue": job.queue or job.request.queue}
        assert header == {k: one[k] for k in header}, (name, run.run_id)
        if s.scheduler == "slurm":
            assert set(header) == set(one), name  # every field written in the header
        if res:
            executor = _executor_asks(s, res, run)
            assert executor == {k: one[k] for k in executor}, (name, run.run_id)
        if s.scheduler == "lsf":  # the allocation-wide flags, in the header and lsf_extra alike
            bsub = dict(re.findall(r"^#BSUB (-\S+) ?(.*)$", text, re.M))
            flags = " ".join(f"{k} {bsub[k]}" for k in ("-alloc_flags", "-core_isolation") if k in bsub)
            assert flags == res["lsf_extra"](run) == lsf.flags(job.request), (name, run.run_id)
    if name == "stampede2":  # ibrun sizes ranks from -n alone; TACC's Slurm refuses --mem
        assert "--cpus-per-task" not in text and "--mem" not in text
        assert res["cpus_per_task"](runs[-1]) == -1 and res["mem_mb"](runs[-1]) == 0


def test_a_slurm_site_asks_ninety_percent_of_a_nodes_memory_in_header_and_executor_alike():
    s = site("frontier")
    cfg = validate({"timeout_s": 600, "benchmarks": [{"name": "kmeans"}]}, "config", "c.yaml")
    run = expand(cfg, s, "c.yaml")[0]
    text, _ = render_script(run, s, RunPaths(Path(FIXED_ROOT) / s.name, run.run_id))
    assert "#SBATCH --mem=460800M\n" in text  # 512 GB x 0.9
    assert job_resources(s, lambda wildcards: run)["mem_mb"](None) == 460800
    assert "--mem 460800" in _slurm_submit_command({k: v(None) if callable(v) else v
                                                    for k, v in job_resources(s, lambda w: run).items()})


def test_every_scheduler_submits_from_one_table_and_lsf_reads_its_script_on_standard_input(tmp_path):
    # Two tables disagreed: bundles said `bsub script`, node groups `bsub < script`. IBM LSF parses
    # #BSUB lines of a script given as an argument only where lsf.conf sets LSB_BSUB_PARSE_SCRIPT=Y.
    from exabench.campaign.bundles import pending_report
    from exabench.config import load_yaml
    schema = load_yaml(REPO / "workflow" / "schemas" / "site.schema.yaml")
    assert "enum" not in schema["properties"]["scheduler"]  # the scheduler modules are the list
    assert {n: m.FACTS.submit for n, m in schedulers.SCHEDULERS.items()} == {
        "cobalt": "qsub", "lsf": "bsub <", "none": "bash", "pbs": "qsub", "slurm": "sbatch"}
    s, _, bundles = _default("summitdev")
    text = pending_report(bundles, s, tmp_path, "--profile profiles/summitdev")
    assert f": bsub < {tmp_path}/bundles/{bundles[0].name}.sh" in text, text
    assert allocation.submit_line(site("frontier"), "/a b/x.sh") == "sbatch '/a b/x.sh'"


def test_frontiers_largest_job_is_olcfs_9472_nodes_of_9856():
    # OLCF's Frontier User Guide: "a total of 9,856 AMD compute nodes"; bin 1 of "Job Priority by
    # Node Count" takes 5,645-9,472 nodes for 12 h (9,408 was an older guide's).
    s = site("frontier")
    assert s.max_nodes == 9472 and max(q.max_nodes for q in s.queues) == 9472
    assert pick_queue(s, 9472, 720) == "batch"
    assert "9,856" in s.description and "9,856" in (REPO / "profiles/frontier/site.yaml").read_text()
