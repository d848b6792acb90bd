"""Every command README.md and docs/*.md show is run for real by a test, and tests/docs_commands.yaml
says which (a command with no entry is a finding of this file, named with its doc, line and text).

How an entry is held to its test, so that the list cannot pass by naming tests that do something else:
- The named test (or fixture) must exist, as a module-level function of the named file.
- A test of this file runs a documented command through `run_documented` (tests/helpers_docs.py), which
  at run time looks the command up in the registry and fails unless the registry names the calling
  function as its test, and unless every argument the test adds is explained (`why`) and none of them
  plans instead of running (-n, --dry-run). Here, statically: the test calls `run_documented` and holds
  the command's registered form as a string; and a test without parameters ends by checking that it ran
  every command the registry names it for.
- An older test that builds its own command line (a session's Slurm, the rehearsal, the bundle sites)
  is held to its source: the program and every argument of the registered form appear in the test's
  source (or in the module-level helpers and constants the entry lists under `via`), and no command
  line in that source carries a dry-run option the documented form does not have (unless the entry
  says, under `dry_too`, why the test plans again after its real run).
- Where the test runs a smaller form (a tiny config, a two-run campaign, a placeholder filled in), the
  entry gives that form (`runs`) and says why; `not_run` (the suite itself, a centre-only study) says
  why no test can, and is listed with the rest."""

from __future__ import annotations

import ast
import functools
import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from helpers_compare import TINY_CONFIG, copy_workflow
from helpers_docs import DRY, REGISTRY, REPO, documented_commands, not_run_by, registry, run_documented

COMMANDS = documented_commands()
PROGRAMS = ("python -m", "snakemake", "exabench", "python", "make", "bash")
OPTIONAL = re.compile(r"\s*\[[^\]]*\]")


def test_the_docs_show_commands():
    assert len(COMMANDS) > 60 and any(c.command.startswith("snakemake") for c in COMMANDS)
    assert {c.doc for c in COMMANDS} >= {"README.md", "docs/history.md", "docs/clusters.md", "docs/perf.md"}


def test_every_documented_command_names_the_test_that_runs_it():
    by_command = {e["command"]: e for e in registry()}
    missing = [f"{c.doc}:{c.line}: {c.command}" for c in COMMANDS if c.command not in by_command]
    runner = {cmd: e.get("test") or f"NOT RUN: {e['not_run']}" for cmd, e in by_command.items()}
    listing = [f"{c.doc}:{c.line}: {c.command}\n    -> {runner[c.command]}" for c in COMMANDS if c.command in runner]
    print("\n".join(listing))
    assert not missing, f"documented commands no test runs (add each to {REGISTRY.name}):\n" + "\n".join(missing)


def test_every_registry_entry_is_documented_says_why_and_runs_no_dry_run():
    documented = {c.command for c in COMMANDS}
    problems = []
    for e in registry():
        cmd, runs = e["command"], e.get("runs", e["command"])
        if cmd not in documented:
            problems.append(f"{cmd}: documented nowhere (a stale entry)")
        if ("test" in e) == ("not_run" in e):
            problems.append(f"{cmd}: needs a test or a not_run reason, not both")
        fills_only = re.search(r"<[a-z-]+>|\[", cmd) and OPTIONAL.sub("", cmd).split()[:2] == runs.split()[:2]
        if runs != cmd and not fills_only and not e.get("why"):
            problems.append(f"{cmd}: runs `{runs}` instead; say why")
        if DRY & set(shlex.split(runs)) - set(shlex.split(cmd)):
            problems.append(f"{cmd}: runs `{runs}`, a dry run of a command documented without one")
    assert not problems, "\n".join(problems)
    assert sum("not_run" in e for e in registry()) <= 5  # the short list of what no test can run here


@functools.cache
def _module(path: str) -> tuple[str, dict]:
    text = (REPO / path).read_text()
    tree = ast.parse(text)
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
    return text, names


def _source(ref: str) -> tuple[str, ast.AST] | None:
    path, name = ref.split("::")
    if not (REPO / path).is_file():
        return None
    text, names = _module(path)
    node = names.get(name)
    if node is None:
        return None
    decorators = "".join(ast.get_source_segment(text, d) + "\n" for d in getattr(node, "decorator_list", []))
    return decorators + ast.get_source_segment(text, node), node


