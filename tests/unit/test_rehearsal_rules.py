"""The rehearsal's stand-ins refuse what the centres document they refuse (exabench.rehearsal): for
each submit command and launcher, lines that break a documented rule are refused with the rule's
words and its source; a line that keeps every rule is accepted and run (the batch job with its
scheduler's variables, the ranks through mpirun)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from exabench.campaign.site import load_site
from exabench.rehearsal import standins
from exabench.rehearsal.rules import BOOKS, Refused, book

REPO = Path(__file__).resolve().parents[2]
SITES = {name: load_site(REPO / "profiles" / name / "site.yaml") for name in ("summit", "polaris", "titan", "theta")}
SUMMIT_HEADER = "#BSUB -P ABC123\n#BSUB -nnodes 1\n#BSUB -W 00:30\n#BSUB -q batch\n"
POLARIS_HEADER = ("#PBS -A ABC123\n#PBS -q debug\n#PBS -l select=1:system=polaris\n#PBS -l walltime=00:30:00\n"
                  "#PBS -l filesystems=home:eagle\n")
TITAN_HEADER = "#PBS -A ABC123\n#PBS -q batch\n#PBS -l nodes=1\n#PBS -l walltime=01:00:00\n"
THETA_HEADER = "#COBALT -n 1\n#COBALT -t 30\n#COBALT -q debug-cache-quad\n#COBALT -A ABC123\n"


@pytest.fixture(autouse=True)
def rehearsal_state(tmp_path, monkeypatch):
    monkeypatch.setenv("EXABENCH_REHEARSAL_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("EXABENCH_REHEARSAL_LOG", str(tmp_path / "decisions.jsonl"))
    for var in ("LSB_JOBID", "PBS_JOBID", "SLURM_JOB_ID", "SLURM_NTASKS", "EXABENCH_REHEARSAL_JOB"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _script(tmp_path: Path, text: str, executable: bool = True) -> Path:
    path = tmp_path / "job.sh"
    path.write_text("#!/usr/bin/env bash\n" + text + 'echo "ran $*"\n')
    path.chmod(0o755 if executable else 0o644)
    return path


def _refusal(call) -> str:
    with pytest.raises(Refused) as caught:
        call()
    message = str(caught.value)
    assert "refused" in message and "source: https://" in message, message
    return message


def _assert_cites(message: str, book_name: str, rule_name: str) -> None:
    entry = book(book_name)["rules"][rule_name]
    assert f"rule '{rule_name}'" in message and entry["says"] in message, message


def test_every_rule_in_every_book_has_words_and_a_source():
    for path in sorted(BOOKS.glob("*.yaml")):
        for name, entry in book(path.stem)["rules"].items():
            assert entry["says"] and entry["source"].startswith("https://"), (path.name, name)


@pytest.mark.parametrize("extra, rule_name", [
    ("#BSUB -x\n", "known_option"),                      # exclusive: not an option Summit documents
    ("#BSUB -csm y\n", "csm_with_nnodes"),
    ('#BSUB -alloc_flags "smt8"\n', "alloc_flags"),      # POWER9 has SMT4 at most
    ("#BSUB -W 07:00\n", "queue"),                       # bin 5 (1-45 nodes) allows 2 h
    ("#BSUB -nnodes two\n", "value_form"),
])
def test_bsub_refuses_lines_that_break_summits_rules(tmp_path, extra, rule_name, monkeypatch):
    script = _script(tmp_path, SUMMIT_HEADER + extra)
    message = _refusal(lambda: _bsub(monkeypatch, script))
    _assert_cites(message, "lsf-olcf", rule_name)


def _bsub(monkeypatch, script):
    """`bsub < script`, as LSF reads a script's #BSUB lines."""
    monkeypatch.setattr(sys, "stdin", script.open())
    return standins.submit("bsub", [], SITES["summit"])


def test_bsub_refuses_a_script_given_as_an_argument_whose_directives_lsf_would_ignore(tmp_path):
    script = _script(tmp_path, SUMMIT_HEADER)
    message = _refusal(lambda: standins.submit("bsub", [str(script)], SITES["summit"]))
    _assert_cites(message, "lsf-olcf", "script_on_stdin")
    assert f"submit it as bsub < {script}" in message


