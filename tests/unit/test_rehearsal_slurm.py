"""The Slurm stand-ins of a rehearsal (exabench.rehearsal.slurm) hold a site's #SBATCH header and
srun line to the Slurm rule book (rules/sbatch-slurm.yaml, rules/srun-slurm.yaml) and the site
file: a line that breaks a rule is refused with the rule's words and its source (the site's own rule
where it has one); an accepted header is mapped to the loopback cluster, each change with its why."""

from __future__ import annotations

from pathlib import Path

import pytest

from exabench.campaign.site import load_site
from exabench.rehearsal import slurm
from exabench.rehearsal.rules import Refused, book

REPO = Path(__file__).resolve().parents[2]
SITES = {name: load_site(REPO / "profiles" / name / "site.yaml")
         for name in ("frontier", "perlmutter", "cori-knl", "stampede2", "dgx-superpod")}
HEADERS = {   # what each site's own template writes for a one-node job, as rendered scripts carry it
    "frontier": "-A ABC123 -N 1 -t 00:30:00 -p batch --ntasks-per-node=8 --cpus-per-task=7",
    "perlmutter": "-A m0000 -q debug -C gpu -N 1 -t 00:30:00 --gpus-per-node=4 --mem=230400M",
    "cori-knl": "-q debug -C knl,quad,cache -N 1 -t 00:30:00 --image=docker:exabench/cpu:0.1.0",
    "stampede2": "-p development -N 1 -n 1 -t 00:30:00",
    "dgx-superpod": "-p batch -N 1 -t 00:30:00 --gpus-per-node=8",
}


def _job(name: str, extra: str = ""):
    site = SITES[name]
    opts = slurm.parse(slurm.SBATCH, (HEADERS[name] + " " + extra).split(), site)
    job = slurm.check_job(opts, site)
    return job, slurm.check_queue(job, site), opts


def _cites(call, book_name: str, rule_name: str, source: str = "") -> str:
    """The refusal's message, which names the rule, gives its words and its source (a queue's own page
    where the site file names one)."""
    with pytest.raises(Refused) as caught:
        call()
    message = str(caught.value)
    entry = book(book_name)["rules"][rule_name]
    source = source or entry["source"]
    assert f"rule '{rule_name}'" in message and entry["says"] in message, message
    assert f"source: {source})" in message and source.startswith("https://"), message
    return message


def test_each_sites_own_header_is_accepted_in_the_queue_its_size_picks():
    assert [_job(name)[1] for name in HEADERS] == ["batch-bin5", "debug", "debug", "development", "batch"]


@pytest.mark.parametrize("name, extra, rule_name", [
    ("frontier", "--bogus=1", "known_option"),
    ("frontier", "--image=docker:x:1", "spank"),                    # Shifter's SPANK option: NERSC's only
    ("frontier", "--constraint=knl", "constraint@frontier"),
    ("perlmutter", "--constraint=knl", "constraint@perlmutter"),    # gpu or cpu nodes
    ("stampede2", "--mem=90G", "memory@stampede2"),                 # TACC: whole nodes, --mem not accepted
    ("frontier", "--ntasks-per-node=8 --cpus-per-task=16", "node_fits"),   # 128 of 64 CPUs
    ("cori-knl", "--gpus-per-node=1", "gpus_fit"),                  # KNL nodes have no GPU
    ("perlmutter", "--mem=300G", "memory_fits"),                    # 256 GB nodes
    ("frontier", "-N two", "value_form"),
])
def test_sbatch_refuses_headers_that_break_the_centres_rules(name, extra, rule_name):
    _cites(lambda: _job(name, extra), slurm.SBATCH, rule_name)


def test_a_job_larger_than_its_qos_admits_is_refused_citing_the_sites_queue_page():
    # NERSC's debug QOS: 8 nodes at most (profiles/perlmutter/site.yaml, from the queue policy page)
    message = _cites(lambda: _job("perlmutter", "-N 16"), slurm.SBATCH, "queue", "https://docs.nersc.gov/jobs/policy/")
    assert "16 node(s) for 30 min in queue 'debug'" in message