def _strings(tree: ast.AST) -> set[str]:
    return {n.value.strip("/= ") for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _dry_command_lines(tree: ast.AST) -> list[list[str]]:
    """String lists in the source that hold a dry-run option and are not `bash -n` (a syntax check)."""
    out = []
    for n in ast.walk(tree):
        items = n.elts if isinstance(n, (ast.List, ast.Tuple)) else n.args if isinstance(n, ast.Call) else []
        words = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        if DRY & set(words) and words[:1] != ["bash"]:
            out.append(words)
    return out


def _found(token: str, text: str, strings: set[str]) -> bool:
    """The argument is in the source as written, or (a path or key=value built from parts, such as
    REPO / "profiles" / name) each of its parts is a string there; a placeholder part is the test's to fill."""
    if re.sub(r"<[a-z-]+>", "", token) in text and "<" not in token:
        return True
    parts = [p for p in re.split(r"[/=]", token) if p and not re.fullmatch(r"<[a-z-]+>(\.\w+)?", p)]
    return all(p in strings or p.strip(".") in text for p in parts)


def _program_and_arguments(runs: str) -> tuple[str, list[str]]:
    words = shlex.split(runs)
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # REPEAT=1 bash ...: the environment, then the program
        words = words[1:] + [words[0]]
    program = next(p for p in PROGRAMS if " ".join(words).startswith(p))
    return program, words[len(program.split()):]


@pytest.mark.parametrize("entry", [e for e in registry() if "test" in e], ids=lambda e: e["command"][:80])
def test_the_named_test_runs_the_command_for_real(entry):
    runs = entry.get("runs", entry["command"])
    found = _source(entry["test"])
    assert found, f"{entry['command']}: {entry['test']} does not exist"
    text, node = found
    trees = [node]
    for ref in entry.get("via", []):
        extra = _source(ref)
        assert extra, f"{entry['command']}: via {ref} does not exist"
        text += "\n" + extra[0]
        trees.append(extra[1])
    strings = set().union(*(_strings(t) for t in trees))
    calls = {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    if "run_documented" in calls:
        assert runs in strings or runs.strip("/= ") in strings, \
            f"{entry['test']} calls run_documented but does not hold `{runs}`"
        return
    program, arguments = _program_and_arguments(runs)
    assert program.split()[-1].lower() in text.lower(), f"{entry['test']} starts no {program}"
    absent = [a for a in arguments if not _found(a, text, strings)]
    assert not absent, f"{entry['test']}: `{runs}`: its source has no {absent}"
    documented_dry = DRY & set(shlex.split(entry["command"]))
    dry = [w for w in _dry_command_lines(node) if not DRY & set(w) <= documented_dry]
    # A test that runs the command and then plans it again (to read why a rule would rerun) says so.
    assert not dry or entry.get("dry_too"), f"{entry['test']} runs {dry}: a dry run of `{entry['command']}`"


# -- the commands no older test ran for real --------------------------------------------------------------

def _ok(res, command: str, codes=(0,)) -> str:
    out = res.stdout + res.stderr
    assert res.returncode in codes, f"`{command}` exited {res.returncode}:\n{out[-3000:]}"
    return out


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_documented_local_campaign_and_results_commands_run_for_real(tmp_path):
    """In a scratch copy of the workflow, in the order a user meets them: the campaign (the tiny K-Means
    config as my.yaml), a rerun, report, acceptance, archive, the history's queries and the performance
    model's commands on the records it left."""
    d = copy_workflow(tmp_path / "w")
    (d / "my.yaml").write_text(TINY_CONFIG)
    shutil.copytree(REPO / "results" / "reference", d / "results" / "reference")  # a clone has it
    shutil.copytree(REPO / "tests" / "data" / "records" / "local", d / "tests" / "data" / "records" / "local")
    tiny = ("--configfile", "my.yaml")

    def run(command, *extra, codes=(0,), fill=None):
        return _ok(run_documented(command, *extra, cwd=d, fill=fill), command, codes)

    run("exabench run --profile profiles/local -n")
    run("snakemake --profile profiles/local", *tiny)
    assert len(list((d / "results/local/records").glob("*.json"))) == 2
    run("exabench run --profile profiles/local --configfile my.yaml")  # every record there: nothing to do
    run("snakemake --profile profiles/local --forcerun run_benchmark", *tiny)
    run("snakemake --profile profiles/local --report results/local/report.html", *tiny)
    assert (d / "results/local/report.html").stat().st_size > 0
    run("snakemake --profile profiles/local acceptance", *tiny)
    run("snakemake --profile profiles/local archive", *tiny)
    assert "REPRODUCED" in run("exabench reproduce results/archives/local.tar.gz")
    run("exabench compare --out compare --plan results/local/plan.json --site-name local results/local/records")
    assert any((d / "compare").iterdir())

    assert "2 campaign(s)" in run("exabench history")
    run("exabench history compare latest~1 latest")
    run("exabench history regress")
    # Energy as any metric: compared where the records measured it, else refused naming the metrics there are.
    measured = any("energy" in json.loads(p.read_text())["metrics"] for p in (d / "results/local/records").glob("*.json"))
    out = run("exabench history regress --metric energy", codes=(0,) if measured else (2,))
    assert measured or "--metric energy: no stored record" in out, out
    run("exabench history --select site:local,since:2025-06-01 --csv campaigns.csv")
    assert (d / "campaigns.csv").is_file()
    from exabench.analysis import history
    stored = history.campaigns(d / "results" / "history.duckdb")
    commit = stored["git_commit"].iloc[-1][:8]  # a prefix, as a user would type it
    run("exabench history compare commit:<old> commit:<new> --aggregate count,median,mean,p5,p95,std --markdown cmp.md",
        fill={"<old>": commit, "<new>": commit})
    assert (d / "cmp.md").is_file()
    # --strict: exit 1 when a series regressed (timings of one machine under load may differ by chance)
    for command in ("exabench history regress --current campaign:<id> --last 5 --correction holm --csv regress.csv "
                    "--strict", "exabench history regress --current latest --last 5 --detect 0.05 --csv regress.csv "
                    "--strict"):
        out = run(command, codes=(0, 1), fill={"<id>": stored["campaign_id"].iloc[-1]})
        assert (d / "regress.csv").is_file() and ("regressed" in out) >= ("1 regressed" in out)

    shutil.copy(d / "results/archives/local.tar.gz", d / "results/archives/old.tar.gz")
    for command in ("exabench ingest results/local", "exabench ingest results",
                    "exabench ingest results/archives/local.tar.gz",
                    "exabench ingest results/local results/archives/old.tar.gz"):
        assert "nothing new" in run(command)
    assert "16 records in 1 campaign(s)" in run("exabench ingest --store other/history.duckdb tests/data/records/local")
    run("exabench references --from-history --site-name local --merge profiles/local/references.yaml "
        "--out profiles/local/references.yaml")
    run("exabench references --from-history --site-name local --last 5 --band 10,90 --select since:2025-06-01 "
        "--out refs.yaml")
    run("python -m exabench.analysis.kernels results/local/records/*.json")

    # The performance model: a site's communication parameters from its site file, then fits of the
    # campaign's table and of a sweep (n ranks, bytes, time: the alpha-beta line of a 2-rank ring, 2 us, 1 GB/s).
    run("snakemake --profile profiles/local perf_site_comm --config site=profiles/summit/site.yaml")
    assert (d / "results/summit/perf/comm_params.md").is_file()
    (d / "sweep.csv").write_text("n,nodes,ranks_per_node,bytes,time_s\n" + "".join(
        f"2,1,2,{b},{2e-6 + b / 1e9:.9f}\n" for b in (8, 64, 512, 4096, 32768, 262144)))
    run("exabench model-fit --table results/local/tables/results.csv --out-dir out")
    run("exabench comm-fit --sweep sweep.csv --markdown fit.md --split-bytes 65536")
    run("exabench model-validate --csv v.csv --markdown v.md")
    run("exabench model-project --csv p.csv --markdown p.md --plot p.png")
    run("exabench model-local-check --table results/local/tables/results.csv --sweep sweep.csv --csv l.csv "
        "--markdown l.md --site profiles/local/site.yaml --records results/local/records/*.json")
    for written in ("fit.md", "v.md", "p.png", "l.md"):
        assert (d / written).stat().st_size > 0, written
    assert not_run_by(f"{Path(__file__).resolve().relative_to(REPO)}::{sys._getframe().f_code.co_name}") == []


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory):
    d = copy_workflow(tmp_path_factory.mktemp("docs"))
    shutil.copytree(REPO / "containers", d / "containers")
    return d


@pytest.mark.integration
@pytest.mark.parametrize("command, fill, says", [
    ("exabench plan", {}, "runs on site local"),
    ("exabench launch-lines", {}, "mpirun -np"),
    ("exabench list -v", {}, "kmeans"),
    ("exabench plan --site profiles/summit/site.yaml", {}, "runs on site summit"),
    ("exabench launch-lines --site profiles/<site>/site.yaml", {"<site>": "frontier"}, "srun"),
    ("exabench plan --site profiles/<name>/site.yaml", {"<name>": "polaris"}, "runs on site polaris"),
    ("exabench launch-lines --site profiles/<name>/site.yaml", {"<name>": "aurora"}, "mpiexec"),
    ("exabench launch-lines --site profiles/<name>/site.yaml --script", {"<name>": "theta"}, "#COBALT"),
    ("exabench launch-lines --site profiles/<name>/site.yaml --config config/<campaign>.yaml",
     {"<name>": "titan", "<campaign>": "analytics"}, "aprun"),
    # the real sites' default campaigns are over their node-hour budgets, which stops the plan (the doc says so)
    ("snakemake --profile profiles/<name> -n", {"<name>": "slurm-local"}, "This was a dry-run"),
    # at a bundle site the study renders its bundles and its table of pending runs here as at the centre
    ("snakemake --profile profiles/summitdev study --config site=profiles/summitdev/site.yaml "
     "study=coral2-bdas-perf-model", {}, "results/summitdev/tables/study-coral2-bdas-perf-model.csv"),
    ("python -c \"from exabench.analysis import seed_inventory as s; from exabench.campaign import studies; "
     "print(s.counts(s.load_inventory(), studies.load_catalogue()))\"", {}, "'judged': "),
], ids=lambda v: v if isinstance(v, str) and not v.startswith(("runs", "'")) else None)
def test_a_documented_command_that_runs_no_benchmark_runs(workflow_copy, command, fill, says):
    """Commands that plan, print or render (nothing is launched): in a scratch copy of the workflow."""
    out = _ok(run_documented(command, fill=fill, cwd=workflow_copy, timeout=240), command)
    assert says in out, out[-3000:]


@pytest.mark.integration
@pytest.mark.parametrize("command", [
    "python bench/resnet_overhead.py --rounds 1 --steps 2 --warmup 1 --image-size 32 --batch 2",
    "python bench/analytics_vs_sklearn.py --rows 1000 --repeats 1 --rounds 1 --only kmeans",
])
def test_the_documented_measurements_run_with_fewer_rounds(command):
    out = _ok(run_documented(command, timeout=400), command)
    assert re.search(r"\d", out), out


@pytest.mark.integration
@pytest.mark.parametrize("command, target, then", [
    ("snakemake --profile profiles/local --configfile config/analytics.yaml", "kmeans.iris.tiny.float64.n1r2t1", None),
    ("snakemake --profile profiles/local --configfile config/micro.yaml", "gemm.tiny.fp32.n1r1t2",
     "python -m exabench.analysis.kernels results/local/records/*.json --out results/local/tables/micro.md"),
])
def test_a_documented_suite_campaign_runs_its_first_run(command, target, then, tmp_path):
    d = copy_workflow(tmp_path / "w")
    _ok(run_documented(command, "--cores", "2", f"results/local/records/{target}.json", cwd=d, timeout=400), command)
    record = json.loads((d / "results/local/records" / f"{target}.json").read_text())
    assert record["status"] == "ok", record.get("error")
    if then:  # what the suite's page shows next, on the record just made
        _ok(run_documented(then, cwd=d, timeout=120), then)
        assert "## gemm TFLOP/s by precision" in (d / "results/local/tables/micro.md").read_text()


@pytest.mark.integration
def test_the_documented_flakiness_check_runs_and_counts_its_runs(tmp_path):
    command = "REPEAT=1 REPEAT_TESTS=tests/unit/test_suite_clock.py bash scripts/test_repeat.sh"
    env = {"VENV": str(Path(sys.executable).parents[1]), "REPEAT_DIR": str(tmp_path)}
    out = _ok(run_documented(command, env=env, timeout=300), command)
    assert "test-repeat: 1 of 1 runs passed (1 test files" in out, out
    assert (tmp_path / "run-1.log").is_file()
    assert not_run_by(f"{Path(__file__).resolve().relative_to(REPO)}::{sys._getframe().f_code.co_name}") == []