def test_bsub_refuses_a_job_without_a_project_and_beyond_the_users_queued_jobs(tmp_path, monkeypatch):
    script = _script(tmp_path, "#BSUB -nnodes 1\n#BSUB -W 00:30\n")
    _assert_cites(_refusal(lambda: _bsub(monkeypatch, script)), "lsf-olcf", "required")
    jobs = tmp_path / "state" / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)  # the refused submission above kept its script in state/
    for i in range(100):   # Summit's batch queue: 100 jobs queued per user, any state
        (jobs / f"{i}.json").write_text(json.dumps({"pid": os.getpid(), "queue": "batch-bin5"}))
    script = _script(tmp_path, SUMMIT_HEADER)
    message = _refusal(lambda: _bsub(monkeypatch, script))
    assert "rule 'per_user'" in message and "summit_user_guide.html#batch-queue-policy" in message


@pytest.mark.parametrize("site, header, extra, book_name, rule_name", [
    ("polaris", POLARIS_HEADER, "#PBS -l filesystems=lustre\n", "pbspro-alcf", "filesystems"),
    ("polaris", POLARIS_HEADER, "#PBS -l select=1:system=aurora\n", "pbspro-alcf", "system"),
    ("polaris", POLARIS_HEADER, "#PBS -l mem=64gb\n", "pbspro-alcf", "known_resource"),
    ("polaris", POLARIS_HEADER, "#PBS -l select=3:system=polaris\n", "pbspro-alcf", "queue"),  # debug: 1-2 nodes
    ("polaris", POLARIS_HEADER.replace("#PBS -l filesystems=home:eagle\n", ""), "", "pbspro-alcf", "required"),
    ("titan", TITAN_HEADER, "#PBS -l select=1\n", "torque-olcf", "known_resource"),  # PBS Pro's form, not Torque's
    ("titan", TITAN_HEADER, "#PBS -l walltime=03:00:00\n", "torque-olcf", "queue"),  # bin 5: 2 h
    ("titan", TITAN_HEADER.replace("#PBS -A ABC123\n", ""), "", "torque-olcf", "required"),
    ("theta", THETA_HEADER, "#COBALT --attrs mcdram=fast\n", "cobalt-alcf", "attrs"),
    ("theta", THETA_HEADER, "#COBALT -n 9\n", "cobalt-alcf", "queue"),               # debug: 1-8 nodes
    ("theta", THETA_HEADER, "#COBALT -q default\n#COBALT -n 128\n#COBALT -t 20\n", "cobalt-alcf", "queue"),  # >= 30 min
    ("theta", THETA_HEADER, "#COBALT --mode script\n", "cobalt-alcf", "known_option"),
])
def test_qsub_refuses_lines_that_break_the_centres_rules(tmp_path, site, header, extra, book_name, rule_name):
    script = _script(tmp_path, header + extra)
    message = _refusal(lambda: standins.submit("qsub", [str(script)], SITES[site]))
    _assert_cites(message, book_name, rule_name)


def test_cobalt_refuses_a_script_that_is_not_executable(tmp_path):
    script = _script(tmp_path, THETA_HEADER, executable=False)
    _assert_cites(_refusal(lambda: standins.submit("qsub", [str(script)], SITES["theta"])), "cobalt-alcf", "executable")


def test_an_accepted_job_runs_with_its_schedulers_variables(tmp_path, capsys):
    script = _script(tmp_path, POLARIS_HEADER + f"#PBS -o {tmp_path}/out.txt\n#PBS -j oe\n"
                     'echo "$PBS_JOBID $PBS_QUEUE $EXABENCH_REHEARSAL_NODES $(cat $PBS_NODEFILE | wc -l)"\n')
    assert standins.submit("qsub", [str(script)], SITES["polaris"]) == 0
    assert capsys.readouterr().out.strip() == "1.rehearsal"
    assert (tmp_path / "out.txt").read_text().splitlines()[0] == "1.rehearsal debug 1 1"
    decision = json.loads((tmp_path / "decisions.jsonl").read_text().splitlines()[-1])
    assert decision["verdict"] == "accepted" and decision["queue"] == "debug" and decision["exit"] == 0


