"""`exabench run [snakemake arguments]` (issue 35): every config and profile file the command line
names is read by exabench's loader first, so a damaged one is named with its line and what is
valid, never a Snakemake traceback; and a user's config is the campaign alone, not merged over
config/config.yaml (same plan, same time limit as the `exabench` commands)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exabench.campaign.plan import expand
from exabench.campaign.site import load_site
from exabench.config import MAX_YAML_BYTES, load_and_validate

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def exabench_run(*args, cwd=ROOT, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exabench", "run", *map(str, args)], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def _bad_files(d: Path) -> dict[str, tuple[Path, str]]:
    """Each way a config file can be unreadable as a campaign: (file, what the message must say)."""
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    (d / "folder.yaml").mkdir()
    out["a folder"] = (d / "folder.yaml", "is a directory")
    (d / "dangling.yaml").symlink_to(d / "gone.yaml")
    out["a dangling link"] = (d / "dangling.yaml", "which does not exist")
    (d / "latin1.yaml").write_bytes("campaign: caf\xe9\n".encode("latin-1"))
    out["not UTF-8"] = (d / "latin1.yaml", "is not UTF-8")
    (d / "syntax.yaml").write_text("campaign: x\nbenchmarks:\n  - name: kmeans\n   sweep: [1\n")
    out["a syntax error"] = (d / "syntax.yaml", "'(syntax)' = 'line ")
    (d / "list.yaml").write_text("- name: kmeans\n- name: resnet50\n")
    out["a list"] = (d / "list.yaml", "is not a mapping")
    (d / "twice.yaml").write_text("benchmarks:\n  - name: kmeans\nbenchmarks:\n  - name: resnet50\n")
    out["a key twice"] = (d / "twice.yaml", "is given twice")
    with open(d / "huge.yaml", "wb") as f:
        f.truncate(MAX_YAML_BYTES + 1)  # sparse: refused by its size, never read
    out["too large"] = (d / "huge.yaml", "is too large")
    return out


@pytest.mark.parametrize("what", ["a folder", "a dangling link", "not UTF-8", "a syntax error", "a list",
                                  "a key twice", "too large"])
def test_a_bad_configfile_is_named_before_snakemake_starts(tmp_path, what):
    path, says = _bad_files(tmp_path)[what]
    res = exabench_run("--profile", "profiles/local", "--configfile", path, "-n", timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"exabench: error: {path}" in res.stderr and says in res.stderr, res.stderr
    assert "Using profile" not in res.stdout + res.stderr  # snakemake never started


def test_a_bad_profile_file_is_named(tmp_path):
    profile = tmp_path / "prof"
    profile.mkdir()
    (profile / "config.yaml").write_text("cores: 1\ncores: 2\n")
    res = exabench_run("--profile", profile, "-n", timeout=60)
    assert res.returncode == 2 and f"{profile / 'config.yaml'}: key 'cores'" in res.stderr, res.stderr
    (profile / "config.yaml").write_text(f"configfile: {tmp_path / 'missing.yaml'}\n")
    res = exabench_run("--profile", profile, "-n", timeout=60)
    assert res.returncode == 2 and "missing.yaml" in res.stderr and "does not exist" in res.stderr
    res = exabench_run("--profile", tmp_path / "nope", "-n", timeout=60)
    assert res.returncode == 2 and "is not a folder" in res.stderr


def test_a_user_config_is_the_campaign_alone_with_the_clis_time_limit(tmp_path):
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"campaign": "mine", "benchmarks": [{"name": "kmeans"}]}))
    res = exabench_run("--snakefile", ROOT / "Snakefile", "--profile", ROOT / "profiles" / "local", "--config",
                       f"site={ROOT}/profiles/local/site.yaml", "--configfile", one, "--cores", "1",
                       "results/local/plan.json", cwd=tmp_path)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    planned = json.loads((tmp_path / "results" / "local" / "plan.json").read_text())
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    cli = expand(load_and_validate(one, "config"), site, str(one))  # what `exabench plan --config` plans
    assert [(r["run_id"], r["timeout_s"]) for r in planned] == [(r.run_id, r.timeout_s) for r in cli]
    assert {r["campaign"] for r in planned} == {"mine"} and len(planned) == 1  # not the default campaign's runs

    nobench = tmp_path / "nobench.yaml"
    nobench.write_text("campaign: mine\n")
    res = exabench_run("--snakefile", ROOT / "Snakefile", "--profile", ROOT / "profiles" / "local", "--config",
                       f"site={ROOT}/profiles/local/site.yaml", "--configfile", nobench, "-n", cwd=tmp_path)
    assert res.returncode != 0 and f"{nobench}: key 'benchmarks'" in res.stdout + res.stderr


def test_a_results_store_that_is_a_folder_is_refused_when_the_campaign_is_planned(tmp_path):
    (tmp_path / "store.duckdb").mkdir()
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"campaign": "mine", "benchmarks": [{"name": "kmeans"}],
                                   "results_store": str(tmp_path / "store.duckdb")}))
    res = exabench_run("--snakefile", ROOT / "Snakefile", "--profile", ROOT / "profiles" / "local", "--config",
                       f"site={ROOT}/profiles/local/site.yaml", "--configfile", one, "-n", cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and f"key 'results_store' = '{tmp_path / 'store.duckdb'}' is a folder" in out, out[-2000:]