def test_a_header_without_what_the_centre_requires_is_refused_naming_what_is_missing():
    site = SITES["frontier"]
    opts = slurm.parse(slurm.SBATCH, ["-N", "1", "-t", "30"], site)   # no project (-A)
    message = _cites(lambda: slurm.check_job(opts, site), slurm.SBATCH, "required@frontier")
    assert "missing --account" in message


@pytest.mark.parametrize("name, env, argv, rule_name", [
    ("frontier", {}, ["-n", "1", "true"], "inside"),
    ("perlmutter", {"SLURM_JOB_ID": "1"}, ["--container-image=x.sqsh", "true"], "spank"),   # Pyxis: the SuperPOD's
    ("frontier", {"SLURM_JOB_ID": "1"}, ["--nodes=4", "true"], "step_fits_job"),            # a 2-node job
    ("frontier", {"SLURM_JOB_ID": "1"}, ["--nodes=1", "--ntasks-per-node=8", "-c", "16", "true"], "node_fits"),
    ("frontier", {"SLURM_JOB_ID": "1"}, ["--nodes=1", "--ntasks=8", "--gpus-per-task=2", "true"], "gpus_fit"),
    ("frontier", {"SLURM_JOB_ID": "1"}, ["--mpi=openmpi", "true"], "value_form"),
    ("frontier", {"SLURM_JOB_ID": "1"}, ["--frobnicate", "true"], "known_option"),
])
def test_srun_refuses_lines_that_break_the_rules(monkeypatch, tmp_path, name, env, argv, rule_name):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("EXABENCH_REHEARSAL_NODES", "2")
    monkeypatch.setenv("EXABENCH_REHEARSAL_LOG", str(tmp_path / "decisions.jsonl"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _cites(lambda: slurm.srun(argv, SITES[name]), slurm.SRUN, rule_name)
    assert not (tmp_path / "decisions.jsonl").exists()   # refused before anything ran


def test_the_pyxis_options_are_known_on_the_superpod():
    line = slurm.parse(slurm.SRUN, ["--container-image=/x.sqsh", "--no-container-mount-home", "env", "A=1", "true"],
                       SITES["dgx-superpod"], program=True)
    assert line.values["--container-image"] == "/x.sqsh" and line.program == ["env", "A=1", "true"]


def test_an_accepted_header_is_mapped_to_the_loopback_cluster_saying_why():
    _, _, opts = _job("perlmutter", "-N 4 --ntasks-per-node=4 --cpus-per-task=32")
    here = slurm.Here(nodes=2, cpus=4, memory_mb=4000, partition="debug", minutes=30)
    mapped = slurm.map_job(opts, here, ranks=2)
    options = dict(mapped.options)
    assert (options["--nodes"], options["--ntasks-per-node"], options["--partition"]) == ("2", "1", "debug")
    assert (mapped.nodes, mapped.tasks) == (2, 2) and options["--mem"] == "3600M"
    for gone in ("--account", "--qos", "--constraint", "--gpus-per-node"):
        assert gone not in options, gone
    why = book(slurm.SBATCH)["loopback"]["--qos"][1]
    assert f"--qos debug -> (removed) ({why})" in mapped.changes
    assert "--time 00:30:00" not in " ".join(mapped.changes)   # within the partition's 30 min: kept


def test_check_rendered_names_the_script_and_the_line_the_stand_ins_would_refuse(tmp_path):
    results = tmp_path / "results" / "frontier"
    (results / "runs" / "r1").mkdir(parents=True)
    (results / "bundles").mkdir()
    (results / "bundles" / "ok.sh").write_text("#!/usr/bin/env bash\n#SBATCH -A ABC123\n#SBATCH -N 2\n"
                                               "#SBATCH -t 00:30:00\n#SBATCH -p batch\nsrun --nodes=2 true\n")
    (results / "runs" / "r1" / "job.sh").write_text("#!/usr/bin/env bash\n#SBATCH -A ABC123\n#SBATCH -N 1\n"
                                                    "#SBATCH -t 00:30:00\n#SBATCH -p batch\nsrun --nodes=2 true\n")
    checked, refused = slurm.check_rendered(SITES["frontier"], results)
    assert checked == 4 and len(refused) == 1, refused
    assert refused[0].startswith("runs/r1/job.sh: srun: refused: --nodes 2 in a job of 1 node(s)") and \
        "rule 'step_fits_job'" in refused[0]
