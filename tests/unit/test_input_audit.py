"""Inputs of the recently added features refused in one line, before anything is emptied or written:
`exabench rehearse`'s --work, --configfile and a profile outside the checkout; site files naming a
scheduler, launcher or container runtime that is not registered; scheduler_options another scheduler
reads; numbers YAML reads as text. Each error names the file or option, the key, the value and what
is valid."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exabench.campaign.site import load_site
from exabench.errors import ConfigError, ExabenchError
from exabench.rehearsal.rehearse import check_inputs, copy_profile

REPO = Path(__file__).resolve().parents[2]


# --- exabench rehearse: the --work folder it empties, the --configfile it runs ----------------------

def _checkout(tmp_path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "profiles" / "summit").mkdir(parents=True)
    (checkout / "Snakefile").write_text("")
    return checkout


@pytest.mark.parametrize("work,says", [
    (".", "holds the exabench checkout"),
    ("..", "holds the exabench checkout"),
    ("afile", "is not a folder"),
    ("mine", "a folder no rehearsal made"),
])
def test_a_work_folder_whose_removal_would_lose_files_is_refused_before_it_is_emptied(tmp_path, work, says):
    checkout = _checkout(tmp_path)
    (tmp_path / "afile").write_text("keep me")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    target = (checkout / work) if work in (".", "..") else tmp_path / work
    with pytest.raises(ExabenchError) as err:
        check_inputs("profiles/summit", target, checkout, None)
    assert str(err.value).startswith(f"--work {target.resolve()}: ") and says in str(err.value)
    assert "valid: a new folder, or one an earlier rehearsal made" in str(err.value)
    assert (tmp_path / "afile").read_text() == "keep me" and (tmp_path / "mine" / "notes.txt").exists()


def test_a_new_or_earlier_rehearsal_work_folder_is_taken(tmp_path):
    checkout = _checkout(tmp_path)
    check_inputs("profiles/summit", tmp_path / "new", checkout, None)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "Snakefile").write_text("")
    (earlier / "rehearsal.md").write_text("")
    check_inputs("profiles/summit", earlier, checkout, None)


@pytest.mark.parametrize("configfile,says", [("missing.yaml", "does not exist"), (".", "is a directory")])
def test_a_configfile_that_cannot_be_read_is_refused_before_the_rehearsal_starts(tmp_path, configfile, says):
    with pytest.raises(ConfigError) as err:
        check_inputs("profiles/summit", tmp_path / "new", _checkout(tmp_path), str(tmp_path / configfile))
    assert says in str(err.value) and str(tmp_path) in str(err.value)
    assert not (tmp_path / "new").exists()


def test_a_profile_outside_the_checkout_is_the_one_rehearsed(tmp_path):
    checkout, work = _checkout(tmp_path), tmp_path / "work"
    (work / "profiles" / "summit").mkdir(parents=True)
    (work / "profiles" / "summit" / "site.yaml").write_text("name: summit\n")   # the checkout's copy
    own = tmp_path / "edited" / "summit"
    own.mkdir(parents=True)
    (own / "site.yaml").write_text("name: summit\nnode_hours_budget: 5\n")
    copy_profile(str(own), checkout, work)
    assert "node_hours_budget: 5" in (work / "profiles" / "summit" / "site.yaml").read_text()
    copy_profile(str(checkout / "profiles" / "summit"), checkout, work)   # the checkout's own: left as copied
    assert "node_hours_budget: 5" in (work / "profiles" / "summit" / "site.yaml").read_text()


# --- site files: names a registry holds, listed when one is mistyped ---------------------------------

def _site_file(tmp_path, base: str = "perlmutter", **changes) -> Path:
    data = yaml.safe_load((REPO / "profiles" / base / "site.yaml").read_text())
    for key, value in changes.items():
        *parents, last = key.split("__")
        d = data
        for p in parents:
            d = d.setdefault(p, {})
        d[last] = value
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("key,value,listed", [
    ("scheduler", "LSF", "one of cobalt, lsf, none, pbs, slurm"),
    ("scheduler", "", "one of cobalt, lsf, none, pbs, slurm"),
    ("launcher", "SRUN", "one of ibrun, local, mpirun, srun, torchrun with scheduler slurm"),
    ("container__runtime", "Shifter", "none, apptainer, charliecloud, cscs-edf, docker, podman-hpc, pyxis, shifter, "
                                      "singularity"),
])
def test_a_mistyped_registered_name_is_refused_listing_the_registered_ones(tmp_path, key, value, listed):
    path = _site_file(tmp_path, **{key: value})
    with pytest.raises(ConfigError) as err:
        load_site(path)
    assert str(err.value) == f"{path}: key '{key.replace('__', '.')}' = {value!r} is not valid; valid: {listed}"


# --- scheduler_options: a key another scheduler reads is refused, not ignored ------------------------

@pytest.mark.parametrize("base,options,key,readers", [
    ("summit", {"pbs_select": "nodes"}, "pbs_select", "pbs"),              # LSF
    ("summit", {"queue_directive": "qos"}, "queue_directive", "slurm"),
    ("polaris", {"alloc_flags": ["nvme"]}, "alloc_flags", "lsf"),          # PBS
    ("theta", {"slot_license": "cores:2"}, "slot_license", "slurm"),       # Cobalt
    ("perlmutter", {"cobalt_attrs": "mcdram=cache"}, "cobalt_attrs", "cobalt"),
    ("local", {"extra": ["--foo"]}, "extra", "cobalt, lsf, pbs, slurm"),  # no scheduler: no header
])
def test_a_scheduler_option_the_sites_scheduler_does_not_read_is_refused(tmp_path, base, options, key, readers):
    from exabench.campaign.allocation import request
    from exabench.campaign.site import resolve_layout

    site = load_site(_site_file(tmp_path, base, scheduler_options=options))
    with pytest.raises(ConfigError) as err:
        request(site, resolve_layout(site, nodes=1))
    assert err.value.key == f"scheduler_options.{key}" and err.value.file == str(tmp_path / "site.yaml")
    assert f"is not read by scheduler {site.scheduler}; valid: unset with scheduler {site.scheduler} " \
           f"(read by: {readers})" in str(err.value)


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "profiles").iterdir() if (p / "site.yaml").is_file()))
def test_every_profiles_scheduler_options_are_read_by_its_scheduler(name):
    from exabench.campaign.allocation import request
    from exabench.campaign.site import resolve_layout

    site = load_site(REPO / "profiles" / name / "site.yaml")
    assert request(site, resolve_layout(site, nodes=1)).queue is not None


# --- numbers YAML reads as text, and the types a key takes --------------------------------------------

@pytest.mark.parametrize("text,says", [
    ("node_hours_budget: 1e9", "YAML reads '1e9' as text: write 1000000000 (or with a dot and a signed exponent: "
                               "1.0e+09)"),
    ("node_hours_budget: 1.5e3", "write 1500 "),
    ("max_nodes: 4.6e3", "valid: type integer; YAML reads '4.6e3' as text: write 4600 "),
])
def test_a_number_yaml_reads_as_text_is_refused_saying_how_to_write_it(tmp_path, text, says):
    path = _site_file(tmp_path, "summit")
    key = text.split(":")[0]
    kept = [line for line in path.read_text().splitlines() if not line.startswith(f"{key}:")]
    path.write_text("\n".join([*kept, text]) + "\n")
    with pytest.raises(ConfigError) as err:
        load_site(path)
    assert str(err.value).startswith(f"{path}: key '{text.split(':')[0]}' = '{text.split(': ')[1]}' is not valid")
    assert says in str(err.value)


def test_a_key_of_two_types_names_both_in_words():
    from exabench.config import validate

    with pytest.raises(ConfigError) as err:
        validate({"benchmarks": [{"name": "kmeans"}], "node_hours_budget": "abc"}, "config", "--config")
    assert str(err.value) == "--config: key 'node_hours_budget' = 'abc' is not valid; valid: type number or null"


@pytest.mark.parametrize("given,word", [("true", "True"), ("false", "False"), ("yes", "True")])
def test_a_boolean_given_as_text_on_the_command_line_is_refused_saying_how_to_write_it(given, word):
    # Snakemake's --config reads only True and False as booleans: `preset_sizes=true` arrives as text
    from exabench.config import validate

    with pytest.raises(ConfigError) as err:
        validate({"benchmarks": [{"name": "kmeans"}], "preset_sizes": given}, "config", "--config")
    assert str(err.value) == (f"--config: key 'preset_sizes' = '{given}' is not valid; valid: type boolean (true or "
                              f"false in a YAML file; on the command line, --config preset_sizes={word}, capitalised)")


# --- command-line options: numbers out of range or not finite, output files of the wrong kind -------

def _main(capsys, *argv) -> tuple[int, str]:
    from exabench.cli import main

    code = main(list(argv))
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("argv,says", [
    (["nodes", "--site-name", "local", "--markdown", "{tmp}/n.md", "--z", "nan", "tests/data/nodes"],
     "--z nan: not valid; valid: a robust z-score > 0, e.g. 3.5"),
    (["nodes", "--site-name", "local", "--markdown", "{tmp}/n.md", "--z", "-1", "tests/data/nodes"],
     "--z -1.0: not valid; valid: a robust z-score > 0"),
    (["history", "--store", "{tmp}/store", "regress", "--alpha", "nan"],
     "--alpha nan: not valid; valid: a significance"),
    (["history", "--store", "{tmp}/store", "regress", "--detect", "0"],
     "--detect 0.0: not valid; valid: a fraction > 0"),
    (["comm-fit", "--sweep", "{tmp}/s.csv", "--markdown", "{tmp}/c.md", "--split-bytes", "-5"],
     "--split-bytes -5: not valid; valid: a message size in bytes >= 1"),
    (["node-sweep", "--nodes", "-3", "--out", "{tmp}/ns.sh"], "--nodes -3: not valid; valid: a count of nodes >= 1"),
    (["nodes", "--site-name", "local", "--markdown", "{tmp}", "tests/data/nodes"],
     "--markdown {tmp}: is a folder; valid: a Markdown file to write"),
    (["nodes", "--site-name", "local", "--markdown", "{tmp}/afile/n.md", "tests/data/nodes"],
     "--markdown {tmp}/afile/n.md: {tmp}/afile is a file, not a folder; valid: a Markdown file to write"),
])
def test_a_bad_option_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys, monkeypatch, argv, says):
    monkeypatch.chdir(REPO)
    (tmp_path / "afile").write_text("")
    code, err = _main(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and "\n" not in err and err.startswith(f"exabench: error: {says.replace('{tmp}', str(tmp_path))}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_accept_with_a_folder_for_its_junit_writes_none_of_its_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, err = _main(capsys, "accept", "--references", "profiles/local/references.yaml", "--site-name", "local",
                      "--markdown", str(tmp_path / "v.md"), "--csv", str(tmp_path / "v.csv"),
                      "--junit", str(tmp_path), "tests/data/records/local")
    assert code == 2 and err == f"exabench: error: --junit {tmp_path}: is a folder; valid: a JUnit XML file to write"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("every_node,key,valid", [
    ({"nodes": "n[1-4]", "group": "Pairs"}, "every_node.group",
     "integer >= 1 or one of 'rack', 'pairs', 'all' or a list of (integer >= 1 or one of 'pairs', 'all') with at "
     "least one item"),
    ({"nodes": []}, "every_node.nodes", "a list of (string matching"),
])
def test_a_key_of_several_shapes_names_each_in_words(every_node, key, valid):
    from exabench.config import validate

    with pytest.raises(ConfigError) as err:
        validate({"benchmarks": [{"name": "kmeans"}], "every_node": every_node}, "config", "c.yaml")
    assert err.value.key == key and valid in str(err.value) and "value or array" not in str(err.value)


def test_a_reference_measured_nowhere_says_what_at_nodes_takes():
    from exabench.config import validate

    entry = {"benchmark": "kmeans", "metric": "time", "value": 1.0, "lower": 0.1, "upper": 0.1, "unit": "s",
             "at": {"nodes": [1, 2]}}
    with pytest.raises(ConfigError) as err:
        validate({"references": [entry]}, "references", "refs.yaml")
    assert str(err.value) == ("refs.yaml: key 'references[0].at.nodes' = [1, 2] is not valid; valid: integer >= 1 "
                              "or a range {min: N, max: M}")


def test_a_confirmation_rounds_submit_sh_without_a_scheduler_runs_pairs_alone_after_the_node_tests(tmp_path):
    # the laptop profile's round runs here: node tests side by side (their load shared with the
    # controls'), then each pair alone (a pair beside another would share the cores the control pair
    # had to itself)
    import subprocess

    from exabench.campaign.node_groups import submit_script

    site = load_site(REPO / "profiles" / "local" / "site.yaml")
    log = tmp_path / "log"
    for name in ("n1", "c1", "n1..c1", "c1..c2"):
        (tmp_path / f"{name}.sh").write_text(f"echo 'start {name}' >> {log}; sleep 0.3; echo 'end {name}' >> {log}\n")
    jobs = [(tmp_path / f"{name}.sh", "") for name in ("n1", "c1", "n1..c1", "c1..c2")]
    script = tmp_path / "submit.sh"
    script.write_text(submit_script(site, "c", jobs, tmp_path, side_by_side=True, alone={"n1..c1.sh", "c1..c2.sh"}))
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = log.read_text().splitlines()
    assert sorted(lines[:2]) == ["start c1", "start n1"] and sorted(lines[2:4]) == ["end c1", "end n1"], lines
    assert lines[4:] == ["start n1..c1", "end n1..c1", "start c1..c2", "end c1..c2"]


def _held_round(tmp_path, profile: str, submit_tool: str, listing: str, lister: str) -> list[str]:
    """A confirmation round's submit.sh sent through stand-ins: `submit_tool` numbers each job from 1 and
    prints its id as the scheduler does; `lister` prints `listing` (the user's unfinished jobs), or fails
    where `listing` is None. Returns what each submission was given, one line each."""
    import subprocess

    from exabench.campaign.node_groups import submit_script

    site = load_site(REPO / "profiles" / profile / "site.yaml")
    names = ("n1", "c1", "n1..c1", "c1..c2")
    for name in names:
        (tmp_path / f"{name}.sh").write_text("#!/bin/bash\n")
    script = tmp_path / "submit.sh"
    script.write_text(submit_script(site, "c", [(tmp_path / f"{n}.sh", "") for n in names], tmp_path,
                                    side_by_side=True, alone={"n1..c1.sh", "c1..c2.sh"}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    said = {"sbatch": 'echo "Submitted batch job $n"', "bsub": 'echo "Job <$n> is submitted to queue <batch>."'}
    (bin_dir / submit_tool).write_text(f"#!/bin/bash\nn=$(( $(cat {tmp_path}/count 2>/dev/null || echo 0) + 1 ))\n"
                                       f"echo $n > {tmp_path}/count\necho \"$*\" >> {tmp_path}/sent\n"
                                       f"{said[submit_tool]}\n")
    (bin_dir / lister).write_text("#!/bin/sh\n" + ("exit 1\n" if listing is None else f"printf '{listing}'\n"))
    for tool in (submit_tool, lister):
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "USER": "me"}
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "exabench: all 4 every-node group job(s) sent" in res.stdout
    return (tmp_path / "sent").read_text().splitlines()


def test_a_confirmation_rounds_pairs_on_slurm_are_held_until_every_job_sent_before_has_ended(tmp_path):
    # Node tests go in together (side by side); each pair is held (afterany) on the jobs sent before it
    # that squeue still lists: job 1 has ended, so its id is left out (Slurm refuses a dependency on a
    # job it has purged)
    sent = _held_round(tmp_path, "slurm-cluster", "sbatch", "2\\n3\\n4\\n", "squeue")
    assert sent == [f"{tmp_path}/n1.sh", f"{tmp_path}/c1.sh", f"--dependency=afterany:2 {tmp_path}/n1..c1.sh",
                    f"--dependency=afterany:2:3 {tmp_path}/c1..c2.sh"]


def test_a_confirmation_rounds_pairs_on_lsf_are_held_on_every_earlier_job_when_bjobs_fails(tmp_path):
    sent = _held_round(tmp_path, "summit", "bsub", None, "bjobs")
    # bsub reads the script on its standard input: only the options are its arguments
    assert sent == ["", "", "-w ended(1) && ended(2)", "-w ended(1) && ended(2) && ended(3)"]


# --- every-node submit.sh: its wait between looks at the queue ----------------------------------------

@pytest.mark.parametrize("wait,says", [("abc", "abc"), ("-5", "-5"), ("", None), ("0.5", None)])
def test_submit_sh_refuses_a_wait_that_is_not_seconds_before_sending_anything(tmp_path, wait, says):
    import subprocess

    from exabench.campaign.node_groups import submit_script

    site = load_site(REPO / "profiles" / "slurm-cluster" / "site.yaml")
    script = tmp_path / "submit.sh"
    script.write_text(submit_script(site, "c", [(tmp_path / "g1.sh", "")], tmp_path))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/sent\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "USER": "me", "EXABENCH_SUBMIT_WAIT_S": wait}
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    if says is None:   # unset (the default, 60) or a number: the job is sent
        assert res.returncode == 0 and (tmp_path / "sent").read_text().strip().endswith("g1.sh")
    else:
        assert res.returncode == 2 and not (tmp_path / "sent").exists()
        assert res.stderr.strip() == (f"exabench: EXABENCH_SUBMIT_WAIT_S={says}: not valid; valid: seconds >= 0 "
                                      "between looks at the queue, e.g. 60 (unset: 60)")


# --- files and folders a command reads: named, never a traceback, never a folder made ---------------

@pytest.mark.parametrize("argv,says", [
    (["accept-check", "--verdicts", "{tmp}/none.csv"], "--verdicts {tmp}/none.csv: does not exist; valid: the "
                                                       "verdicts CSV `exabench accept` wrote"),
    (["accept-check", "--verdicts", "{tmp}"], "--verdicts {tmp}: is a folder; valid:"),
    (["accept-check", "--verdicts", "{tmp}/other.csv"], "--verdicts {tmp}/other.csv: not a verdicts table (KeyError: "
                                                        "'run_id'); valid: the verdicts CSV `exabench accept` wrote"),
    (["accept-check", "--verdicts", "{tmp}/binary.csv"], "--verdicts {tmp}/binary.csv: not a verdicts table "
                                                         "(UnicodeDecodeError"),
    (["node-run", "--spec", "{tmp}", "--node", "n1"], "--spec {tmp}: is a folder; valid: a run's spec.json"),
    (["execute", "--spec", "{tmp}/none.json"], "--spec {tmp}/none.json: does not exist; valid: a run's spec.json"),
    (["comm-fit", "--sweep", "{tmp}/none.csv", "--markdown", "{tmp}/c.md"], "--sweep {tmp}/none.csv: does not exist"),
    (["archive", "--results", "{tmp}/other.csv", "--out", "{tmp}/a.tar.gz"], "--results {tmp}/other.csv: is not a "
                                                                             "folder; valid: a campaign's results"),
    (["archive", "--results", "{tmp}/empty", "--out", "{tmp}/a.tar.gz"], "{tmp}/empty: no records/ folder: not the "
                                                                         "results of a campaign"),
    (["retry", "--results", "{tmp}/mistyped"], "{tmp}/mistyped: no records/ folder"),
])
def test_a_file_or_folder_a_command_reads_is_named_when_it_is_not_there_or_not_one(tmp_path, capsys, argv, says):
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "empty").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    code, err = _main(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and "\n" not in err and err.startswith(f"exabench: error: {says.replace('{tmp}', str(tmp_path))}")
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not list((tmp_path / "empty").iterdir())


def test_submit_jobs_with_a_scheduler_no_executor_plugin_submits_to_is_refused(tmp_path):
    path = _site_file(tmp_path, "polaris", submit="jobs")
    with pytest.raises(ConfigError) as err:
        load_site(path)
    assert str(err.value) == (
        f"{path}: key 'submit' = 'jobs' has no executor plugin to submit each run with scheduler pbs, so every run "
        "would start on this machine; valid: bundles with scheduler pbs (batch scripts from the `bundle` target, "
        "submitted by hand); jobs is for schedulers with a plugin: lsf, slurm")


@pytest.mark.parametrize("given,schema,says", [
    ("profiles/summit/campaign.yaml", "site", "key 'benchmarks' = "),
    ("profiles/summit/site.yaml", "config", "key 'account' = 'ABC123' is not a known key (the file looks like a site "
                                            "file (--site, site=, profiles/<site>/site.yaml), not a config file)"),
])
def test_a_file_of_another_kind_is_named_as_such(given, schema, says):
    from exabench.config import load_and_validate

    with pytest.raises(ConfigError) as err:
        load_and_validate(REPO / given, schema)
    assert says in str(err.value) and "the file looks like a " in str(err.value)


# --- container.gpu_flag against the nodes' GPUs --------------------------------------------------------

@pytest.mark.parametrize("base,flag,says", [
    ("frontier", "--nv", "key 'container.gpu_flag' = '--nv' brings nvidia GPUs in, and the nodes' are amd; valid: "
                         "'--rocm' with container.runtime apptainer on amd GPUs (node.gpu.vendor)"),
    ("frontier", "", "key 'container.gpu_flag' = '' hides the node's 8 GPUs from the container; valid: '--rocm'"),
    ("perlmutter", "", "key 'container.gpu_flag' = '' hides the node's 4 GPUs from the container; valid: '--gpu' "
                       "with container.runtime podman-hpc on nvidia GPUs"),
    ("polaris", "--rocm", "key 'container.gpu_flag' = '--rocm' brings amd GPUs in, and the nodes' are nvidia; "
                          "valid: '--nv'"),
])
def test_a_gpu_flag_that_leaves_the_nodes_gpus_out_of_the_container_is_refused(tmp_path, base, flag, says):
    data = yaml.safe_load((REPO / "profiles" / base / "site.yaml").read_text())
    path = _site_file(tmp_path, base, container={**data["container"], "gpu_flag": flag})
    with pytest.raises(ConfigError) as err:
        load_site(path)
    assert str(err.value).startswith(f"{path}: {says}")


def test_rehearse_refuses_a_site_given_with_config_before_anything_is_emptied(tmp_path, capsys):
    code, err = _main(capsys, "rehearse", "--profile", str(REPO / "profiles" / "summit"), "--work", str(tmp_path),
                      "--config", "site=profiles/titan/site.yaml")
    assert code == 2 and err == ("exabench: error: --config site=profiles/titan/site.yaml: not valid here; valid: "
                                 "other keys (the site is --profile's site.yaml: give a profile folder holding your "
                                 "site file)")