@pytest.mark.parametrize("site, tool, env, argv, book_name, rule_name", [
    ("summit", "jsrun", {"LSB_JOBID": "1"}, ["-n1", "-a1", "-c43", "-g1", "true"], "jsrun", "set_fits_node"),
    ("summit", "jsrun", {"LSB_JOBID": "1"}, ["-n7", "-r7", "-a1", "-c6", "-g1", "true"], "jsrun", "sets_per_node"),
    ("summit", "jsrun", {"LSB_JOBID": "1"}, ["-n12", "-r6", "-a1", "-c7", "-g1", "true"], "jsrun", "sets_fit_job"),
    ("summit", "jsrun", {"LSB_JOBID": "1"}, ["-n1", "-a2", "-c7", "-g1", "-bpacked:7", "true"], "jsrun", "bind"),
    ("summit", "jsrun", {"LSB_JOBID": "1"}, ["--nodes", "1", "true"], "jsrun", "known_option"),
    ("summit", "jsrun", {}, ["-n1", "true"], "jsrun", "inside"),
    ("theta", "aprun", {"EXABENCH_REHEARSAL_JOB": "1"}, ["-n", "1", "-j", "8", "true"], "aprun", "threads_per_core"),
    ("theta", "aprun", {"EXABENCH_REHEARSAL_JOB": "1"}, ["-n", "64", "-N", "64", "-d", "2", "-j", "1", "true"],
     "aprun", "node_fits"),
    ("theta", "aprun", {"EXABENCH_REHEARSAL_JOB": "1"}, ["-n", "128", "-N", "64", "true"], "aprun", "ranks_fit_job"),
    ("theta", "aprun", {"EXABENCH_REHEARSAL_JOB": "1"}, ["-n", "1", "-cc", "spread", "true"], "aprun", "bind"),
    ("polaris", "mpiexec", {"PBS_JOBID": "1"}, ["-n", "4", "--ppn", "4", "--depth=32", "true"], "mpiexec-pals",
     "node_fits"),
    ("polaris", "mpiexec", {"PBS_JOBID": "1"}, ["-n", "8", "--ppn", "4", "true"], "mpiexec-pals", "ranks_fit_job"),
    ("polaris", "mpiexec", {"PBS_JOBID": "1"}, ["-n", "4", "--ppn", "4", "--cpu-bind=list:0-7", "true"],
     "mpiexec-pals", "bind"),
    ("polaris", "mpiexec", {"PBS_JOBID": "1"}, ["-np", "4", "-genv", "A", "1", "true"], "mpiexec-pals", "known_option"),
])
def test_launchers_refuse_lines_that_break_the_documented_rules(monkeypatch, site, tool, env, argv, book_name,
                                                                rule_name):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("EXABENCH_REHEARSAL_NODES", "1")
    message = _refusal(lambda: standins.start(tool, argv, SITES[site]))
    _assert_cites(message, book_name, rule_name)


@pytest.mark.parametrize("argv, rule_name", [
    (["-ppn", "200", "true"], "node_fits"),
    (["-n", "2", "-bind-to", "cores", "true"], "bind"),
    (["-n", "2", "--ppn", "2", "true"], "known_option"),   # PALS' spelling, not Hydra's
])
def test_hydra_mpiexec_refuses_lines_that_break_its_rules(argv, rule_name):
    site = dataclasses.replace(SITES["polaris"], mpi="mpich")
    _assert_cites(_refusal(lambda: standins.start("mpiexec", argv, site)), "mpiexec-hydra", rule_name)


@pytest.mark.parametrize("env, argv, rule_name", [
    ({}, ["-n", "2", "true"], "inside"),
    ({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "4"}, ["-n", "4", "-o", "2", "true"], "ranks_fit_job"),
    ({"SLURM_JOB_ID": "1"}, ["-c", "4", "true"], "known_option"),
    ({"SLURM_JOB_ID": "1"}, ["-n", "two", "true"], "value_form"),
])
def test_ibrun_refuses_lines_that_break_taccs_rules(monkeypatch, env, argv, rule_name):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    site = dataclasses.replace(SITES["polaris"], launcher="ibrun")
    _assert_cites(_refusal(lambda: standins.start("ibrun", argv, site)), "ibrun", rule_name)


