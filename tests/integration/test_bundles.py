"""Bundle mode's plan (exabench.campaign.bundles): a campaign no queue admits as one allocation is
split into bundles that each fit a queue of the site, grouped by node count, packed up to the
queue's walltime, every run in exactly one bundle; every real profile's default campaign renders
as bundle scripts bash accepts, and a split campaign runs for real on this machine."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from exabench.campaign import allocation
from exabench.campaign.bundles import IDLE_SHARE, longest_walltime, mixed_requests, over_user_limits, plan_bundles
from exabench.campaign.plan import expand
from exabench.campaign.render import bundle_path, write_bundles, write_runs_files
from exabench.campaign.site import WALLTIME_MARGIN_MIN, check_walltime, load_site, resolve_layout
from exabench.config import validate
from exabench.errors import ConfigError
from helpers_sites import PROFILES, REPO
from test_site_scale import default_plan

# The allocation each scheduler's header asks for: (nodes, walltime) as the templates write them.
HEADER = {
    "slurm": (r"#SBATCH --nodes=(\d+)\n", r"#SBATCH --time=(\d\d):(\d\d):00\n"),
    "lsf": (r"#BSUB -nnodes (\d+)\n", r"#BSUB -W (\d\d):(\d\d)\n"),
    "pbs": (r"#PBS -l (?:select|nodes)=(\d+)", r"#PBS -l walltime=(\d\d):(\d\d):00\n"),
    "cobalt": (r"#COBALT -n (\d+)\n", r"#COBALT -t ()(\d+)\n"),
}


def _bundles(name: str):
    _, config, s, runs, _ = default_plan(name)
    return config, s, runs, plan_bundles(runs, s, config["campaign"], f"profiles/{name}/campaign.yaml")


@pytest.mark.parametrize("name", PROFILES)
def test_every_profiles_campaign_as_bundles_fits_the_queues_and_holds_each_run_once(name):
    config, s, runs, bundles = _bundles(name)
    assert Counter(r.run_id for b in bundles for r in b.runs) == Counter(r.run_id for r in runs)
    for b in bundles:
        assert b.nodes == max(r.layout.nodes for r in b.runs)
        assert b.minutes == allocation.asked_minutes(s, b.nodes, [r.timeout_s for r in b.runs])  # as its header asks
        assert check_walltime(s, b.minutes, b.nodes) == b.queue  # the rule single runs follow
        assert mixed_requests(b, s) == [], (b.name, mixed_requests(b, s))  # one allocation request per bundle
    if len(bundles) == 1:
        assert bundles[0].name == config["campaign"]
        assert bundles[0].idle_node_hours <= IDLE_SHARE * bundles[0].node_hours
        return
    # Split: one node count per bundle, and per node count the fewest bundles its queues allow
    # (the campaign's runs share one time limit, so each holds as many as fit the longest walltime).
    assert all(len({r.layout.nodes for r in b.runs}) == 1 and b.idle_node_hours == 0 for b in bundles)
    per_nodes = Counter((allocation.request(s, r.layout), r.layout.nodes) for r in runs)
    run_min = math.ceil(config["timeout_s"] / 60)
    fewest = sum(
        math.ceil(n / ((longest_walltime(s, nodes) - WALLTIME_MARGIN_MIN) // run_min))
        for (_, nodes), n in per_nodes.items()
    )
    assert len(bundles) == fewest, (name, len(bundles), fewest)
    width = max(2, len(str(len(bundles))))
    assert [b.name for b in bundles] == [
        f"{config['campaign']}-{i:0{width}d}-of-{len(bundles):0{width}d}" for i in range(1, len(bundles) + 1)
    ]
    assert [b.nodes for b in bundles] == sorted(b.nodes for b in bundles)
    again = plan_bundles(list(runs), s, config["campaign"], "c.yaml")
    assert [(b.name, [r.run_id for r in b.runs]) for b in again] == [
        (b.name, [r.run_id for r in b.runs]) for b in bundles
    ]


def test_the_whole_site_campaigns_of_the_bundle_mode_sites_are_split():
    for name in ("summit", "theta", "polaris", "aurora"):
        assert len(_bundles(name)[3]) > 1, name
    # Polaris: debug's hour holds one 35-minute run; medium's 6 hours eleven 30-minute runs on 64 nodes (335 min).
    polaris = _bundles("polaris")[3]
    single = [b for b in polaris if b.nodes == 1]
    assert {b.queue for b in single} == {"debug"} and {len(b.runs) for b in single} == {1}
    wide = [(len(b.runs), b.minutes, b.queue) for b in polaris if b.nodes == 64]
    assert wide == [(11, 335, "prod"), (4, 125, "prod")]


def test_bundles_past_a_queues_per_user_limit_are_named_in_the_plan():
    # ALCF: debug-scaling takes one job per user at a time; Polaris' 4- and 8-node runs (30) only fit there.
    for name in ("polaris", "aurora"):
        _, s, _, bundles = _bundles(name)
        sent = sum(b.queue == "debug-scaling" for b in bundles)
        assert sent > 1 and over_user_limits(bundles, s) == {"debug-scaling": (sent, 1)}, name
    _, s, _, bundles = _bundles("summit")  # batch: 100 per user, shared by the bins
    assert over_user_limits(bundles, s) == {} and len(bundles) < 100
    assert over_user_limits(bundles * 3, s) == {"batch": (3 * len(bundles), 100)}
    res = subprocess.run(
        [sys.executable, "-m", "exabench", "plan", "--site", "profiles/polaris/site.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    sent = sum(b.queue == "debug-scaling" for b in _bundles("polaris")[3])
    assert f"queue debug-scaling: {sent} bundles, but one user may have only 1 there at once" in res.stdout


@pytest.mark.parametrize("name", PROFILES)
def test_every_profiles_bundle_scripts_are_valid_for_the_launcher(name, tmp_path):
    _, s, runs, bundles = _bundles(name)
    paths = write_bundles(bundles, s, tmp_path)
    assert paths == [bundle_path(tmp_path, b) for b in bundles]
    specs = Counter()
    for b, path in zip(bundles, paths):
        text = path.read_text()
        res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert res.returncode == 0, (path, res.stderr)
        assert f"{len(b.runs)} run(s) of campaign {b.name} in one allocation on site {s.name}" in text
        found = re.findall(r"-m exabench execute --spec (\S+) \|\|", text)
        assert [Path(f).parent.name for f in found] == [r.run_id for r in b.runs]
        specs.update(found)
        if s.scheduler in HEADER:
            nodes_re, time_re = HEADER[s.scheduler]
            assert int(re.search(nodes_re, text).group(1)) == b.nodes, path
            hours, minutes = re.search(time_re, text).groups()
            assert int(hours or 0) * 60 + int(minutes) == b.minutes, path
        if b.queue:
            assert re.search(rf"(--partition=|--qos=|-q ){re.escape(b.queue)}\n", text), path
    assert set(specs.values()) == {1} and len(specs) == len(runs)


def _polaris_run(nodes: int, timeout_s: int, run_id: str):
    s = load_site(REPO / "profiles/polaris/site.yaml")
    cfg = validate({"timeout_s": 600, "benchmarks": [{"name": "kmeans"}]}, "config", "c.yaml")
    (run,) = expand(cfg, s, "c.yaml")  # a run past every queue is built here, past expand's own check
    return s, dataclasses.replace(run, run_id=run_id, layout=resolve_layout(s, nodes=nodes), timeout_s=timeout_s)


def test_small_runs_go_to_small_allocations_and_a_campaign_that_fits_stays_one_bundle():
    s, one = _polaris_run(1, 1500, "a")  # 25 + 5 minutes
    _, wide = _polaris_run(12, 1500, "w")
    _, wide2 = _polaris_run(12, 1500, "w2")
    # Two 12-node runs fit one bundle (12 nodes for 55 min in small), nothing idle: it stays one, named c.
    (b,) = plan_bundles([wide, wide2], s, "c", "c.yaml")
    assert (b.name, b.nodes, b.minutes, b.queue) == ("c", 12, 55, "prod")
    assert b.node_hours == pytest.approx(12 * 55 / 60) and b.idle_node_hours == 0
    # With the 1-node run it would fit too (80 min), but leave 11 nodes idle for its 25 minutes: 4.6 of
    # 16 node-hours, past IDLE_SHARE: split by node count instead, nothing idle.
    two = plan_bundles([one, wide, wide2], s, "c", "c.yaml")
    assert [(b.nodes, len(b.runs), b.queue) for b in two] == [(1, 1, "debug"), (12, 2, "prod")]
    assert sum(b.idle_node_hours for b in two) == 0
    # Eight 25-minute runs on 12 nodes and the 1-node one fit no queue together (12 nodes: small, 3 h).
    # Split: the 1-node run alone in debug, not in a 12-node allocation; seven 12-node runs fill small's
    # 180 minutes (7 x 25 + 5), the eighth goes on in a bundle of its own.
    runs = [dataclasses.replace(wide, run_id=f"w{i}") for i in range(8)] + [one]
    bundles = plan_bundles(runs, s, "c", "c.yaml")
    assert [(b.name, b.nodes, len(b.runs), b.minutes, b.queue) for b in bundles] == [
        ("c-01-of-03", 1, 1, 30, "debug"),
        ("c-02-of-03", 12, 7, 180, "prod"),
        ("c-03-of-03", 12, 1, 30, "prod"),
    ]
    assert bundles[0].runs == (one,) and [r.run_id for r in bundles[1].runs] == [f"w{i}" for i in range(7)]
    assert sum(b.idle_node_hours for b in bundles) == 0


def test_runs_of_different_time_limits_are_packed_longest_first_into_the_queues_walltime():
    # 12 Polaris nodes: small admits 180 minutes, 175 of them for runs. First fit, longest first:
    # 100 + 60 + 15, 90 + 50, 40: three bundles, the fewest 355 minutes of runs can take.
    s, wide = _polaris_run(12, 600, "w")
    runs = [dataclasses.replace(wide, run_id=f"m{m}", timeout_s=m * 60) for m in (15, 40, 50, 60, 90, 100)]
    runs.append(dataclasses.replace(runs[0], run_id="x", timeout_s=200 * 60))  # 205 min on 12 nodes: no queue
    bundles = plan_bundles(runs[:-1], s, "c", "c.yaml")
    assert [[r.run_id for r in b.runs] for b in bundles] == [["m15", "m60", "m100"], ["m50", "m90"], ["m40"]]
    assert [b.minutes for b in bundles] == [180, 145, 45] and {b.queue for b in bundles} == {"prod"}
    with pytest.raises(ConfigError, match="run 'x' a 205-minute job on 12 node"):
        plan_bundles(runs, s, "c", "c.yaml")


def test_a_run_no_queue_admits_even_alone_stops_naming_the_config_the_run_and_the_queues():
    s, ok = _polaris_run(1, 3000, "ok")
    _, long = _polaris_run(1, 7200, "too-long")  # 125 minutes on 1 node: debug and debug-scaling stop at 60
    with pytest.raises(ConfigError) as err:
        plan_bundles([ok, ok, long], s, "c", "my.yaml")
    text = str(err.value)
    assert "my.yaml" in text and "run 'too-long' a 125-minute job on 1 node(s)" in text
    assert "debug (1-2 nodes, at most 60 min)" in text and "polaris" in text


@pytest.mark.timeout(300)
def test_a_split_campaign_runs_for_real_through_the_local_bundle_scripts(tmp_path, local_site_dict):
    # The local site with a 7-minute limit: three 1-minute runs (6-minute jobs) make bundles of 2 and 1.
    data = {
        **local_site_dict,
        "node": {**local_site_dict["node"], "cores_per_socket": 2},
        "limits": {"max_walltime_min": 7},
    }
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(data))
    s = load_site(tmp_path / "site.yaml")
    cfg = validate(
        {
            "campaign": "split",
            "preset": "tiny",
            "timeout_s": 60,
            "benchmarks": [
                {"name": "kmeans", "sweep": {"ranks_per_node": [1], "threads_per_rank": [1], "k": [2, 3, 4]}}
            ],
        },
        "config",
        "split.yaml",
    )
    runs = expand(cfg, s, "split.yaml")
    bundles = plan_bundles(runs, s, "split", "split.yaml")
    assert [(b.name, len(b.runs), b.minutes) for b in bundles] == [("split-01-of-02", 2, 7), ("split-02-of-02", 1, 6)]
    results = tmp_path / "results"
    write_runs_files(runs, s, results)
    # An earlier plan's scripts of the campaign go; another campaign's and the throughput script stay.
    (results / "bundles").mkdir()
    for old in ("split.sh", "split-01-of-03.sh", "split.throughput.sh", "other-01-of-02.sh"):
        (results / "bundles" / old).write_text("#!/bin/bash\n")
    paths = write_bundles(bundles, s, results, "split")
    assert sorted(p.name for p in (results / "bundles").iterdir()) == [
        "other-01-of-02.sh",
        "split-01-of-02.sh",
        "split-02-of-02.sh",
        "split.throughput.sh",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))  # this checkout's package
    for path in paths:
        proc = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=240, env=env)
        assert proc.returncode == 0 and "0 run(s) failed" in proc.stdout, proc.stdout + proc.stderr
    for r in runs:
        rec = json.loads((results / "records" / f"{r.run_id}.json").read_text())
        assert rec["status"] == "ok", rec.get("error")


def test_exabench_plan_shows_the_bundles_with_their_node_hours_and_the_total():
    res = subprocess.run(
        [sys.executable, "-m", "exabench", "plan", "--site", "profiles/summit/site.yaml", "--bundle"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    _, _, runs, bundles = _bundles("summit")
    header = res.stdout.splitlines()[0].split()
    assert header[:5] == ["bundle", "nodes", "walltime_min", "queue", "runs"] and "node-hours" in header
    for b in bundles:
        assert re.search(
            rf"^{re.escape(b.name)} +{b.nodes} +{b.minutes} +{b.queue} +{len(b.runs)} +\S+ +"
            rf"{b.node_hours:.2f}".rstrip("0"),
            res.stdout,
            re.M,
        ), b.name
        assert f"\n{b.name}:\n  " + "\n  ".join(r.run_id for r in b.runs) in res.stdout
    total, work = sum(b.node_hours for b in bundles), sum(b.working_node_hours for b in bundles)
    assert (f"{len(bundles)} bundles of {len(runs)} runs on site summit: {total:,.1f} node-hours requested, "
            f"{work:,.1f} working, 0.0 idle (0.0%)") in res.stdout


BUNDLE_SITES = [name for name in PROFILES if load_site(REPO / "profiles" / name / "site.yaml").submit == "bundles"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", BUNDLE_SITES)
def test_the_documented_bundle_command_runs_for_real_on_every_bundle_site(name, tmp_path):
    # `snakemake --profile profiles/<site> bundle` as site.yaml and the README give it, executed (not
    # -n): its render job runs in a Snakemake process of its own, whose command line is Snakemake's,
    # not the user's; taken for a plain run it stopped there and left its output missing. The
    # profiles run it in threads of the user's own process (force-use-threads); Summit runs it a
    # second time through a copy of its profile without that line: the render job in a process of its own.
    from helpers_compare import copy_workflow, env

    work = copy_workflow(tmp_path / "w")
    spawned = work / "profiles" / f"{name}-spawned"
    shutil.copytree(work / "profiles" / name, spawned)
    conf = spawned / "config.yaml"
    conf.write_text(conf.read_text().replace("force-use-threads: true\n", ""))
    assert "force-use-threads" in (work / "profiles" / name / "config.yaml").read_text()
    assert "force-use-threads" not in conf.read_text()
    modes = [[], ["--profile", f"profiles/{name}-spawned"]] if name == "summit" else [[]]
    for extra in modes:
        shutil.rmtree(work / "results", ignore_errors=True)
        # The site's default campaign is over its node-hour budget (exabench.campaign.budget): raised for
        # the test with --config, which must keep the profile's site= in the render job's own process.
        cmd = [sys.executable, "-m", "snakemake", *(extra or ["--profile", f"profiles/{name}"]), "bundle",
               "--config", "node_hours_budget=0"]
        res = subprocess.run(cmd, cwd=work, env=env(), capture_output=True, text=True, timeout=500)
        out = res.stdout + res.stderr
        assert res.returncode == 0 and "MissingOutputException" not in out, (extra, out[-3000:])
        _, _, _, bundles = _bundles(name)
        written = sorted((work / "results" / name / "bundles").glob("*.sh"))
        assert [p.name for p in written] == sorted(bundle_path(Path("."), b).name for b in bundles), extra
        assert all(subprocess.run(["bash", "-n", str(p)]).returncode == 0 for p in written)
    # every_node_script, the other command the site files give, executed too: the every-node job(s) of
    # the site's default campaign, one launch across every node per run (node worlds).
    res = subprocess.run([sys.executable, "-m", "snakemake", "--profile", f"profiles/{name}", "every_node_script",
                          "--config", "node_hours_budget=0"], cwd=work, env=env(), capture_output=True, text=True,
                         timeout=500)
    assert res.returncode == 0 and "MissingOutputException" not in res.stdout + res.stderr, res.stderr[-3000:]
    jobs = sorted((work / "results" / name / "nodes").glob("every-node*.sh"))
    assert jobs and all(subprocess.run(["bash", "-n", str(p)]).returncode == 0 for p in jobs)
    assert all("--node-world" in p.read_text() for p in jobs if "-of-" in p.name or len(jobs) == 1)
    # Every bundle script's directives and every run's launch line, as the rehearsal's stand-ins check
    # them at submission and launch (the centre's documented rules, exabench/rehearsal/rules/).
    from exabench.rehearsal.standins import check_rendered
    checked, refused = check_rendered(load_site(work / "profiles" / name / "site.yaml"), work / "results" / name)
    assert refused == [] and checked > len(written), (checked, refused[:3])
    # Then the plain command, as the user types it: it lists the pending bundles with the command that
    # submits each (the bundles now rendered), naming the user's own profile, and stops with exit 0.
    res = subprocess.run([sys.executable, "-m", "snakemake", "--profile", f"profiles/{name}", "--config",
                          "node_hours_budget=0"], cwd=work, env=env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "(not rendered yet)" not in res.stderr and f"--profile profiles/{name}" in res.stderr, res.stderr[-3000:]
