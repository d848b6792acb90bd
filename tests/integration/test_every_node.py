"""One job per node or node group (exabench.campaign.node_groups): the `every_node` key's node lists
and groups, the group scripts (pinned, sequential, skipping what is recorded), and a real group
job run here with bash. The same scripts on the loopback Slurm: tests/integration/test_slurm.py."""

from __future__ import annotations

import json
import re
import socket
import subprocess

import pytest

from exabench.campaign.node_groups import NodeGroup, expand_hostlist, group_files, group_runs, node_groups
from exabench.campaign.node_sweep import node_run_files
from exabench.campaign.plan import expand
from exabench.campaign.render import RunPaths, write_runs_files
from exabench.config import validate
from exabench.errors import ConfigError

from helpers_sites import REPO, site


def _config(every_node: dict, sweep_nodes=(1, 2)) -> dict:
    return validate({"campaign": "acc", "preset": "tiny", "timeout_s": 120, "every_node": every_node,
                     "benchmarks": [{"name": "kmeans", "sweep": {"nodes": list(sweep_nodes), "ranks_per_node": [1]}},
                                    {"name": "gemm", "params": {"precision": "fp32"},
                                     "sweep": {"ranks_per_node": [1]}}]}, "config", "acc.yaml")


def test_hostlist_expressions_expand_like_slurms():
    assert expand_hostlist("n[1-3,7],gpu[01-02]", "c.yaml", "every_node.nodes") == [
        "n1", "n2", "n3", "n7", "gpu01", "gpu02"]
    assert expand_hostlist("r[1-2]n[08-09]", "c.yaml", "k") == ["r1n08", "r1n09", "r2n08", "r2n09"]
    assert expand_hostlist("login1", "c.yaml", "k") == ["login1"]
    for bad, why in [("n[1-3", "unbalanced"), ("n[3-1]", "counts down"), ("n[a-b]", "not N or N-M"),
                     ("n 1", "not a valid node name")]:
        with pytest.raises(ConfigError, match=rf"c.yaml: key 'k' = '{re.escape(bad)}' .*{why}.*hostlist expression"):
            expand_hostlist(bad, "c.yaml", "k")


def test_groups_single_pairs_and_racks():
    s = site("slurm-local", max_nodes=8)
    assert node_groups({}, s, "c.yaml") == []
    assert node_groups({"every_node": {"nodes": "n[1-4]", "group": 1}}, s, "c.yaml")[1] == NodeGroup("n2", ("n2",))
    assert node_groups({"every_node": {"nodes": ["a", "b", "c", "d"], "group": 2}}, s, "c.yaml") == [
        NodeGroup("a..b", ("a", "b")), NodeGroup("c..d", ("c", "d"))]
    racks = node_groups({"every_node": {"group": "rack", "racks": {"r1": "n[1-2]", "r2": ["n3", "n4"]}}}, s, "c.yaml")
    assert racks == [NodeGroup("r1", ("n1", "n2")), NodeGroup("r2", ("n3", "n4"))]


@pytest.mark.parametrize("spec, key, why", [
    ({"nodes": "n[1-3]", "group": 2}, "every_node.group", "leaves 1 node"),
    ({"nodes": ["n1", "n1"]}, "every_node.nodes", "names node 'n1' twice"),
    ({"group": 1}, "every_node.nodes", "is missing on site 'slurm-local'"),
    ({"group": "rack", "racks": {"r1": "n[1-2]", "r2": "n[2-3]"}}, "every_node.racks.r2", "is also in rack r1"),
    ({"nodes": "n[1-2]", "racks": {"r1": "n1"}}, "every_node.racks", "only with group: rack"),
    ({"nodes": "n[1-16]", "group": 16}, "every_node.nodes", "names 16 nodes; valid: at most the site's max_nodes = 8"),
])
def test_bad_every_node_keys_name_the_key(spec, key, why):
    with pytest.raises(ConfigError, match=rf"^c.yaml: key '{re.escape(key)}' .*{why}"):
        node_groups({"every_node": spec}, site("slurm-local", max_nodes=8), "c.yaml")


def test_a_group_without_runs_of_its_size_is_refused_at_plan_time(tmp_path):
    from exabench.campaign.node_groups import check_groups
    s = site("slurm-local")
    config = _config({"nodes": "n[1-2]", "group": 2}, sweep_nodes=(1,))
    with pytest.raises(ConfigError, match=r"acc.yaml: key 'every_node' = 'n1..n2' has 2 node\(s\) and no run planned "
                                          r"on 2; valid: .*\(nodes 1\)"):
        check_groups(node_groups(config, s, "acc.yaml"), expand(config, s, "acc.yaml"), "acc.yaml")


