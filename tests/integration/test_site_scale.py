"""Site scale: every shipped profile plans, with no config argument, the campaign sized for its
machine (layouts relative to the node, node ladders within max_nodes), every planned run renders
through its launcher, and the real sites' references judge runs of that plan. Planning only."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from exabench.analysis.acceptance import load_references, verdicts
from exabench.campaign.plan import expand, node_hours
from exabench.campaign.render import RunPaths, render_script
from exabench.campaign.site import check_layout, default_config_file, node_counts, queue_admits_nodes, resolve_layout
from exabench.config import load_and_validate
from exabench.errors import ConfigError, LayoutError
from helpers_sites import FIXED_ROOT, PROFILES, REAL_SITES, REPO, plan_config, site

GPU_RANKS = {"summit": 6, "frontier": 8, "perlmutter": 4, "polaris": 4, "aurora": 12, "summitdev": 4, "titan": 1}
KNL_SITES = ("cori-knl", "stampede2", "theta")


@lru_cache(maxsize=None)
def default_plan(name: str):
    """(config file, config, site, runs, launch lines) of what `snakemake --profile profiles/<name>` plans."""
    s = site(name)
    config_file = default_config_file(REPO / "profiles" / name / "site.yaml")
    config = load_and_validate(REPO / config_file, "config")
    runs = expand(config, s, config_file)
    lines = {r.run_id: render_script(r, s, RunPaths(Path(FIXED_ROOT) / name, r.run_id))[1] for r in runs}
    return config_file, config, s, runs, lines


def of(runs, benchmark):
    """The benchmark's runs over the site's ladder (the one-GPU runs made as NVIDIA measured its
    published per-GPU figures, which references.yaml judges, are `nvidia_batch_runs`)."""
    return [r for r in runs if r.benchmark == benchmark and r not in nvidia_batch_runs(runs)]


def nvidia_batch_runs(runs):
    return [r for r in runs if r.benchmark == "resnet50" and r.layout.nodes == 1 and r.layout.ranks_per_node == 1
            and r.params.get("batch_size") in (112, 256)]


def test_every_real_site_has_its_own_full_size_campaign_and_the_tiny_ones_keep_theirs():
    assert set(REAL_SITES) >= {"summit", "frontier", "perlmutter", "polaris", "cori-knl", "stampede2", "theta"}
    for name in REAL_SITES:
        config_file, config, _, runs, _ = default_plan(name)
        assert config_file == f"profiles/{name}/campaign.yaml" and config["preset"] == "full", name
        assert {r.preset for r in runs} == {"full"}, name
        suites = {r.benchmark for r in runs}
        assert {"resnet50", "cosmoflow", "deepcam", "kmeans", "pca", "svm", "gemm", "conv", "rnn", "io_read",
                "allreduce"} <= suites, (name, suites)
        assert ("resnet50-keras" in suites) == (name != "frontier"), name  # no TensorFlow image for AMD GPUs
    assert default_plan("local")[0] == "config/config.yaml" and default_plan("local")[1]["preset"] == "tiny"
    assert default_plan("slurm-local")[0] == "config/slurm-local.yaml"
    assert "configfile" not in (REPO / "profiles/local/config.yaml").read_text()  # the embedded default stays


@pytest.mark.parametrize("name", PROFILES)
def test_nothing_is_planned_that_the_launch_arithmetic_rejects(name):
    _, _, s, runs, lines = default_plan(name)
    assert runs and len(lines) == len(runs)
    for r in runs:
        check_layout(s, r.layout)
        assert r.layout.nodes <= s.max_nodes
        assert r.layout.ranks_per_node * r.layout.cores_per_rank <= s.node.usable_cores
        assert r.layout.gpus_per_rank <= 1, r.run_id  # never several GPUs to one rank by default


def test_summit_resnet50_is_six_ranks_per_node_one_v100_and_seven_cores_each():
    _, _, _, runs, lines = default_plan("summit")
    rn = of(runs, "resnet50")
    assert rn and all((r.layout.ranks_per_node, r.layout.gpus_per_rank, r.layout.cores_per_rank)
                      == (6, 1, 7) for r in rn)
    assert {(r.params["precision"], r.params["batch_size"], r.layout.gpus_per_rank)
            for r in nvidia_batch_runs(runs)} == {("fp32", 112, 1), ("fp16", 256, 1)}
    for r in rn:
        assert re.match(rf"jsrun -n{6 * r.layout.nodes} -r6 -a1 -c7 -g1 ", lines[r.run_id]), lines[r.run_id]
    # the analytics on POWER9: one rank per socket, its 21 cores at SMT1 and at SMT4 (84 threads)
    assert {(r.layout.ranks_per_node, r.layout.threads_per_rank, r.layout.gpus_per_rank)
            for r in of(runs, "kmeans")} == {(2, 21, 0), (2, 84, 0)}


@pytest.mark.parametrize("name, ranks, threads", [("frontier", 8, 7), ("perlmutter", 4, 16), ("polaris", 4, 8),
                                                  ("aurora", 12, 8)])
def test_gpu_sites_run_one_rank_per_gpu_filling_the_usable_cores(name, ranks, threads):
    _, _, s, runs, lines = default_plan(name)
    for bench in ("resnet50", "cosmoflow", "deepcam", "allreduce"):
        for r in of(runs, bench):
            assert (r.layout.ranks_per_node, r.layout.gpus_per_rank, r.layout.threads_per_rank) == \
                (ranks, 1, threads), r.run_id
    if name == "frontier":  # srun: 8 tasks per node, 7 cores and one GCD each
        line = lines[of(runs, "resnet50")[0].run_id]
        assert "--ntasks-per-node=8" in line and "--cpus-per-task=7" in line and "--gpus-per-task=1" in line


@pytest.mark.parametrize("name", KNL_SITES)
def test_knl_sites_use_the_seed_thread_counts_one_rank_per_node(name):
    _, _, _, runs, _ = default_plan(name)
    rn = of(runs, "resnet50")
    assert {(r.layout.ranks_per_node, r.layout.threads_per_rank, r.layout.smt) for r in rn} == \
        {(1, 32, 1), (1, 64, 1), (1, 128, 2)}
    assert all(r.layout.cores_per_rank == 64 for r in rn if r.layout.threads_per_rank > 32)


@pytest.mark.parametrize("name", REAL_SITES)
def test_node_ladders_reach_the_machine_and_analytics_sizes_fit_the_node(name):
    # scale: machine, the powers of two up to max_nodes that one of the site's queues admits
    # (Theta: debug's 1-8 nodes, then default's 128-node minimum; Polaris: large stops at 496).
    _, _, s, runs, _ = default_plan(name)
    ladder = sorted({r.layout.nodes for r in of(runs, "allreduce")})
    powers = [2 ** k for k in range(int(math.log2(s.max_nodes)) + 1)]
    assert ladder == [n for n in powers if queue_admits_nodes(s, n)], ladder
    assert ladder[-1] > s.max_nodes / 2 or name == "polaris", ladder  # the whole machine (Polaris: large queue)
    if name == "theta":
        assert ladder == [1, 2, 4, 8, 128, 256, 512, 1024, 2048, 4096]
    assert {r.layout.nodes for r in of(runs, "gemm")} == {1}
    sizes = {r.params["size_per_node"] for r in of(runs, "pca")}
    assert sizes == ({"8GB", "64GB"} if s.node.memory_gb >= 96 else {"8GB"}), (name, sizes)


def test_ladders_fractions_and_bands_are_resolved_by_the_site():
    summit, frontier, local = site("summit"), site("frontier"), site("local")
    assert node_counts(summit, "1..64") == [1, 2, 4, 8, 16, 32, 64]
    assert node_counts(summit, "1..max")[-1] == 4096 and node_counts(summit, "machine") == node_counts(summit, "1..max")
    assert node_counts(summit, "4..1/64") == [4, 8, 16, 32, 64]          # 4608 / 64 = 72
    assert node_counts(summit, [1, "1/8", 3]) == [1, 576, 3]
    assert node_counts(summit, "rack") == [1, 2, 4, 8, 16]                 # 18 nodes per rack
    assert node_counts(frontier, "1..rack")[-1] == 128
    assert node_counts(local, "1..64") == [1] and node_counts(local, "tiny") == [1] == node_counts(summit, "node")
    with pytest.raises(LayoutError, match="rack_nodes"):
        node_counts(dataclasses.replace(site("polaris"), rack_nodes=0), "rack")
    # A band keeps the counts a queue admits; a ladder spelled out keeps every count.
    assert node_counts(site("theta"), "rack") == [1, 2, 4, 8, 128]  # 192-node cabinets, default from 128
    assert node_counts(site("theta"), "1..64") == [1, 2, 4, 8, 16, 32, 64]
    with pytest.raises(LayoutError, match="max_nodes = 4608"):
        node_counts(summit, [5000])
    with pytest.raises(LayoutError, match="ladder"):
        node_counts(summit, "8..2")


def test_ranks_and_threads_relative_to_the_node():
    summit, frontier, knl = site("summit"), site("frontier"), site("cori-knl")
    lay = resolve_layout(summit, ranks_per_node="per_gpu", threads_per_rank="fill")
    assert (lay.ranks_per_node, lay.threads_per_rank, lay.gpus_per_rank) == (6, 7, 1)  # 42 usable / 6
    lay = resolve_layout(summit, ranks_per_node="per_socket", threads_per_rank="fill", gpus_per_rank=0, smt=4)
    assert (lay.ranks_per_node, lay.cores_per_rank, lay.threads_per_rank) == (2, 21, 84)
    lay = resolve_layout(frontier, ranks_per_node="per_gpu", threads_per_rank="fill", smt=2)
    assert (lay.ranks_per_node, lay.cores_per_rank, lay.threads_per_rank) == (8, 7, 14)  # 56 usable, SMT2
    assert resolve_layout(knl, ranks_per_node="per_node").threads_per_rank == 68
    assert resolve_layout(knl, ranks_per_node="per_numa").ranks_per_node == 1
    with pytest.raises(LayoutError, match="without GPUs"):
        resolve_layout(knl, ranks_per_node="per_gpu")
    with pytest.raises(LayoutError, match="per_gpu, per_socket"):
        resolve_layout(summit, ranks_per_node="per_core")


# NUMA domains per node from each centre's guide (the YAML comment beside node.numa_domains names the
# page and the place); (ranks, cores each) of ranks_per_node per_numa with threads_per_rank fill.
PER_NUMA = {"frontier": (4, 14), "summit": (2, 21), "polaris": (4, 8), "aurora": (2, 51), "theta": (1, 64),
            "cori-knl": (1, 68)}


@pytest.mark.parametrize("name", PROFILES)
def test_numa_domains_are_set_only_with_a_source_and_per_numa_uses_them(name):
    lines = [line for line in (REPO / "profiles" / name / "site.yaml").read_text().splitlines()
             if line.strip().startswith("numa_domains:")]
    s = site(name)
    if name not in PER_NUMA:
        assert not lines and s.node.numa_domains == 0 and s.node.numa == s.node.sockets, name
        return
    (line,) = lines
    assert re.search(r"#.*https://docs\.", line) and f": {s.node.numa_domains} " in line, line
    cpu_only = 0 if s.node.gpus else None
    lay = resolve_layout(s, ranks_per_node="per_numa", threads_per_rank="fill", gpus_per_rank=cpu_only)
    assert s.node.numa == PER_NUMA[name][0] and (lay.ranks_per_node, lay.cores_per_rank) == PER_NUMA[name], name


def test_a_laptop_campaign_on_summit_gives_each_rank_one_gpu_not_three(tmp_path):
    runs = plan_config(REPO / "config/config.yaml", site("summit"))
    line = render_script(runs[0], site("summit"), RunPaths(Path(FIXED_ROOT) / "summit", runs[0].run_id))[1]
    assert line.startswith("jsrun -n2 -r2 -a1 -c21 -g1 "), line
    [run] = plan_config(tmp_path / "sockets.yaml", site("summit"),
                        "benchmarks:\n  - name: resnet50\n    sweep: {ranks_per_node: [per_socket]}\n")
    assert (run.layout.ranks_per_node, run.layout.gpus_per_rank) == (2, 1)
    bad = tmp_path / "c.yaml"
    bad.write_text("benchmarks:\n  - name: kmeans\n    sweep: {nodes: '1..x'}\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: key 'benchmarks\[0\]\.sweep\.nodes' = '1\.\.x'"):
        load_and_validate(bad, "config")


@pytest.mark.parametrize("name", ["summit", "perlmutter", "polaris", "frontier"])
def test_real_site_references_judge_runs_of_the_default_plan_and_the_rest_get_no_reference(name):
    _, _, _, runs, _ = default_plan(name)
    refs = load_references(REPO / "profiles" / name / "references.yaml")
    plan = [r.to_dict() for r in runs]
    metric_of = {r.benchmark: r.metric for r in refs}
    records = [{**p, "status": "ok", "site": name,
                "metrics": {metric_of.get(p["benchmark"], "throughput"): {"value": 1e-9, "unit": "x"}}} for p in plan]
    rows = verdicts(records, refs, plan, name)
    judged = {r["run_id"] for r in rows if r["verdict"] != "no-reference"}
    assert judged, f"no run of profiles/{name}/campaign.yaml matches profiles/{name}/references.yaml"
    assert not any(r["verdict"] == "pass" for r in rows)  # nothing passes on a made-up value of the wrong unit
    unjudged = {r["run_id"] for r in rows if r["verdict"] == "no-reference"}
    assert unjudged and all(run.run_id in judged | unjudged for run in runs)
    for ref in refs:
        assert re.search(r"(README\.md|datasheet|seed document \S+\.txt, line \d+)", ref.note), ref.note  # its source
    if name != "frontier":
        assert {(r.params["precision"], r.value) for r in refs if r.benchmark == "resnet50"} in (
            {("fp32", 367), ("fp16", 1200)}, {("tf32", 938), ("fp16", 2470)})


def test_exabench_plan_shows_the_sites_campaign_with_node_hours():
    res = subprocess.run([sys.executable, "-m", "exabench", "plan", "--site", "profiles/summit/site.yaml"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    _, _, _, runs, _ = default_plan("summit")
    total = sum(node_hours(r, site("summit")) for r in runs)
    assert "node-hours" in res.stdout.splitlines()[0] and "resnet50.full.fp32.n1r6t7g1" in res.stdout
    assert f"{len(runs)} runs of campaign acceptance-summit (profiles/summit/campaign.yaml)" in res.stdout
    assert f"{total:,.1f} node-hours requested" in res.stdout


@pytest.mark.timeout(300)
def test_the_summit_profile_plans_its_campaign_and_a_given_configfile_replaces_it(tmp_path):
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/summit", "-n", "--quiet", "rules",
           "--config", "node_hours_budget=0"]  # the default campaign is over the site's budget (test_hardening)
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    # Summit submits bundles: a plain run starts nothing here and lists every pending run's bundle
    pending = re.findall(r"(\d+) of \d+ run\(s\) pending", res.stdout + res.stderr)
    assert pending and sum(map(int, pending)) == len(default_plan("summit")[3])
    bad = tmp_path / "mine.yaml"
    bad.write_text("benchmarks:\n  - name: resnet50\n    sweep: {ranks_per_node: [7], gpus_per_rank: [1]}\n")
    res = subprocess.run(cmd + ["--configfile", str(bad)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and f"{bad}: key 'benchmarks[0].sweep'" in res.stdout + res.stderr
    assert "campaign.yaml" not in res.stdout + res.stderr


def test_the_scale_key_sizes_every_entry_that_names_no_nodes(tmp_path):
    path = tmp_path / "scaled.yaml"
    runs = plan_config(path, site("slurm-local"), "scale: machine\ntimeout_s: 300\nbenchmarks:\n"
                       "  - name: kmeans\n    sweep: {ranks_per_node: [per_node]}\n"
                       "  - name: pca\n    sweep: {nodes: [1]}\n")
    assert [(r.benchmark, r.layout.nodes) for r in runs] == [("kmeans", 1), ("kmeans", 2), ("pca", 1)]
    with pytest.raises(ConfigError, match=r"scaled\.yaml: key 'scale' = 'rack'.*rack_nodes"):
        plan_config(path, site("polaris", rack_nodes=0), "scale: rack\nbenchmarks:\n  - name: kmeans\n")
