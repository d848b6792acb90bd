"""Bad input from the user's own files: a non-zero exit, a message that names the file, the key and
the value and what is valid, no traceback, nothing written. Both entry points: the `exabench`
command and `snakemake` run from the repository root (where config/config.yaml exists, so that an
error naming the default file instead of the user's would show)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO
from exabench.config import MAX_YAML_BYTES, load_yaml
from exabench.errors import ConfigError
from exabench.records.record import allowed_env, provenance

KMEANS = "benchmarks:\n  - name: kmeans\n"

BAD_FILES = {
    "duplicate-key": (KMEANS + "benchmarks:\n  - name: pca\n", "key 'benchmarks' = 'line 3' is given twice"),
    "duplicate-nested": ("benchmarks:\n  - name: kmeans\n    params: {k: 2, k: 3}\n", "key 'k'"),
    "not-utf8": (b"campaign: caf\xe9\n" + KMEANS.encode(), "is not UTF-8"),
    "syntax": ("benchmarks: [\n", "cannot be parsed"),
    "control-character": ('campaign: "tiny\\n"\n' + KMEANS, "key 'campaign' = 'tiny\\n'"),
    "tab-in-label": ('benchmarks:\n  - name: kmeans\n    label: "a\\tb"\n', "benchmarks[0].label"),
    "unit": ("benchmarks:\n  - name: kmeans\n    params: {size_per_node: 8G}\n",
             "key 'benchmarks[0].params.size_per_node' = '8G' is not valid; valid: rows"),
    "unit-in-a-sweep": ("benchmarks:\n  - name: pca\n    sweep: {size_per_node: [8GB, 8QB]}\n",
                        "key 'benchmarks[0].sweep.size_per_node' = '8QB'"),
    "k-beyond-bound": ("benchmarks:\n  - name: kmeans\n    params: {k: 1000000000000000000000000000000}\n",
                       "<= 100000"),
}


def _write(path, content):
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "exabench", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_the_command_names_the_users_file_and_key(tmp_path, case):
    content, says = BAD_FILES[case]
    path = _write(tmp_path / f"{case}.yaml", content)
    res = _cli("plan", "--config", str(path))
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"exabench: error: {path}" in res.stderr and says in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("case", ["duplicate-key", "control-character", "k-beyond-bound"])
def test_snakemake_from_the_repository_root_names_the_configfile_given(tmp_path, case):
    content, says = BAD_FILES[case]
    path = _write(tmp_path / f"{case}.yaml", content)
    res = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--configfile", str(path),
                          "-n"], cwd=REPO, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and f"exabench: invalid configuration: {path}" in out and says in out, out[-3000:]
    assert "config/config.yaml" not in out.split("exabench: invalid configuration:")[1].splitlines()[0]


def test_a_directory_a_missing_file_and_an_oversized_file_are_named(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_yaml(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "nope.yaml")
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(MAX_YAML_BYTES + 1)  # sparse: refused from its size, never read
    with pytest.raises(ConfigError, match=f"is too large; valid: at most {MAX_YAML_BYTES} bytes"):
        load_yaml(big)
    res = _cli("plan", "--config", str(tmp_path))
    assert res.returncode == 2 and "is a directory" in res.stderr and "Traceback" not in res.stderr


def test_a_site_file_gets_the_same_loader(tmp_path):
    site = _write(tmp_path / "site.yaml", (REPO / "profiles/local/site.yaml").read_text() + "name: again\n")
    res = _cli("plan", "--site", str(site))
    assert res.returncode == 2 and f"{site}: key 'name'" in res.stderr and "given twice" in res.stderr, res.stderr


def test_a_reader_that_leaves_early_is_no_error():
    res = subprocess.run(f"{sys.executable} -m exabench list -v | head -1", shell=True, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.count("\n") == 1 and res.stderr == "", res.stderr


@pytest.mark.parametrize("name", ["NCCL_PASS", "UCX_PASSPHRASE", "CUDA_APIKEY", "MPICH_PWD", "HOROVOD_SECRET",
                                  "FI_CXI_AUTH_KEY", "SLURM_JOB_TOKEN"])
def test_no_secret_reaches_a_record_whatever_its_prefix(name):
    env = {name: "hunter2", "NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "4"}
    assert allowed_env(env, extra=(name,)) == {"NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "4"}


# Names in the allowed namespaces that look like credentials: the last three got through the earlier
# patterns (a one-time password, a PIN, a signature), the others are those test_results.py and the test
# above check.
SECRET_LIKE_NAMES = ["NCCL_IB_OTP", "FI_CXI_PIN", "UCX_SIG",
                     "NCCL_PASS", "UCX_PASSPHRASE", "CUDA_APIKEY", "MPICH_PWD", "HOROVOD_SECRET", "FI_CXI_AUTH_KEY",
                     "SLURM_JOB_TOKEN", "NCCL_IB_CRED", "UCX_SESS_ID", "FI_CXI_TOK", "CUDA_PRIV_2", "HOROVOD_AUTH_ID",
                     "MPICH_PASSWD", "NCCL_NET_CREDS", "UCX_SESSION", "FI_HMAC", "NCCL_SIGNING_SALT", "HIP_CERT_PATH",
                     "MIOPEN_Bearer"]


@pytest.mark.parametrize("name", SECRET_LIKE_NAMES)
def test_a_secret_like_variable_reaches_a_record_by_name_only(name):
    # As the record of a run whose site's `env` names the variable (the widest a record allows).
    env = {name: "hunter2", "NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "4", "HOME": "/home/me"}
    prov = provenance("t0", "t1", ["h"], env_names=(name,), run_env=env)
    assert "hunter2" not in json.dumps(prov)
    assert prov["environment"].get("NCCL_IB_HCA") == "mlx5" and name not in prov["environment"]
    assert {name, "HOME"} <= set(prov["environment_withheld"]) and "NCCL_IB_HCA" not in prov["environment_withheld"]


def test_a_node_name_with_a_trailing_newline_is_refused():
    from exabench.campaign.node_sweep import node_run_files
    from exabench.errors import ExabenchError
    with pytest.raises(ExabenchError, match=r"node name 'c001\\n' is not valid"):
        node_run_files(str(REPO / "nonexistent-spec.json"), "c001\n")


def test_a_failed_run_shows_no_figure_in_the_summary():
    from exabench.records.tidy import markdown_summary, tidy_table
    base = {"schema": "exabench.result/1", "benchmark": "kmeans", "swept": {}, "layout": {"nodes": 1},
            "workload": {"headline": "time"}}
    ok = {**base, "run_id": "a", "status": "ok", "metrics": {"time": {"value": 2.5, "unit": "s"}}}
    failed = {**base, "run_id": "b", "status": "failed", "error": "rank 1: boom",
              "metrics": {"time": {"value": 0.001, "unit": "s"}}}  # a partial figure from a run that failed
    lines = markdown_summary(tidy_table([ok, failed]), "local").splitlines()
    assert "| a | kmeans |  | time | 2.5 | s |" in lines[4]
    assert lines[5] == "| b | kmeans |  | time |  |  |  |  | failed | rank 1: boom |"


@pytest.mark.parametrize("site, longest", [("summit", 86100), ("polaris", 86100)])
def test_a_timeout_longer_than_the_sites_longest_job_stops_at_planning(tmp_path, site, longest):
    path = _write(tmp_path / "long.yaml", f"timeout_s: {longest + 1}\n" + KMEANS)
    res = _cli("plan", "--config", str(path), "--site", f"profiles/{site}/site.yaml")
    assert res.returncode == 2 and f"{path}: key 'timeout_s' = {longest + 1}" in res.stderr, res.stderr
    assert f"at most {longest} s on site '{site}'" in res.stderr
    # The longest job fits only the queue for the largest jobs (Summit's bins 1-2, Polaris' large).
    wide = {"summit": 922, "polaris": 100}[site]
    ok = _write(tmp_path / "fits.yaml", f"timeout_s: {longest}\n" + KMEANS + f"    sweep:\n      nodes: [{wide}]\n")
    assert _cli("plan", "--config", str(ok), "--site", f"profiles/{site}/site.yaml").returncode == 0


@pytest.mark.skipif(__import__("shutil").which("singularity") is not None, reason="singularity is installed here")
def test_building_an_image_without_its_runtime_says_what_to_do(tmp_path, monkeypatch):
    from exabench.campaign.site import load_site
    from exabench.containers.build import build_image
    from exabench.errors import ContainerError
    site = load_site(REPO / "profiles/summit/site.yaml")
    monkeypatch.setenv("PATH", str(tmp_path))  # nor the tools that build a SIF without it
    with pytest.raises(ContainerError, match="'singularity' is not installed here") as caught:
        build_image(site, "cpu", tmp_path / "images" / "cpu.sif", tmp_path / "build.log")
    assert "snakemake --profile profiles/summit containers" in str(caught.value)
    assert "container.image" in str(caught.value) and not (tmp_path / "images").exists()
    assert "siftool (apt-get install -y siftool)" in str(caught.value)


@pytest.mark.integration
def test_the_image_build_job_on_a_slurm_site_is_charged_to_the_sites_account():
    # A PyTorch campaign: no image carries TensorFlow for Frontier's AMD GPUs (docs/containers.md).
    res = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/frontier", "containers", "-n",
                          "--configfile", "config/mlperf.yaml"], cwd=REPO, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    build = out[out.index("rule container_image"):]
    assert "slurm_account=ABC123" in build.split("\n\n")[0] and "slurm_partition=batch" in build.split("\n\n")[0]


def _doc_configs():
    import re
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text()
        for m in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
            if re.search(r"^benchmarks:", m.group(1), re.M):
                yield pytest.param(m.group(1), id=f"{doc.name}:{text[: m.start()].count(chr(10)) + 1}")


@pytest.mark.parametrize("text", list(_doc_configs()))
def test_every_example_config_in_the_docs_validates_and_plans(text, tmp_path):
    from exabench.campaign.plan import expand
    from exabench.campaign.site import load_site
    from exabench.config import load_and_validate
    path = _write(tmp_path / "example.yaml", text)
    config = load_and_validate(str(path), "config")  # raises, naming the key, on a stale parameter
    assert expand(config, load_site(str(REPO / "tests" / "data" / "sites" / "golden-local.yaml")), str(path))


def test_the_readme_example_is_among_the_checked_configs():
    assert any("my-study" in p.values[0] for p in _doc_configs())


@pytest.mark.integration
def test_a_campaign_over_the_node_hour_budget_is_refused_and_config_keeps_the_profiles_site():
    """Summit's default campaign asks 87,591 node-hours: refused before anything is rendered, naming
    the total, the largest jobs and the override; the override itself, `--config node_hours_budget=N`,
    replaces the profile's whole `config:` list in Snakemake, whose site= exabench keeps (it used to
    plan the default site's campaign on this machine, or stop asking for site= again)."""
    base = [sys.executable, "-m", "snakemake", "--profile", "profiles/summit", "-n"]
    over = subprocess.run(base, cwd=REPO, capture_output=True, text=True, timeout=300)
    out = over.stdout + over.stderr
    assert over.returncode != 0 and "Traceback" not in out, out[-2000:]
    assert "profiles/summit/site.yaml: key 'node_hours_budget' = 1000 is below the 87,591.2 node-hours" in out, out[-2000:]
    assert "largest: bundle acceptance-summit-60-of-61: 4,096 nodes" in out and "--config node_hours_budget=88000" in out
    assert not (REPO / "results" / "summit" / "bundles").exists() or over.returncode != 0
    raised = subprocess.run(base + ["--config", "node_hours_budget=100000"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    out = raised.stdout + raised.stderr
    assert raised.returncode == 0, out[-2000:]
    assert "bsub < results/summit/bundles/acceptance-summit-01-of-61.sh" in out, out[-2000:]  # summit's, not local's plan
    low = subprocess.run(base + ["--config", "node_hours_budget=50000"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert low.returncode != 0 and "--config: key 'node_hours_budget' = 50000 is below the 87,591.2" in low.stderr
    mine = subprocess.run(base + ["--config", "site=profiles/local/site.yaml", "timeout_s=600"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    # A site named on the command line is the user's, not the profile's: Summit's campaign on this machine.
    assert mine.returncode != 0 and "does not fit site 'local'" in mine.stderr, (mine.stdout + mine.stderr)[-2000:]
    # `--config` with no entries (`--config $EXTRA`, EXTRA empty) replaces the list too: still Summit's site.
    empty = subprocess.run(base + ["--config"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert empty.returncode != 0 and "profiles/summit/site.yaml: key 'node_hours_budget'" in empty.stderr, \
        (empty.stdout + empty.stderr)[-2000:]