def test_slurm_group_scripts_are_pinned_sequential_and_skip_recorded_runs(tmp_path):
    s = site("slurm-local")
    config = _config({"nodes": "n[1-2]"})
    runs = expand(config, s, "acc.yaml")
    groups = node_groups(config, s, "acc.yaml")
    files = {p.name: text for p, text, _ in group_files(runs, s, tmp_path, groups, "acc")}
    assert sorted(files) == ["n1.sh", "n2.sh", "submit.sh"]
    n2 = files["n2.sh"]
    assert "#SBATCH --nodes=1\n" in n2 and "#SBATCH --nodelist=n2\n" in n2
    single = [r.run_id for r in runs if r.layout.nodes == 1]
    assert len(single) == 2 and [r.run_id for r in group_runs(runs, groups[1])] == single
    calls = re.findall(r"^run_on_group (\S+) (\S+)$", n2, re.M)  # in sequence, no '&'
    assert [(c[0].split("/")[-2], c[1].split("/")[-1]) for c in calls] == [
        (rid, f"{rid}.node-n2.json") for rid in single]
    assert "--node n2 --group-nodes n2" in n2
    # The allocation holds the group's runs' time limits summed, plus the margin.
    assert "#SBATCH --time=00:09:00\n" in n2
    assert files["submit.sh"].count("\nsubmit ") == 2 and 'send() { sbatch "$1"; }' in files["submit.sh"]
    pairs = {p.name: text for p, text, _ in group_files(runs, s, tmp_path, node_groups(
        {"every_node": {"nodes": ["n1", "n2"], "group": 2}}, s, "c.yaml"), "acc")}
    assert "#SBATCH --nodes=2\n" in pairs["n1..n2.sh"] and "#SBATCH --nodelist=n1,n2\n" in pairs["n1..n2.sh"]
    assert pairs["n1..n2.sh"].count("run_on_group /") == 1  # the one two-node run


def test_node_run_pins_a_group_and_keeps_ids_per_group(tmp_path):
    s = site("slurm-local")
    runs = [r for r in expand(_config({"nodes": "n[1-2]"}), s, "acc.yaml") if r.layout.nodes == 2]
    write_runs_files(runs, s, tmp_path)
    spec = node_run_files(RunPaths(tmp_path, runs[0].run_id).spec, "n1..n2", ("n1", "n2"))
    node = json.loads(spec.read_text())
    assert node["run_id"] == f"{runs[0].run_id}.node-n1..n2" and node["group_nodes"] == ["n1", "n2"]
    assert node["launch_line"].startswith("srun --nodes=2 --nodelist=n1,n2 ")
    assert str(spec) in node["launch_line"] and node["paths"]["record"].endswith(
        f"records/nodes/{runs[0].run_id}.node-n1..n2.json")
    with pytest.raises(Exception, match="uses 2 nodes; valid for every-node runs: runs on 1 nodes only"):
        node_run_files(RunPaths(tmp_path, runs[0].run_id).spec, "n1", ("n1",))


@pytest.mark.timeout(240)
def test_group_job_runs_its_runs_in_sequence_here_and_skips_them_when_resubmitted(tmp_path):
    """scheduler none: the group is this host; the script runs for real, twice."""
    from exabench.io import atomic_write_many
    s = site("local")
    config = validate({"campaign": "acc", "preset": "tiny", "timeout_s": 120, "every_node": {"group": 1},
                       "benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1], "k": [2, 3]}}]},
                      "config", "acc.yaml")
    runs = expand(config, s, "acc.yaml")
    [group] = node_groups(config, s, "acc.yaml")
    assert group.nodes == (socket.gethostname(),)
    write_runs_files(runs, s, tmp_path)
    atomic_write_many(group_files(runs, s, tmp_path, [group], "acc"))
    script = tmp_path / "nodes" / "groups" / "submit.sh"  # bash <group>.sh on a site without scheduler
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    first = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=200)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    records = sorted((tmp_path / "records" / "nodes").glob("*.json"))
    assert [p.name for p in records] == [f"{r.run_id}.node-{group.name}.json" for r in runs]
    assert {json.loads(p.read_text())["status"] for p in records} == {"ok"}
    assert "2 run(s), 0 failed to execute, 0 recorded before" in first.stdout
    stamps = [p.stat().st_mtime_ns for p in records]
    again = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 0 and "2 run(s), 0 failed to execute, 2 recorded before" in again.stdout
    assert [p.stat().st_mtime_ns for p in records] == stamps