def test_an_accepted_launch_runs_its_ranks_with_mpirun_scaled_down(tmp_path, monkeypatch):
    monkeypatch.setenv("LSB_JOBID", "1")
    monkeypatch.setenv("EXABENCH_REHEARSAL_NODES", "2")
    monkeypatch.setenv("EXABENCH_REHEARSAL_RANKS", "2")
    out = tmp_path / "ranks"
    out.mkdir()
    argv = ["-n12", "-r6", "-a1", "-c7", "-g1", "-bpacked:7", "sh", "-c",
            f'touch {out}/rank$OMPI_COMM_WORLD_RANK']
    assert standins.start("jsrun", argv, SITES["summit"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["rank0", "rank1"]
    decision = json.loads((tmp_path / "decisions.jsonl").read_text().splitlines()[-1])
    assert (decision["ranks"], decision["ranks_here"], decision["exit"]) == (12, 2, 0)


def test_a_launchs_threads_are_scaled_to_this_machines_cpus_through_its_container(tmp_path, monkeypatch):
    # Polaris's line asks 8 threads a rank (--depth=8, OMP_NUM_THREADS=8, also in apptainer's --env):
    # here each of the 2 ranks gets its share of this machine's CPUs, as OpenMP's threads and the runner's cap.
    monkeypatch.setenv("PBS_JOBID", "1")
    monkeypatch.setenv("EXABENCH_REHEARSAL_NODES", "1")
    monkeypatch.setenv("EXABENCH_REHEARSAL_RANKS", "2")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "bin").mkdir()
    apptainer = tmp_path / "bin" / "apptainer"   # the container stand-in, as `exabench rehearse` puts it on PATH
    apptainer.write_text(f"#!/bin/sh\nexec {sys.executable} -m exabench.rehearsal.standins apptainer \"$@\"\n")
    apptainer.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    out = tmp_path / "threads"
    out.mkdir()
    argv = ["-n", "4", "--ppn", "4", "--depth=8", "--cpu-bind", "depth", "--env", "OMP_NUM_THREADS=8", "apptainer",
            "exec", "--env=OMP_NUM_THREADS=8", "image.sif", "sh", "-c",
            f'echo "$OMP_NUM_THREADS $EXABENCH_MAX_THREADS" > {out}/rank$OMPI_COMM_WORLD_RANK']
    assert standins.start("mpiexec", argv, SITES["polaris"]) == 0
    share = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert {p.name: p.read_text().split() for p in out.iterdir()} == {"rank0": [share, share], "rank1": [share, share]}
    decision = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()
                if '"mpiexec"' in line][-1]
    assert (decision["threads"], decision["threads_here"]) == ("8", share)


def test_the_runner_starts_no_more_threads_than_its_cap(monkeypatch):
    from exabench.runner import Context
    from exabench.training.distributed import World
    ctx = Context(spec={"layout": {"threads_per_rank": 32}}, world=World(0, 1, 0, 1, "single", False), run_dir=REPO)
    monkeypatch.delenv("EXABENCH_MAX_THREADS", raising=False)
    assert ctx.threads == 32
    monkeypatch.setenv("EXABENCH_MAX_THREADS", "1")
    assert ctx.threads == 1
    monkeypatch.setenv("EXABENCH_MAX_THREADS", "64")
    assert ctx.threads == 32


