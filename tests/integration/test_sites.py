"""Every profile: a valid, documented site.yaml and a Snakemake profile pointing at it; the
schema's errors name file, key and value; `exabench launch-lines` prints what a site gets;
the timed stage-in to node-local storage works for real on this machine."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest
import yaml

from exabench.errors import ConfigError, LayoutError
from exabench.execute import execute
from exabench.campaign.render import RunPaths, render_script, walltime_min, write_run_files
from exabench.campaign.site import load_site, pick_queue, resolve_layout

from helpers_sites import PROFILES, REPO, plan_config, site, write_site_with

EXPECTED = {"summit", "summitdev", "titan", "cori-knl", "theta", "stampede2", "frontier", "perlmutter", "polaris",
            "aurora", "slurm-local", "local"}


def test_every_expected_profile_exists():
    assert EXPECTED <= set(PROFILES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_is_valid_documented_and_points_at_its_site(name):
    s = load_site(REPO / "profiles" / name / "site.yaml")
    assert s.name == name and s.description
    if name != "local":
        assert s.sources, f"profiles/{name}/site.yaml: say where the facts come from (sources)"
    profile = yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())
    assert f"site=profiles/{name}/site.yaml" in profile["config"]
    assert (REPO / "profiles" / name / "config.yaml").read_text().startswith("#")  # documented
    if s.scheduler == "slurm":
        assert profile.get("executor") == "slurm"
    # The default layout of every site fits (one rank per GPU, cores shared).
    layout = resolve_layout(s, nodes=min(2, s.max_nodes))
    assert layout.ranks_per_node * layout.cores_per_rank <= s.node.usable_cores


def test_seed_machine_facts():
    summit = site("summit")
    assert (summit.node.usable_cores, summit.node.smt, summit.node.gpus, summit.node.gpu_model) == \
        (42, 4, 6, "Tesla V100-SXM2-16GB")
    assert (summit.scheduler, summit.launcher, summit.storage["node_local_kind"]) == ("lsf", "jsrun", "nvme")
    frontier = site("frontier")
    assert (frontier.node.usable_cores, frontier.node.gpus, frontier.node.gpu_vendor) == (56, 8, "amd")
    assert frontier.node.gpu_visibility_var == "ROCR_VISIBLE_DEVICES"
    assert (site("titan").launcher, site("theta").scheduler, site("stampede2").launcher) == ("aprun", "cobalt",
                                                                                             "ibrun")
    assert site("cori-knl").storage["node_local_kind"] == "burst_buffer"
    assert site("polaris").node.peak_tflops["bf16"] == 1248


def test_local_profile_behaves_as_before():
    s = site("local")
    assert (s.scheduler, s.launcher, s.max_nodes) == ("none", "mpirun", 1)
    layout = resolve_layout(s, ranks_per_node=1)
    assert layout.threads_per_rank == s.node.usable_cores


@pytest.mark.parametrize("key,value,fragment", [
    ("launcher", "qsub", "launcher"), ("node.smt", 3, "node.smt"), ("node.gpus", -1, "node.gpus"),
    ("limits.max_walltime_min", -5, "limits.max_walltime_min"), ("account", "-A evil", "account"),
    ("node.reserved_cores", 100, "node.reserved_cores"), ("launcher", "jsrun", "launcher"),
    ("node.gpu.vendor", "none", "node.gpu.vendor"), ("bogus", 1, "bogus"),
])
def test_schema_errors_name_file_key_and_value(key, value, fragment, tmp_path):
    path = write_site_with(tmp_path, "frontier", **{key: value})
    with pytest.raises(ConfigError) as info:
        load_site(path)
    msg = str(info.value)
    assert str(path) in msg and fragment in msg and "valid" in msg


def test_walltime_over_the_site_limit_is_refused_before_submission():
    with pytest.raises(LayoutError) as info:
        walltime_min(site("frontier"), 13 * 3600)
    assert info.value.site == "frontier" and "720" in info.value.limit


def test_site_template_for_newcomers_is_valid():
    s = load_site(REPO / "docs" / "site-template.yaml")
    assert s.name == "mycluster"
    resolve_layout(s, nodes=2)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_launch_lines_cli_prints_what_each_site_would_get(name):
    argv = [sys.executable, "-m", "exabench", "launch-lines", "--site", f"profiles/{name}/site.yaml"]
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    if name == "frontier":  # the laptop campaign's Keras twins: no image carries TensorFlow for AMD GPUs
        laptop = subprocess.run(argv + ["--config", "config/config.yaml"], cwd=REPO, capture_output=True, text=True,
                                timeout=120)
        assert laptop.returncode == 2 and "has no tensorflow image" in laptop.stderr, laptop.stderr
        assert "Traceback" not in laptop.stderr
    assert res.returncode == 0, res.stderr
    launcher = site(name).launcher
    first_word = {"local": sys.executable, "torchrun": sys.executable}.get(launcher, launcher)
    assert f"\n  {first_word} " in res.stdout


def test_launch_lines_cli_reports_an_impossible_layout_naming_the_limit(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("benchmarks:\n  - name: resnet50\n    sweep:\n      ranks_per_node: [7]\n      "
                      "gpus_per_rank: [1]\n")
    res = subprocess.run([sys.executable, "-m", "exabench", "launch-lines", "--config", str(config), "--site",
                          "profiles/summit/site.yaml"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "6 GPUs per node" in res.stderr and "summit" in res.stderr


def test_stage_in_renders_a_per_node_copy_with_the_sites_launcher(tmp_path):
    s = dataclasses.replace(site("summit"), storage={**site("summit").storage, "stage_in_from": "/gpfs/data/imagenet"})
    layout = resolve_layout(s, nodes=2)
    text, _ = render_script(_any_run(layout), s, RunPaths(tmp_path, "probe"))
    assert '#BSUB -alloc_flags "smt1 nvme"' in text
    assert "jsrun -n2 -r1 -a1 -c1 -g0 -bpacked:1 bash -c" in text
    assert 'export EXABENCH_DATA_DIR="/mnt/bb/$USER/exabench-data"' in text
    frontier = dataclasses.replace(site("frontier"), storage={**site("frontier").storage, "stage_in_from": "/d"})
    text, _ = render_script(_any_run(resolve_layout(frontier, nodes=2)), frontier, RunPaths(tmp_path, "p"))
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=1" in text
    assert "#SBATCH --constraint=nvme" in text  # OLCF Frontier guide: NVMe needs -C nvme
    cori = dataclasses.replace(site("cori-knl"), storage={**site("cori-knl").storage, "stage_in_from": "/d"})
    text, _ = render_script(_any_run(resolve_layout(cori, nodes=2)), cori, RunPaths(tmp_path, "p"))
    assert "#DW jobdw capacity=200GB access_mode=striped type=scratch" in text
    assert 'export EXABENCH_DATA_DIR="$DW_JOB_STRIPED/exabench-data"' in text
    assert "#SBATCH --constraint=knl,quad,cache" in text


def _any_run(layout):
    from exabench.campaign.plan import Run
    return Run(run_id="probe", benchmark="resnet50", suite="coral2-dl", framework="pytorch", preset="tiny",
               params={}, layout=layout, timeout_s=600)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_stage_in_copies_and_times_for_real_on_this_machine(tmp_path):
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "part-0.bin").write_bytes(b"x" * 100_000)
    local = site("local")
    s = dataclasses.replace(local, python=sys.executable, storage={"node_local": str(tmp_path / "nvme"),
                                                                   "stage_in_from": str(data)})
    [run] = plan_config(tmp_path / "c.yaml", s, "campaign: stage\ntimeout_s: 240\nbenchmarks:\n  - name: kmeans\n"
                        "    sweep:\n      ranks_per_node: [1]\n      k: [2]\n")
    paths = RunPaths(tmp_path / "results" / "local", run.run_id)
    write_run_files(run, s, paths)
    record = execute(paths.spec)
    assert record["status"] == "ok", record.get("error")
    assert (tmp_path / "nvme" / "exabench-data" / "part-0.bin").stat().st_size == 100_000
    stamp = json.loads((paths.run_dir / "stage_in.json").read_text())
    assert stamp["stage_in_s"] >= 0 and stamp["to"] == str(tmp_path / "nvme" / "exabench-data")
    env = record["provenance"]["environment"]
    assert float(env["EXABENCH_STAGE_IN_S"]) == pytest.approx(stamp["stage_in_s"])
    assert env["EXABENCH_DATA_DIR"] == stamp["to"]


# --- queues picked by nodes and walltime ----------------------------------------------------------

@pytest.mark.parametrize("name,nodes,minutes,queue", [
    ("polaris", 1, 30, "debug"), ("polaris", 2, 60, "debug"), ("polaris", 5, 45, "debug-scaling"),
    ("polaris", 12, 170, "prod"), ("polaris", 60, 300, "prod"), ("polaris", 496, 1440, "prod"),
    ("aurora", 1, 50, "debug"), ("aurora", 100, 60, "debug-scaling"), ("aurora", 8, 600, "capacity"),
    ("aurora", 512, 700, "prod"), ("summit", 2, 120, "batch"), ("summit", 922, 1440, "batch"),
    ("frontier", 91, 120, "batch"), ("local", 1, 10**6, ""),
])
def test_the_first_queue_that_admits_the_job_is_picked(name, nodes, minutes, queue):
    # ALCF Polaris and Aurora "Running Jobs" queue tables; OLCF Summit and Frontier batch bins.
    assert pick_queue(site(name), nodes, minutes) == queue


@pytest.mark.parametrize("name,nodes,minutes,shown", [
    ("polaris", 2, 61, "debug (1-2 nodes, at most 60 min)"),      # debug allows 1 h
    ("polaris", 1, 145, "small via prod (10-24 nodes, at most 180 min)"),
    ("polaris", 30, 400, "medium via prod (25-99 nodes, at most 360 min)"),
    ("aurora", 100, 61, "debug-scaling (2-256 nodes, at most 60 min)"),
    ("summit", 1, 121, "batch-bin5 via batch (1-45 nodes, at most 120 min)"),
    ("frontier", 100, 361, "batch-bin4 via batch (92-183 nodes, at most 360 min)"),
])
def test_a_job_no_queue_admits_is_refused_naming_every_queues_limits(name, nodes, minutes, shown):
    with pytest.raises(LayoutError) as info:
        pick_queue(site(name), nodes, minutes)
    assert info.value.site == name and f"{minutes} min on {nodes} node(s)" in str(info.value)
    assert shown in info.value.limit


def test_a_named_partition_is_the_only_queue_tried():
    s = site("polaris", partition="debug")
    assert pick_queue(s, 2, 60) == "debug"
    with pytest.raises(LayoutError, match=r"partition debug: debug \(1-2 nodes, at most 60 min\)\)"):
        pick_queue(s, 2, 90)


def test_the_batch_header_names_the_picked_queue(tmp_path):
    s = site("polaris")
    for nodes, queue in ((2, "debug"), (8, "debug-scaling"), (12, "prod")):
        text, _ = render_script(_any_run(resolve_layout(s, nodes=nodes)), s, RunPaths(tmp_path, "p"))
        assert f"#PBS -q {queue}\n" in text


@pytest.mark.parametrize("key,value,fragment", [
    ("partition", "preemptable", "partition"),
    ("queues", [{"name": "a", "max_walltime_min": 60}, {"name": "a", "max_walltime_min": 30}], "queues[1].name"),
    ("queues", [{"name": "a", "max_walltime_min": 60, "min_nodes": 5, "max_nodes": 2}], "queues[0].max_nodes"),
    ("queues", [{"name": "a", "max_walltime_min": 0}], "max_walltime_min"),
    ("queues", [{"name": "a b", "max_walltime_min": 60}], "name"),
])
def test_bad_queues_are_refused_naming_file_and_key(key, value, fragment, tmp_path):
    path = write_site_with(tmp_path, "polaris", **{key: value})
    with pytest.raises(ConfigError) as info:
        load_site(path)
    assert str(path) in str(info.value) and fragment in str(info.value)


def _plan_cli(*args):
    return subprocess.run([sys.executable, "-m", "exabench", "plan", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_a_run_no_queue_admits_stops_the_plan_naming_config_run_walltime_and_queues(tmp_path):
    # Polaris debug allows 1 h: a 2-hour kmeans run on 1 node fits no queue.
    config = tmp_path / "long.yaml"
    config.write_text("timeout_s: 7200\nbenchmarks:\n  - name: kmeans\n    sweep:\n      k: [2]\n")
    res = _plan_cli("--config", str(config), "--site", "profiles/polaris/site.yaml")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"{config}: key 'timeout_s' = 7200" in res.stderr
    assert re.search(r"run 'kmeans\.[^']+' a 125-minute job on 1 node\(s\)", res.stderr), res.stderr
    assert "debug (1-2 nodes, at most 60 min)" in res.stderr and "large via prod (100-496 nodes" in res.stderr


BUNDLE = "campaign: b\ntimeout_s: 2100\nbenchmarks:\n  - name: kmeans\n    sweep:\n      k: [2, 3, 4, 5]\n"


def test_a_bundle_no_queue_admits_is_split_into_bundles_that_fit_at_planning(tmp_path):
    # Four 35-minute runs: each fits Polaris debug, their one bundle (2 h 20 min + 5) fits no queue on 1 node,
    # so bundle mode plans four bundles of one run each, in debug.
    config = tmp_path / "bundle.yaml"
    config.write_text(BUNDLE)
    each = _plan_cli("--config", str(config), "--site", "profiles/polaris/site.yaml")
    assert each.returncode == 0 and "jobs in queue: debug (4)" in each.stdout, each.stdout + each.stderr
    assert "2.7 node-hours requested (2.7 as 4 bundles)" in each.stdout, each.stdout
    res = _plan_cli("--config", str(config), "--site", "profiles/polaris/site.yaml", "--bundle")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    for i in range(1, 5):
        assert re.search(rf"^b-0{i}-of-04 +1 +40 +debug +1 ", res.stdout, re.M), res.stdout
    assert "campaign b split" in res.stdout and "bundles in queue: debug (4)" in res.stdout


@pytest.mark.timeout(300)
def test_snakemake_dry_run_of_the_bundle_plans_the_split_scripts_and_stops_on_a_run_no_queue_admits(tmp_path):
    config = tmp_path / "bundle.yaml"
    config.write_text(BUNDLE)
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/polaris", "bundle", "-n"]
    res = subprocess.run(cmd + ["--configfile", str(config)], cwd=REPO, capture_output=True, text=True, timeout=240)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-2000:]
    assert all(f"results/polaris/bundles/b-0{i}-of-04.sh" in out for i in range(1, 5)), out[-2000:]
    config.write_text(BUNDLE.replace("2100", "7200"))  # 125 minutes on one node: no queue, even alone
    res = subprocess.run(cmd + ["--configfile", str(config)], cwd=REPO, capture_output=True, text=True, timeout=240)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "a 125-minute job on 1 node(s)" in out, out[-2000:]
    assert str(config) in out and "Traceback" not in out


def test_a_bundle_goes_to_the_queue_that_admits_its_summed_walltime(tmp_path):
    from exabench.campaign.render import render_bundle
    s = site("polaris")
    runs = [dataclasses.replace(_any_run(resolve_layout(s, nodes=n)), run_id=f"r{n}", timeout_s=1500)
            for n in (2, 12)]
    assert "#PBS -q prod\n" in render_bundle(runs, s, tmp_path, "c")  # 12 nodes for 55 min: small, via prod
    assert "#PBS -q debug\n" in render_bundle(runs[:1], s, tmp_path, "c")
    with pytest.raises(LayoutError, match="bundle walltime_min"):
        render_bundle([dataclasses.replace(runs[0], run_id=f"r{i}") for i in range(3)], s, tmp_path, "c")


def test_a_config_can_sweep_ranks_per_gpu_and_ranks_per_set(tmp_path):
    # OLCF Summit "Jsrun Examples": 2 ranks per GPU; the climate-segmentation layout: 6 ranks in one
    # 6-GPU, 42-core resource set per node. Both are sweepable layout keys with their own run ids.
    runs = plan_config(tmp_path / "c.yaml", site("summit"),
                       "timeout_s: 600\nbenchmarks:\n  - name: resnet50\n    sweep:\n      nodes: [2]\n"
                       "      ranks_per_node: [12]\n      ranks_per_gpu: [2]\n      cores_per_rank: [1]\n"
                       "  - name: resnet50\n    label: rs\n    sweep:\n      nodes: [2]\n      ranks_per_set: [6]\n")
    lines = {r.run_id: render_script(r, site("summit"), RunPaths(tmp_path, r.run_id))[1] for r in runs}
    assert [r.run_id.split(".")[-1] for r in runs] == ["n2r12t1s2", "n2r6t7g1a6"]
    shared, pooled = lines.values()
    assert shared.startswith("jsrun -n12 -r6 -a2 -c2 -g1 -bpacked:1 -dpacked ")
    assert pooled.startswith("jsrun -n2 -r1 -a6 -c42 -g6 -bpacked:7 -dpacked ")
    with pytest.raises(ConfigError, match="ranks_per_set"):
        plan_config(tmp_path / "bad.yaml", site("summit"),
                    "benchmarks:\n  - name: resnet50\n    sweep:\n      ranks_per_set: [4]\n")


def test_frontier_smt2_jobs_ask_the_executor_plugin_for_threads_per_core():
    from exabench.pipeline import job_resources
    s = site("frontier")
    runs = {"smt": _any_run(resolve_layout(s, nodes=1, smt=2)), "plain": _any_run(resolve_layout(s, nodes=1))}
    res = job_resources(s, lambda w: runs[w])
    assert res["slurm_extra"]("smt") == "--threads-per-core=2" and res["slurm_extra"]("plain") == ""
    assert (res["cpus_per_task"]("smt"), res["cpus_per_task"]("plain")) == (14, 7)


def test_the_executor_plugin_gets_each_runs_queue():
    from exabench.campaign.site import Queue
    from exabench.pipeline import job_resources
    s = site("frontier", partition="", queues=(Queue("debug", 120, 1, 2), Queue("batch", 720)))
    runs = {"small": _any_run(resolve_layout(s, nodes=2)), "wide": _any_run(resolve_layout(s, nodes=8))}
    res = job_resources(s, lambda w: runs[w])
    assert (res["slurm_partition"]("small"), res["slurm_partition"]("wide")) == ("debug", "batch")