def test_lsf_groups_pin_hosts_and_pbs_is_refused(tmp_path):
    summit = site("summit")
    config = validate({"campaign": "acc", "preset": "tiny", "timeout_s": 120,
                       "every_node": {"nodes": "h[1-4]", "group": 2},
                       "benchmarks": [{"name": "kmeans", "sweep": {"nodes": [2], "ranks_per_node": [6]}}]},
                      "config", "acc.yaml")
    files = {p.name: t for p, t, _ in group_files(expand(config, summit, "acc.yaml"), summit, tmp_path,
                                                   node_groups(config, summit, "acc.yaml"), "acc")}
    # IBM CSM expert mode (bsub -csm y), which takes no -nnodes: the launch node and each named node's 42 cores.
    assert ('#BSUB -csm y\n#BSUB -R "1*{select[LN]span[hosts=1]} + 84*{select[CN && (hname == \'h3\' || hname == '
            '\'h4\')]order[!-slots:maxslots]span[ptile=42]}"\n') in files["h3..h4.sh"]
    assert "-nnodes" not in files["h3..h4.sh"] and "#BSUB -m " not in files["h3..h4.sh"]
    assert 'send() { bsub < "$1"; }' in files["submit.sh"]
    with pytest.raises(ConfigError, match=r"key 'scheduler' = 'pbs' cannot pin a job to named nodes; valid: lsf, "
                                          r"none, slurm for every_node groups .*every_node_script"):
        node_groups(config, site("polaris"), "acc.yaml")


# -- the whole-allocation sweep on every real site (render only: no LSF, PBS or Cobalt here) ----------

def _sweep(site_name: str, tmp_path, nodes: int | None = None):
    from exabench.campaign.node_sweep import node_sweep_files, sweep_nodes
    from exabench.campaign.site import default_config_file
    from exabench.config import load_and_validate
    from exabench.io import atomic_write_many
    s = site(site_name)
    config_file = default_config_file(str(REPO / "profiles" / site_name / "site.yaml"))
    runs = expand(load_and_validate(config_file, "config"), s, config_file)
    files = node_sweep_files(runs, s, tmp_path, nodes or sweep_nodes(s), tmp_path / "nodes" / "every-node.sh")
    atomic_write_many(files)
    return s, runs, {p.name: text for p, text, _ in files}


# The sites whose launcher has one launch step across every node (launchers.facts(...).node_step).
STEP_SITES = ["perlmutter", "frontier", "cori-knl"]


@pytest.mark.parametrize("site_name", STEP_SITES)
def test_every_real_site_renders_its_every_node_jobs_and_bash_parses_them(site_name, tmp_path):
    s, runs, files = _sweep(site_name, tmp_path)
    for name in files:
        check = subprocess.run(["bash", "-n", str(tmp_path / "nodes" / name)], capture_output=True, text=True)
        assert check.returncode == 0, (name, check.stderr)
    jobs = [t for n, t in files.items() if n != "every-node.sh" or len(files) == 1]
    # Every single-node run of the campaign, each in exactly one job, one agent step each; no multi-node run.
    called = sorted(re.findall(r"node-agent --spec \S+/runs/([^/\s]+)/spec.json", "".join(jobs)))
    assert called == sorted(r.run_id for r in runs if r.layout.nodes == 1)
    assert all(t.count("-m exabench node-prepare ") == 1 for t in jobs)


# The other real sites (jsrun, aprun, mpiexec, ibrun) run it in node worlds: tests/integration/test_node_worlds.py.


