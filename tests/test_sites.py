"""Every profile: a valid, documented site.yaml and a Snakemake profile pointing at it; the
schema's errors name file, key and value; `exabench launch-lines` prints what a site gets;
the timed stage-in to node-local storage works for real on this machine."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import yaml

from exabench.config import load_and_validate
from exabench.errors import ConfigError, LayoutError
from exabench.execute import execute
from exabench.campaign.render import RunPaths, render_script, walltime_min, write_run_files
from exabench.campaign.plan import expand
from exabench.campaign.site import load_site, resolve_layout

from helpers_sites import PROFILES, REPO, site, write_site_with

EXPECTED = {"summit", "summitdev", "titan", "cori-knl", "theta", "stampede2", "frontier", "perlmutter", "polaris",
            "slurm-local", "local"}


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
        assert res.returncode == 2 and "has no tensorflow image" in res.stderr and "Traceback" not in res.stderr
        res = subprocess.run(argv + ["--config", "config/mlperf.yaml"], cwd=REPO, capture_output=True, text=True,
                             timeout=120)
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
    config = tmp_path / "c.yaml"
    config.write_text("campaign: stage\ntimeout_s: 240\nbenchmarks:\n  - name: kmeans\n    sweep:\n"
                      "      ranks_per_node: [1]\n      k: [2]\n")
    [run] = expand(load_and_validate(config, "config"), s, str(config))
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