@pytest.mark.parametrize("argv, line", [
    (["--profile", "profiles/local"], "exabench: error: --profile profiles/local: site local has no scheduler to "
     "rehearse (scheduler: none); valid here: a bundle site (summit, summitdev, titan, theta, polaris, aurora) or a "
     "Slurm site (frontier, perlmutter, cori-knl, stampede2, dgx-superpod, slurm-local)"),
    (["--profile", "profiles/nowhere"], "exabench: error: --profile profiles/nowhere: no site.yaml there; valid: a "
     "site profile folder such as profiles/summit"),
    (["--profile", "profiles/summit", "--config", "scale"], "exabench: error: --config scale: not valid; valid: "
     "KEY=VALUE, e.g. scale=node"),
    (["--profile", "profiles/summit", "--ranks", "0"], "exabench: error: --ranks 0: not valid; valid: a count of "
     "ranks >= 1"),
])
def test_rehearse_refuses_what_it_cannot_rehearse_in_one_line(tmp_path, monkeypatch, capsys, argv, line):
    from exabench.cli import main
    monkeypatch.chdir(REPO)
    assert main(["rehearse", *argv, "--work", str(tmp_path / "w")]) == 2
    assert capsys.readouterr().err.strip() == line
    assert not (tmp_path / "w").exists()


def test_rehearse_on_a_slurm_site_with_no_cluster_answering_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from exabench.cli import main
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "nowhere" / "slurm.conf"))
    assert main(["rehearse", "--profile", "profiles/perlmutter", "--work", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"exabench: error: no Slurm cluster answers (SLURM_CONF={tmp_path}/nowhere/slurm.conf): "
                          "no such file; ")
    assert err.endswith("valid: the loopback Slurm started with `bash scripts/slurm-local.sh start` and "
                        "`source /tmp/exabench-slurm/env.sh`") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "w").exists()


def test_rehearse_where_sinfo_cannot_read_the_configuration_quotes_sinfo(tmp_path, monkeypatch, capsys):
    from exabench.cli import main
    if shutil.which("sinfo") is None:
        pytest.skip("no sinfo on this machine: the missing-file case above covers the refusal")
    monkeypatch.chdir(REPO)
    conf = tmp_path / "slurm.conf"
    conf.write_text("# no ClusterName: sinfo refuses it at once\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert main(["rehearse", "--profile", "profiles/perlmutter", "--work", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"exabench: error: no Slurm cluster answers (SLURM_CONF={conf}): sinfo: ") and \
        "ClusterName" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "w").exists()


def test_bsub_takes_the_script_on_stdin_and_lists_a_batch_node_before_the_compute_node(tmp_path):
    # `bsub < job.sh` as OLCF's examples submit; LSB_DJOB_HOSTFILE names the launch node first, so a
    # script taking the compute nodes as the lines after the first finds this machine's one node.
    script = _script(tmp_path, SUMMIT_HEADER + 'echo "$LSB_JOBID $(tail -n +2 $LSB_DJOB_HOSTFILE)" > '
                     f'{tmp_path}/seen.txt\n')
    res = subprocess.run([sys.executable, "-m", "exabench.rehearsal.standins", "bsub"], stdin=script.open(),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO),
                              "EXABENCH_REHEARSAL_SITE": str(REPO / "profiles" / "summit" / "site.yaml")})
    assert res.returncode == 0 and res.stdout.strip() == "Job <1> is submitted to queue <batch-bin5>.", res.stderr
    assert (tmp_path / "seen.txt").read_text().split() == ["1", socket.gethostname()]


def test_check_rendered_names_each_script_and_launch_line_the_stand_ins_would_refuse(tmp_path):
    results = tmp_path / "results" / "summit"
    (results / "bundles").mkdir(parents=True)
    (results / "runs" / "r1").mkdir(parents=True)
    (results / "bundles" / "ok.sh").write_text("#!/usr/bin/env bash\n" + SUMMIT_HEADER + "true\n")
    (results / "bundles" / "long.sh").write_text("#!/usr/bin/env bash\n" + SUMMIT_HEADER + "#BSUB -W 03:00\ntrue\n")
    (results / "runs" / "r1" / "job.sh").write_text("#!/usr/bin/env bash\n" + SUMMIT_HEADER
                                                   + "jsrun -n1 -a1 -c44 -g1 true\n")
    checked, refused = standins.check_rendered(SITES["summit"], results)
    assert checked == 4 and len(refused) == 2, refused
    assert refused[0].startswith("bundles/long.sh: bsub: refused: 1 node(s) for 180 min in queue 'batch'")
    assert refused[1].startswith("runs/r1/job.sh: jsrun: refused: -c 44 -g 1 on a summit node of 42 usable cores")