def test_frontier_every_node_job_is_one_launch_step_per_run_over_all_its_nodes(tmp_path):
    # 9,472 nodes (the largest queue's) x the default campaign's single-node runs: the batch node runs
    # one preparation and, per run, one srun across every node; no loop over the nodes, nothing in
    # the background; the walltime holds the runs and the preparation's budget.
    from exabench.campaign.node_sweep import prepare_budget_s
    s, runs, files = _sweep("frontier", tmp_path)
    [text] = files.values()
    single = [r for r in runs if r.layout.nodes == 1]
    assert "#SBATCH --nodes=9472\n" in text  # Frontier's largest job (OLCF's Frontier guide)
    assert "for " not in text and "&\n" not in text and "wait" not in text
    steps = re.findall(r"^srun --nodes=\"\$count\" --ntasks=\"\$count\" --ntasks-per-node=1 "
                       r"--nodelist=\"\$nodelist\" --overlap --cpu-bind=none --kill-on-bad-exit=0 \S+ -m exabench "
                       r"node-agent --spec (\S+) \|\| status=1$", text, re.M)
    assert len(steps) == len(single) and text.count("srun ") == len(single)
    assert text.index("node-prepare") < text.index("node-agent")
    hours, minutes = map(int, re.search(r"^#SBATCH --time=(\d+):(\d+):00$", text, re.M).groups())
    runs_min = sum(r.timeout_s for r in single) / 60
    prepare_min = prepare_budget_s(9472, len(single)) / 60
    assert 60 * hours + minutes >= runs_min + prepare_min
    assert f"({runs_min:.0f} min) plus the preparation's budget ({prepare_min:.0f} min: 9472 nodes x " in text
    print(f"\nFrontier every-node job: {len(single)} runs on 9,472 nodes, walltime {hours}:{minutes:02d} "
          f"(the runs {runs_min:.0f} min + preparation budget {prepare_min:.0f} min)")


def test_node_prepare_writes_10000_nodes_in_one_pass_and_prints_the_time(tmp_path):
    import time
    from exabench.campaign.node_sweep import PREPARE_S_PER_NODE_SPEC, prepare_nodes
    run_dir, _ = _node_run("frontier", tmp_path, 0, nodes=1, ranks_per_node=8, gpus_per_rank=1)
    nodes = [f"frontier{i:05d}" for i in range(10_000)]
    t0 = time.monotonic()
    assert prepare_nodes([tmp_path / "runs" / "kmeans.tiny.n1" / "spec.json"], nodes) == 10_000
    took = time.monotonic() - t0
    print(f"\nnode-prepare: 10,000 simulated nodes in {took:.1f} s ({1000 * took / 10_000:.2f} ms a node; "
          f"budget {1000 * PREPARE_S_PER_NODE_SPEC:.0f} ms)")
    last = json.loads((tmp_path / "nodes" / "kmeans.tiny.n1" / "frontier09999" / "spec.json").read_text())
    assert last["launch_line"].startswith("srun --nodes=1 --nodelist=frontier09999 ")
    assert took < 10_000 * PREPARE_S_PER_NODE_SPEC


def test_node_prepare_refuses_an_empty_node_list_and_a_bad_name(tmp_path):
    from exabench.campaign.node_sweep import prepare_nodes
    from exabench.errors import ExabenchError
    _node_run("frontier", tmp_path, 0, nodes=1, ranks_per_node=8, gpus_per_rank=1)
    spec = tmp_path / "runs" / "kmeans.tiny.n1" / "spec.json"
    with pytest.raises(ExabenchError, match="^node-prepare: the node list is empty; valid: the allocation's compute"):
        prepare_nodes([spec], [])
    with pytest.raises(ExabenchError, match="^node name 'a b' is not valid"):
        prepare_nodes([spec], ["a b"])


def test_perlmutter_every_node_header_is_the_nodes_own_whatever_gpus_each_run_uses(tmp_path):
    s, runs, files = _sweep("perlmutter", tmp_path, nodes=4)
    [text] = files.values()
    assert "#SBATCH --gpus-per-node=4\n" in text and "#SBATCH --nodes=4\n" in text
    assert {r.layout.gpus_per_node for r in runs if r.layout.nodes == 1} == {0, 1, 4}


def test_theta_and_polaris_every_node_jobs_would_ask_at_most_their_largest_queue():
    # Theta's 4,392 nodes and Polaris's 560 exceed their largest queues (4,100 and 496 nodes).
    from exabench.campaign.node_sweep import sweep_nodes
    assert (sweep_nodes(site("theta")), sweep_nodes(site("polaris"))) == (4100, 496)


def _node_run(site_name: str, tmp_path, index, group=None, **request):
    from exabench.campaign.plan import Run
    from exabench.campaign.site import resolve_layout
    s = site(site_name)
    run = Run(run_id="kmeans.tiny.n1", benchmark="kmeans", suite="analytics", framework="mpi4py", preset="tiny",
              params={}, layout=resolve_layout(s, **request))
    write_runs_files([run], s, tmp_path)
    spec = node_run_files(RunPaths(tmp_path, run.run_id).spec, group[0] if group else "a01n03", group, index)
    return spec.parent, json.loads(spec.read_text())


def test_node_run_places_a_jsrun_run_by_erf_beside_its_script(tmp_path):
    run_dir, node = _node_run("summit", tmp_path, 2, nodes=1, ranks_per_node=6, gpus_per_rank=1)
    assert node["launch_line"].startswith("jsrun --erf_input=placement.erf ")
    erf = (run_dir / "placement.erf").read_text()
    assert erf.count("host: 3;") == 6 and "host: 3; cpu: {21-27}; gpu: {3}" in erf  # 3rd compute node
    script = (run_dir / "job.sh").read_text()
    assert f"cd {run_dir}\n" in script and node["launch_line"] in script  # the ERF is read from the cwd
    assert "on node a01n03 only (every-node acceptance)" in script and node["node"] == "a01n03"


def test_node_run_places_an_ibrun_run_by_task_offset(tmp_path):
    run_dir, node = _node_run("stampede2", tmp_path, 5, nodes=1, ranks_per_node=4, threads_per_rank=17)
    assert node["launch_line"].startswith("ibrun -n 4 -o 20 task_affinity ") and node["env"]["TACC_TASKS_PER_NODE"] == "4"
    assert "export TACC_TASKS_PER_NODE=4\n" in (run_dir / "job.sh").read_text()


def test_a_node_group_job_keeps_the_line_of_a_launcher_placed_by_index(tmp_path):
    # A group job is pinned by its header (#BSUB -csm y -R): its allocation is the group, whose order LSF
    # chooses, so jsrun keeps its own resource sets and no ERF is written.
    run_dir, node = _node_run("summit", tmp_path, None, group=("h1", "h2"), nodes=2, ranks_per_node=6,
                              gpus_per_rank=1)
    assert node["launch_line"].startswith("jsrun -n12 -r6 ") and not (run_dir / "placement.erf").exists()


def test_lsf_group_runs_of_two_smt_modes_get_a_job_each_asking_the_whole_node(tmp_path):
    # An LSF job has one SMT mode (-alloc_flags smtN): a group whose runs need smt1 and smt4 gets two
    # jobs, each pinned to the group, each asking for the node's own request in its mode.
    summit = site("summit")
    config = validate({"campaign": "acc", "preset": "tiny", "timeout_s": 120, "every_node": {"nodes": "h[1-2]"},
                       "benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [2], "smt": [1, 4],
                                                                   "threads_per_rank": [4]}}]},
                      "config", "acc.yaml")
    runs = expand(config, summit, "acc.yaml")
    groups = node_groups(config, summit, "acc.yaml")
    files = {p.name: t for p, t, _ in group_files(runs, summit, tmp_path, groups, "acc")}
    assert sorted(files) == ["h1-01-of-02.sh", "h1-02-of-02.sh", "h2-01-of-02.sh", "h2-02-of-02.sh", "submit.sh"]
    for name, smt in (("h2-01-of-02.sh", 1), ("h2-02-of-02.sh", 4)):
        text = files[name]
        assert f'#BSUB -alloc_flags "smt{smt}"\n' in text and "(hname == 'h2')" in text and "-nnodes" not in text
        [run_id] = re.findall(r"^run_on_group \S+/runs/([^/\s]+)/spec.json ", text, re.M)
        assert next(r for r in runs if r.run_id == run_id).layout.smt == smt
        assert f"node-h2.json" in text  # records keep the group's name, whichever job runs them
    assert files["submit.sh"].count("\nsubmit ") == 4
    from exabench.campaign.node_groups import group_outputs
    assert sorted(p.name for p in group_outputs(runs, summit, tmp_path, groups)) == sorted(files)[:-1]


# -- node groups split by walltime, sent within each queue's per-user limit ---------------------------

def _default_groups(site_name: str, nodes: str, tmp_path, **config):
    from exabench.campaign.site import default_config_file
    from exabench.io import atomic_write_many
    from exabench.config import load_and_validate
    s = site(site_name)
    config_file = default_config_file(str(REPO / "profiles" / site_name / "site.yaml"))
    loaded = {**load_and_validate(config_file, "config"), "every_node": {"nodes": nodes, "group": 1}, **config}
    runs = expand(loaded, s, config_file)
    groups = node_groups(loaded, s, config_file)
    files = group_files(runs, s, tmp_path, groups, "acc")
    atomic_write_many(files)
    return s, runs, groups, {p.name: t for p, t, _ in files}


@pytest.mark.parametrize("site_name, minutes", [("summit", 725), ("frontier", 635)])
def test_default_campaign_node_groups_are_split_into_jobs_their_queues_admit(site_name, minutes, tmp_path):
    # One node's share of the site's own default campaign needs `minutes` in a row; no queue gives one
    # node that long, so each group's runs go to several jobs, each within the longest walltime.
    from exabench.campaign.bundles import longest_walltime
    s, runs, groups, files = _default_groups(site_name, "x[1-2]", tmp_path)
    single = sorted(r.run_id for r in runs if r.layout.nodes == 1)
    longest = longest_walltime(s, 1)
    directive = r"^#BSUB -W (\d+):(\d+)$" if s.scheduler == "lsf" else r"^#SBATCH --time=(\d+):(\d+):00$"
    for g in groups:
        jobs = {n: t for n, t in files.items() if n.startswith(f"{g.name}-")}
        assert len(jobs) > 1
        ran = sorted(re.findall(rf"^run_on_group \S+/runs/([^/\s]+)/spec.json \S+node-{g.name}.json$",
                                "".join(jobs.values()), re.M))
        assert ran == single  # every single-node run once per group, across its jobs
        for text in jobs.values():
            hours, mins = map(int, re.search(directive, text, re.M).groups())
            assert 60 * hours + mins <= longest
    assert sum(r.timeout_s for r in runs if r.layout.nodes == 1) / 60 + 5 >= minutes
    assert files["submit.sh"].count("\nsubmit ") == len(files) - 1


STAND_IN_SBATCH = """#!/usr/bin/env bash
# A queue that takes one job per user: a second submission is refused while the first is in it.
if [[ -e "$QUEUE/job" ]]; then echo "sbatch: error: QOSMaxSubmitJobPerUserLimit" >&2; exit 1; fi
echo "$1" >> "$QUEUE/sent"; echo "$1" > "$QUEUE/job"; echo "Submitted batch job $(wc -l < "$QUEUE/sent")"
"""
STAND_IN_SQUEUE = """#!/usr/bin/env bash
# The user's job in the queue, until it has been looked at three times (then it ended).
[[ -e "$QUEUE/job" ]] || exit 0
echo "$*" >> "$QUEUE/asked"; echo 1
if (( $(wc -l < "$QUEUE/asked") % 3 == 0 )); then rm "$QUEUE/job"; fi
"""


def test_stampede2_five_groups_go_through_its_one_job_per_user_development_queue(tmp_path):
    # Stampede2's development queue takes one job per user (max_queued_per_user: 1): submit.sh sends the
    # next group only once the previous one left the queue, and never stops with groups unsent. The
    # stand-ins refuse a second queued job as that queue would.
    s, runs, groups, files = _default_groups(
        "stampede2", "c[1-5]", tmp_path, preset="tiny", timeout_s=120,
        benchmarks=[{"name": "kmeans", "sweep": {"ranks_per_node": [1]}}])
    submit = files["submit.sh"]
    assert submit.count("\nsubmit development 1 ") == 5 and "set -e" not in submit
    bin_dir, queue = tmp_path / "bin", tmp_path / "queue"
    bin_dir.mkdir(), queue.mkdir()
    for name, text in (("sbatch", STAND_IN_SBATCH), ("squeue", STAND_IN_SQUEUE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "QUEUE": str(queue), "EXABENCH_SUBMIT_WAIT_S": "0", "USER": "me"}
    res = subprocess.run(["bash", str(tmp_path / "nodes" / "groups" / "submit.sh")], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all 5 every-node group job(s) sent" in res.stdout
    sent = (queue / "sent").read_text().split()
    assert [p.rsplit("/", 1)[1] for p in sent] == [f"c{i}.sh" for i in range(1, 6)]
    assert "-p development" in (queue / "asked").read_text()
    # Before, the same queue with `set -e` and one sbatch per group: the second one failed and the rest never went.


def test_a_group_job_that_cannot_be_sent_is_reported_after_every_other_was_sent(tmp_path):
    s, runs, groups, files = _default_groups(
        "stampede2", "c[1-3]", tmp_path, preset="tiny", timeout_s=120,
        benchmarks=[{"name": "kmeans", "sweep": {"ranks_per_node": [1]}}])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/usr/bin/env bash\n[[ $1 == */c2.sh ]] && { echo "sbatch: error: bad" >&2; '
                                    'exit 1; }\necho "$1" >> "$QUEUE/sent"\n')
    (bin_dir / "squeue").write_text("#!/usr/bin/env bash\nexit 0\n")
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "QUEUE": str(tmp_path), "EXABENCH_SUBMIT_WAIT_S": "0", "USER": "me"}
    res = subprocess.run(["bash", str(tmp_path / "nodes" / "groups" / "submit.sh")], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 1
    assert [p.rsplit("/", 1)[1] for p in (tmp_path / "sent").read_text().split()] == ["c1.sh", "c3.sh"]
    assert re.search(r"exabench: 2 job\(s\) sent; not sent: \S+/c2.sh$", res.stderr.strip())


def _exabench(*args, cwd=None):
    import sys
    return subprocess.run([sys.executable, "-m", "exabench", *args], capture_output=True, text=True, timeout=240,
                          cwd=cwd or REPO, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": "/tmp"})


def test_plan_shows_the_every_node_walltime_with_its_preparation_budget_or_why_there_is_none():
    frontier = _exabench("plan", "--site", "profiles/frontier/site.yaml")
    assert frontier.returncode == 0, frontier.stderr[-2000:]
    assert re.search(r"^every-node job 1 of 1: 21 run\(s\) on 9472 nodes, walltime \d+ min \(runs 630 min \+ "
                     r"preparation budget 33 min for 9472 x 21 node specs, and the margin\)$", frontier.stdout, re.M)
    summit = _exabench("plan", "--site", "profiles/summit/site.yaml")  # jsrun: node worlds, its smt1 and smt4 runs apart
    assert re.search(r"^every-node job 1 of 2: 24 run\(s\) on 4608 nodes, walltime \d+ min \(runs 720 min \+ "
                     r"preparation budget 18 min", summit.stdout, re.M), summit.stdout[-2000:]


def test_node_prepare_and_node_agent_refuse_bad_input_in_one_line(tmp_path):
    _node_run("frontier", tmp_path, 0, nodes=1, ranks_per_node=8, gpus_per_rank=1)
    spec = str(tmp_path / "runs" / "kmeans.tiny.n1" / "spec.json")
    missing = _exabench("node-prepare", "--nodes-file", str(tmp_path / "none.txt"), "--spec", spec)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines()[-1].endswith(
        f"node-prepare: --nodes-file {tmp_path}/none.txt: cannot be read (No such file or directory); valid: a file "
        "of node names, one a line, or '-' (standard input)")
    agent = _exabench("node-agent", "--spec", spec)
    assert agent.returncode != 0 and "Traceback" not in agent.stderr
    assert re.search(r"node-agent: run 'kmeans.tiny.n1' has no spec prepared for node '\S+' \(looked in "
                     rf"{tmp_path}/nodes/kmeans.tiny.n1\); valid: a node of the list given to exabench node-prepare$",
                     agent.stderr.strip())


STAND_IN_SQUEUE_STATES = """#!/usr/bin/env bash
# `squeue -h -t all -j ID,ID,... -o "%i %T"`: each job's state, one line each, in one call; the queued job
# runs for two looks, then ends (and leaves the queue).
echo "$5" >> "$QUEUE/squeue-calls"
for id in ${5//,/ }; do
  if [[ -e "$QUEUE/job" && $(cat "$QUEUE/job") == "$id" ]]; then
    echo "$id" >> "$QUEUE/looked"
    if (( $(grep -c "^$id$" "$QUEUE/looked") >= 2 )); then rm "$QUEUE/job"; echo "$id COMPLETED"; continue; fi
    echo "$id RUNNING"; continue
  fi
  echo "$id COMPLETED"
done
"""


def stand_in_slurm(bin_dir, sbatch: str) -> None:
    """sbatch as given, the squeue above, an scontrol that fails (every poll asks squeue alone, once
    for all the active jobs) and an sinfo of three idle nodes c1..c3."""
    for name, text in (("sbatch", sbatch), ("squeue", STAND_IN_SQUEUE_STATES),
                       ("scontrol", "#!/usr/bin/env bash\nexit 1\n"),
                       ("sinfo", "#!/usr/bin/env bash\nfor n in c1 c2 c3; do echo \"$n idle\"; done\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


def test_node_acceptance_submits_every_group_through_a_one_job_per_user_queue(tmp_path):
    # node_acceptance sends the group jobs itself: where the queue refuses a second job of the user it
    # sent the first and stopped with an error, the other groups never sent; now they wait for room.
    from exabench.campaign.node_jobs import run_groups
    bin_dir, queue = tmp_path / "bin", tmp_path / "queue"
    bin_dir.mkdir(), queue.mkdir()
    sbatch = ('#!/usr/bin/env bash\nif [[ -e "$QUEUE/job" ]]; then echo "sbatch: error: QOSMaxSubmitJobPerUserLimit" '
              '>&2; exit 1; fi\necho "$2" >> "$QUEUE/sent"; n=$(wc -l < "$QUEUE/sent"); echo "$n" > "$QUEUE/job"; '
              'echo "$n"\n')
    stand_in_slurm(bin_dir, sbatch)
    planned = [{"group": g, "nodes": [g], "record": str(tmp_path / f"{g}.json")} for g in ("c1", "c2", "c3")]
    scripts = {g: tmp_path / f"{g}.sh" for g in ("c1", "c2", "c3")}
    said = []
    result = run_groups(planned, scripts, {"PATH": f"{bin_dir}:/usr/bin:/bin", "QUEUE": str(queue)}, said.append,
                        poll_s=0.01, max_wait_s=60)
    assert [p.rsplit("/", 1)[1] for p in (queue / "sent").read_text().split()] == ["c1.sh", "c2.sh", "c3.sh"]
    assert {g: j["state"] for g, j in result["jobs"].items()} == {"c1": "COMPLETED", "c2": "COMPLETED",
                                                                  "c3": "COMPLETED"}
    assert "submitted 1 group job(s), 2 waiting for room in their queue" in said[0]
    assert len((queue / "squeue-calls").read_text().split()) == 2 * 3  # two looks per job, one call each


def test_node_acceptance_polls_all_its_active_jobs_in_one_squeue_call(tmp_path):
    from exabench.campaign.node_jobs import run_groups
    bin_dir, queue = tmp_path / "bin", tmp_path / "queue"
    bin_dir.mkdir(), queue.mkdir()
    sbatch = '#!/usr/bin/env bash\necho "$2" >> "$QUEUE/sent"; wc -l < "$QUEUE/sent"\n'
    stand_in_slurm(bin_dir, sbatch)
    planned = [{"group": g, "nodes": [g], "record": str(tmp_path / f"{g}.json")} for g in ("c1", "c2", "c3")]
    result = run_groups(planned, {g: tmp_path / f"{g}.sh" for g in ("c1", "c2", "c3")},
                        {"PATH": f"{bin_dir}:/usr/bin:/bin", "QUEUE": str(queue)}, lambda text: None, poll_s=0.01)
    assert (queue / "squeue-calls").read_text().split() == ["1,2,3"]  # one poll, one call, every job
    assert {j["state"] for j in result["jobs"].values()} == {"COMPLETED"}


def test_a_confirmation_rounds_pairs_run_one_at_a_time_after_the_node_tests(tmp_path):
    # A control pair never runs beside a pair holding a control: a suspect's pair measured beside another
    # pair (sharing the fabric; on the 8-node cluster, the cores) read 0.61x the control pair and was
    # "confirmed". The node tests go side by side (c1 with c2); each pair alone, after them (c3, c4).
    from exabench.campaign.node_jobs import run_groups
    bin_dir, queue = tmp_path / "bin", tmp_path / "queue"
    bin_dir.mkdir(), queue.mkdir()
    sbatch = ('#!/usr/bin/env bash\necho "$(basename "$2") $([[ -e "$QUEUE/job" ]] && echo beside || echo alone)" '
              '>> "$QUEUE/sent"; n=$(wc -l < "$QUEUE/sent"); echo "$n" > "$QUEUE/job"; echo "$n"\n')
    stand_in_slurm(bin_dir, sbatch)
    names = ("c1", "c2", "c3", "c4")
    planned = [{"group": g, "nodes": [g], "record": str(tmp_path / f"{g}.json")} for g in names]
    result = run_groups(planned, {g: tmp_path / f"{g}.sh" for g in names},
                        {"PATH": f"{bin_dir}:/usr/bin:/bin", "QUEUE": str(queue)}, lambda text: None, poll_s=0.01,
                        max_wait_s=60, alone=frozenset({"c3", "c4"}))
    assert (queue / "sent").read_text().splitlines() == ["c1.sh alone", "c2.sh beside", "c3.sh alone", "c4.sh alone"]
    assert {j["state"] for j in result["jobs"].values()} == {"COMPLETED"}
