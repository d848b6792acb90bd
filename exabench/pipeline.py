"""The one module the Snakemake rule files import: what each rule calls, so that a rule stays
one line, plus the per-job resources for the cluster executor plugins and the lines a user
sees while a campaign runs and when it ends.

Every function here calls package functions directly (never the command line with an argv
list); each rule's output goes to the rule's log, and an error fails the rule naming the log.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
from pathlib import Path

from exabench.analysis import acceptance, archive, compare, plots
from exabench.analysis import studies as study_tables
from exabench.containers import STACKS as CONTAINER_STACKS  # noqa: F401 - the rule files' names
from exabench.containers import build_image, build_oci_image, build_podman_hpc_store, build_sqsh_image  # noqa: F401
from exabench.containers import image_dir, needed_images  # noqa: F401
from exabench.campaign import allocation, schedulers, studies
from exabench.campaign.node_groups import check_groups, group_files, group_outputs, node_groups  # noqa: F401
from exabench.campaign.node_sweep import node_sweep_files, node_sweep_paths, sweep_jobs, sweep_nodes
from exabench.campaign.bundles import over_user_limits, pending_report, plan_bundles  # noqa: F401 - the rule files' names
from exabench.campaign.budget import check_budget  # noqa: F401 - the rule files' name
from exabench.records import rerun_marker  # noqa: F401 - the rule files' name
from exabench.campaign.plan import RUN_ID_PATTERN, Run, plan_table  # noqa: F401
from exabench.campaign.plan import expand as plan_runs
from exabench.campaign.render import bundle_path, write_bundle, write_bundles, write_runs_files
from exabench.campaign.site import Layout, Site, check_walltime, load_site  # noqa: F401
from exabench.config import load_yaml, validate  # noqa: F401
from exabench.errors import ConfigError, ExabenchError
from exabench.execute import ResultsClaim, request_stop
from exabench.io import atomic_write_many, atomic_write_text, logged, read_own_file
from exabench.perf.loglinear import write_report as write_loglinear  # noqa: F401
from exabench.perf.comm_fit import write_comm_fit  # noqa: F401
from exabench.perf.local_report import write_local_check  # noqa: F401
from exabench.perf import projection
from exabench.perf.site_comm import write_site_comm  # noqa: F401
from exabench.perf.sweep import allreduce_records, site_sweep, write_sweep  # noqa: F401
from exabench.perf.validation import write_validation  # noqa: F401
from exabench.records.progress import RUN_IDS_NAME, progress_counts
from exabench.records.store import StoreBusyError, ingest, store_errors
from exabench.records.tidy import aggregate


def stop(message: str) -> None:
    """End the pipeline while the rule files are read, with the message alone: a WorkflowError
    raised there is printed with the rule file's name, line and a frame of its traceback, which
    say nothing to a user whose config is wrong."""
    print(f"exabench: {message}", file=sys.stderr)
    raise SystemExit(1)


def config_file_of(cli_files, all_files) -> str:
    """The config file errors name: the last one given with --configfile (its keys override the
    Snakefile's default config/config.yaml, which Snakemake lists last), else that default."""
    given = [str(f) for f in cli_files or []] or [str(f) for f in all_files or []]
    return given[-1] if given else "config/config.yaml"


def check_config_files(files) -> None:
    """Read each config file again with exabench's loader: Snakemake's keeps the last of two equal
    keys silently (a second `benchmarks:` would drop the first)."""
    for path in files:
        load_yaml(path)


# What a shell reads as plain text: Snakemake writes the working directory, the Snakefile's folder,
# the config files and every --config item onto the command line of each job it spawns (a `run:`
# job is a new snakemake process started through a shell), quoting a --config item with Python's
# repr(), which a shell does not read back verbatim: "x'$(cmd)'" comes out double-quoted, and the
# shell runs cmd.
SHELL_PLAIN = re.compile(r"[A-Za-z0-9_./+@%:,=~-]+")
SHELL_OPEN = re.compile(r"['\\$`\x00-\x1f\x7f]")  # what repr() quoting cannot carry through a shell


def check_job_command_line(config_args, config_files, workdir, basedir) -> None:
    """Refuse what would reach a shell through Snakemake's own job command line: a path (working
    directory, workflow directory, config file) that would need quoting, or a --config item with a
    quote, backslash, `$`, backtick or control character. Every value is then validated by the schema."""
    for what, path in (("working directory", workdir), ("workflow directory", basedir),
                       *(("config file", f) for f in config_files or [])):
        if not SHELL_PLAIN.fullmatch(str(path)):
            raise ExabenchError(
                f"the {what} {str(path)!r} needs shell quoting: Snakemake writes it onto the command line of "
                "every job it starts, where a shell would read what it contains. Use a path of letters, digits "
                "and ._/+-@%:,=~ only (move or rename it)")
    for item in config_args or []:
        key, _, value = str(item).partition("=")
        if SHELL_OPEN.search(str(item)):
            raise ConfigError("--config", key, value, "text without quotes, backslashes, $, backticks or control "
                              "characters (Snakemake passes --config items on to its jobs through a shell)",
                              "cannot be passed on")


def validate_config(config: dict, config_file: str, given: dict) -> dict:
    """Validate the merged config; an error in a key given with --config names --config, not the file."""
    try:
        return validate(config, "config", config_file)
    except ConfigError as exc:
        top = re.split(r"[.\[]", exc.key, maxsplit=1)[0]
        if top in (given or {}) and exc.file == config_file:
            raise ConfigError("--config", exc.key, exc.value, exc.valid, exc.problem) from None
        raise


def _say(log, text: str, echo: bool = False) -> None:
    log.write(text + "\n")
    if echo:
        print(text, flush=True)


# --- plan and render ---------------------------------------------------------------------------

def expand_plan(config: dict, site: Site, config_file: str = "config/config.yaml") -> list[Run]:
    """The campaign's runs: the config's benchmarks or, with `study` set (docs/studies.md), the named
    studies' campaigns for the site, each shared run once. (Named so that Snakemake's own `expand`
    stays usable.)"""
    if config.get("study"):
        plans = study_plans(config, site, config_file)
        return studies.merged_runs({name: runs for name, (_, _, runs) in plans.items()},
                                   f"study-{config['study']}" if "," not in config["study"] else "studies")
    return plan_runs(config, site, config_file)


def campaign_runs(config: dict, site: Site, config_file: str, job_step: bool = False) -> dict[str, Run]:
    """The campaign's runs by id, expanded from the config (expand_plan); in a job step (what an
    executor plugin starts on a compute node for one job: `snakemake --mode remote`), the plan the
    campaign's start saved for its config and site (save_plan), not expanded again: a job step runs
    one run, and a Frontier-wide plan (190,000 runs) takes half a minute to expand."""
    if job_step:
        saved = _saved_plan(config, site)
        if saved is not None:
            return saved
    return {run.run_id: run for run in expand_plan(config, site, config_file)}


def _plan_file(site: Site) -> Path:
    # In the working directory's .snakemake/, which the job steps see as the campaign does (the
    # executor plugins require a shared file system for it). JSON, never a pickle: in a
    # group-shared project space another user could plant a file there, and unpickling runs code.
    return Path(".snakemake") / "exabench" / f"plan-{site.name}.json"


def _plan_key(config: dict, site: Site) -> str:
    # The plan is made from the (validated) config and the site file by this package's code.
    site_text = Path(site.path).read_bytes() if site.path and Path(site.path).is_file() else b""
    code = Path(__file__).resolve().parent
    return digest([config, hashlib.sha256(site_text).hexdigest(), str(code), _code_stamp(code)])


def _code_stamp(package: Path) -> list:
    # The campaign stage's modules and the benchmarks' (their facts and presets), by size and time.
    return sorted((str(p.relative_to(package)), p.stat().st_size, p.stat().st_mtime_ns)
                  for folder in ("campaign", "benchmarks") for p in (package / folder).rglob("*.py"))


def save_plan(runs: dict[str, Run], config: dict, site: Site) -> None:
    """`onstart`: the plan, for the campaign's job steps (campaign_runs): its key and its runs'
    dicts, in a file only this user can write (read_own_file refuses any other)."""
    plan = {"key": _plan_key(config, site), "runs": [run.to_dict() for run in runs.values()]}
    atomic_write_text(_plan_file(site), json.dumps(plan, separators=(",", ":")), mode=0o600)


def _saved_plan(config: dict, site: Site) -> dict[str, Run] | None:
    """The plan save_plan saved for this config and site; None when there is none, or it was saved
    for another config, site file or package version, or is damaged (then the job step expands the
    plan). A file another user owns or can write is refused (ExabenchError naming it)."""
    path = _plan_file(site)
    try:
        plan = json.loads(read_own_file(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # ValueError: not JSON (json's errors are ValueErrors)
        print(f"exabench: {path}: not a saved plan ({exc}); expanding the plan again", file=sys.stderr)
        return None
    if not isinstance(plan, dict) or plan.get("key") != _plan_key(config, site):
        return None
    try:
        return {run.run_id: run for run in map(Run.from_dict, plan["runs"])}
    except (KeyError, TypeError, AttributeError) as exc:
        print(f"exabench: {path}: not a saved plan (a run without {exc}); expanding the plan again",
              file=sys.stderr)
        return None


def study_plans(config: dict, site: Site, config_file: str = "config/config.yaml") -> dict:
    """{study name: (Study, variant, runs)} of the studies `config["study"]` names; {} when none."""
    if not config.get("study"):
        return {}
    key = (config["study"], site.path, config_file)
    if key not in _STUDY_PLANS:  # expand_plan and the study rules ask for the same plans
        # The catalogue beside the Snakefile (the working directory), like config/ and profiles/.
        catalogue = studies.load_catalogue(Path("studies") if Path("studies").is_dir() else studies.CATALOGUE)
        chosen = studies.select(catalogue, config["study"], f"{config_file} or --config", site.name)
        plans = studies.plan_studies(chosen, config, site)
        _STUDY_PLANS[key] = {s.name: (s, studies.variant_of(s, site.name), plans[s.name]) for s in chosen}
    return _STUDY_PLANS[key]


_STUDY_PLANS: dict = {}


def user_command_line(workflow) -> list[str] | None:
    """The command line the user typed (Snakemake's arguments), read in the one process that has it:
    the Snakemake the user started. A job's own Snakemake process (a `run:` job in a subprocess, an
    executor's job step on a node) is started with Snakemake's arguments for that job, with no
    targets and no profile: None there, and every decision below then leaves the job alone (the
    render job of `snakemake --profile profiles/summit bundle` took its own command line for a plain
    run, stopped, and left its output missing)."""
    return sys.argv[1:] if workflow.is_main_process else None


def _profile_of(argv: list[str] | None) -> str | None:
    """The profile folder a Snakemake command line names (`--profile=DIR` or `--profile DIR`), or None."""
    argv = argv or []
    profile = next((a.split("=", 1)[1] for a in argv if a.startswith("--profile=")), None)
    if profile is None and "--profile" in argv[:-1]:
        profile = argv[argv.index("--profile") + 1]
    return profile


def _targets_of(argv: list[str]) -> list[str] | None:
    """The targets a Snakemake command line names, read with Snakemake's own parser (the rule files
    are read before Snakemake hands them to the workflow); None when it is not Snakemake's command
    line (the API, a test)."""
    from snakemake.cli import get_argument_parser
    try:
        return list(get_argument_parser().parse_args(argv).targets or [])
    except (SystemExit, Exception):
        return None


def keep_profile_config(workflow, config: dict, argv: list[str] | None) -> list[str]:
    """Snakemake's --config on the command line replaces a profile's whole `config:` list, its
    `site=` with it: `--profile profiles/summit --config node_hours_budget=100000` would plan the
    default site, on this machine. The profile's entries the command line does not name are kept
    under it, here and in every job this run starts (their --config is Snakemake's config_args).
    Returns the entries kept. `argv`: user_command_line() (None in a job's process, which gets
    them on its command line)."""
    profile = _profile_of(argv)
    if not profile or not (Path(profile) / "config.yaml").is_file():
        return []
    from snakemake.cli import parse_config
    entries = [str(e) for e in (load_yaml(Path(profile) / "config.yaml") or {}).get("config") or []]
    settings = workflow.config_settings
    given = list(settings.config_args or [])
    named = {str(e).split("=", 1)[0] for e in given}
    kept = [e for e in entries if e.split("=", 1)[0] not in named and e not in given]
    if not kept:
        return []  # no --config typed: Snakemake used the profile's list as it is
    # (a `--config` with no entries, `--config $EXTRA` with EXTRA empty, also replaced the whole list)
    config.update(parse_config(kept))
    settings.config_args = [*kept, *given]
    return kept


def study_horovod_missing(plans: dict, site: Site) -> str:
    """The line to stop with when the studies' runs need a Horovod this Python lacks ("" otherwise)."""
    return studies.horovod_missing_message({name: runs for name, (_, _, runs) in plans.items()}, site.name)


def study_records(results: str, plans: dict, study: str) -> list[str]:
    """The records one study's table reads: its own runs' (shared runs included)."""
    return [f"{results}/records/{run.run_id}.json" for run in plans[study][2]]


def study_outputs(results: str, plans: dict) -> list[str]:
    """tables/study-<name>.md and .csv of every study planned ([] when none is)."""
    return [f"{results}/tables/study-{name}.{ext}" for name in plans for ext in ("md", "csv")]


def plain_run_on_bundle_site(site: Site, argv: list[str] | None) -> bool:
    """Whether this is a bundle site's run of the default target (no target named, or `all`), typed
    by the user (`argv`: user_command_line(); never in a job's own process)."""
    if site.submit != "bundles" or argv is None:
        return False
    targets = _targets_of(argv)
    return targets is not None and (not targets or "all" in targets)


ACCEPTANCE_TARGETS = ("acceptance", "acceptance_verdicts")


def acceptance_without_references(references: str, given: bool, site: Site, argv: list[str] | None) -> str:
    """The line to stop with when the user asks for the acceptance target and its references file is
    not there ("" otherwise): Snakemake would say only that an input file is missing, and for which
    rule, not which key names it. `given`: the file came from --config references=FILE."""
    if argv is None or Path(references).is_file() or not set(_targets_of(argv) or ()) & set(ACCEPTANCE_TARGETS):
        return ""
    what = "is not a file" if Path(references).exists() else "does not exist"
    named = (f"--config references={references} {what}" if given else
             f"site {site.name} has none ({references} {what}: no published figures to judge against)")
    with_refs = ", ".join(sorted(p.parent.name for p in Path("profiles").glob("*/references.yaml")))
    return (f"the `acceptance` target judges each run against a references file: {named}; valid: "
            "--config references=FILE, a file in workflow/schemas/references.schema.yaml's form (`exabench "
            "references --from-history` derives one from this site's own history: docs/results.md)"
            + (f", or a site that has one ({with_refs})" if with_refs else ""))


def profile_hint(argv: list[str] | None) -> str:
    """`--profile <dir>` as this run was started with, for the commands a message suggests."""
    profile = _profile_of(argv)
    return f"--profile {profile}" if profile else "--config site=<site file>"


def study_tables_only(dag_settings, plans: dict, results: str) -> list[str]:
    """The study tables a run of the `study` target alone made ([] for any other run): what its
    end prints instead of the site's summary (exabench.pipeline.print_summary)."""
    targets = set(getattr(dag_settings, "targets", None) or ())
    return study_outputs(results, plans) if targets == {"study"} else []


def study_target_without_study(config: dict, argv: list[str] | None) -> bool:
    """Whether the user asked for the `study` target with no study named (it would then do nothing)."""
    return argv is not None and "study" in (_targets_of(argv) or []) and not config.get("study")


def write_study_table(study, variant: str, records: list[str], site: Site, markdown: str, csv: str,
                      picture: str, log_path: str) -> None:
    """The study's table, and its picture where the table supports one (`picture`: its index)."""
    from exabench.analysis.study_picture import write_study_picture

    with logged(log_path) as log:
        _say(log, study_tables.write_study_table(study, records, site.name, variant, markdown, csv), echo=True)
        _say(log, write_study_picture(csv, picture))


def write_plan(runs: list[Run], path: str, log_path: str) -> None:
    import pandas as pd
    with logged(log_path):
        atomic_write_text(path, pd.DataFrame(plan_table(runs)).to_csv(index=False))


def write_plan_json(runs: list[dict], path: str, log_path: str) -> None:
    with logged(log_path):
        atomic_write_text(path, json.dumps(runs, indent=1, sort_keys=True, default=str) + "\n")


def node_sweep_outputs(runs: list[Run], site: Site, results_dir: str, nodes: int) -> list[str]:
    """The every_node_script rule's outputs: every-node.sh, and each job's script where the sweep
    needs several (exabench.campaign.node_sweep.sweep_jobs). A campaign that has no every-node job
    still names every-node.sh: the rule then fails with the reason, other targets are unaffected."""
    out = Path(results_dir) / "nodes" / "every-node.sh"
    try:
        jobs = len(sweep_jobs(runs, site, nodes or sweep_nodes(site)))
    except ExabenchError:
        return [str(out)]
    return [str(p) for p in node_sweep_paths(out, jobs)] + ([str(out)] if jobs > 1 else [])


def write_node_sweep(runs: list[Run], site: Site, results_dir: str, nodes: int, path: str, log_path: str) -> None:
    with logged(log_path) as log:
        rendered_runs(runs, site, results_dir)
        files = node_sweep_files(runs, site, Path(results_dir), nodes or sweep_nodes(site), Path(path))
        atomic_write_many(files)
        _say(log, "\n".join(f"every-node job script: {p}" for p, _, _ in files))


def node_group_outputs(runs: list[Run], site: Site, results_dir: str, groups) -> list[str]:
    """The every_node_groups rule's group scripts (one per group, or per group and allocation mode)."""
    return [str(p) for p in group_outputs(runs, site, Path(results_dir), groups)]


def write_node_groups(runs: list[Run], site: Site, results_dir: str, groups, campaign: str, log_path: str) -> None:
    with logged(log_path):
        rendered_runs(runs, site, results_dir)
        atomic_write_many(group_files(runs, site, Path(results_dir), groups, campaign))


def run_file_outputs(results_dir: str) -> dict[str, str]:
    """The render job's output, a stamp (`rendered`): every run's job.sh and spec.json are written
    beside it but not declared, since Snakemake keeps metadata and a checksum for each output (30 s
    for a 10,000-run campaign's 20,000 files, and as long again to declare them); and the campaign's
    run ids (`run_ids`), which the render job and the workflow's start write."""
    runs = Path(results_dir) / "runs"
    return {"rendered": str(runs / RENDERED_NAME), "run_ids": str(runs / RUN_IDS_NAME)}


RENDERED_NAME = "rendered.txt"


def render_campaign(runs: list[Run], site: Site, results_dir: str, stamp: str, log_path: str) -> None:
    """Every run's job.sh and spec.json in one batch (campaign.render.write_runs_files), the list
    of the campaign's run ids that each run's progress line counts against, then the stamp."""
    with logged(log_path) as log:
        written = write_runs_files(runs, site, Path(results_dir))
        write_run_ids(results_dir, [r.run_id for r in runs])
        said = f"{len(runs)} run(s) rendered, {written} file(s) written (the others were unchanged)"
        atomic_write_text(stamp, said + "\n")
        _say(log, said)


def rendered_runs(runs: list[Run], site: Site, results_dir: str) -> None:
    """What reads the render job's files (bundle, every-node and throughput scripts) calls this first:
    a run whose job.sh or spec.json is gone since (deleted by hand) is rendered again, as Snakemake
    would have re-run the render job had the files been declared outputs."""
    root = Path(results_dir)
    gone = [r for r in runs if not all((root / "runs" / r.run_id / name).is_file() for name in ("job.sh", "spec.json"))]
    if gone:
        write_runs_files(gone, site, root)


def render_runs_to_run(jobs, runs: dict, site: Site, results_dir: str, images, log_path: str) -> None:
    """`onstart`: the files of the run jobs about to run, rendered in one batch (files that changed
    only) where their images are built, so that each run job finds its own current and renders
    nothing (1-2 ms a run here against half a second in each job). A run whose files cannot be
    rendered here is left to its job, which renders them itself and records why it cannot."""
    ids = [job.wildcards.run_id for job in jobs if job.rule.name == "run_benchmark"]
    if not ids or not all(Path(image).exists() for image in images):
        return
    with logged(log_path) as log:
        try:
            written = write_runs_files([runs[run_id] for run_id in ids], site, Path(results_dir))
        except ExabenchError as exc:
            _say(log, f"the runs' files were not rendered in one batch ({exc}): each run job renders its own")
            return
        _say(log, f"{len(ids)} run(s) to run rendered, {written} file(s) written (the others were unchanged)")


def write_run_ids(results_dir: str, run_ids: list[str]) -> None:
    """`onstart`: the campaign's run ids, which each run's progress line counts against (written
    only when they changed: a campaign's file keeps its time while its plan does)."""
    path = Path(results_dir) / "runs" / RUN_IDS_NAME
    text = "".join(f"{run_id}\n" for run_id in run_ids)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)


def digest(value) -> str:
    """A short digest of a value made of dicts, lists and scalars: the param of a rule with many
    outputs. Snakemake keeps a job's params in the record of each of its outputs: the whole plan
    as the param of the render job (20,001 outputs at 10,000 runs) would be the plan 20,001 times
    over (1.6 GB of metadata at 1,000 runs); its digest changes when the plan does, as the plan would."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def files_digest(paths) -> str:
    """One digest of the files' contents: a run's param that changes when a template it is rendered
    from changes (the run then runs again, as when its own spec changes)."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path).encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def write_bundle_script(runs, site, results_dir, campaign, path, log_path, concurrent: bool = False) -> None:
    with logged(log_path):
        rendered_runs(runs, site, results_dir)
        write_bundle(runs, site, Path(results_dir), campaign, Path(path), concurrent)


def bundle_outputs(bundles, results_dir: str) -> list[str]:
    """The script path of each bundle of the plan (the `bundle` rule's outputs)."""
    return [str(bundle_path(Path(results_dir), b)) for b in bundles]


def write_bundle_scripts(bundles, site, results_dir, campaign, log_path) -> None:
    """Every bundle's script (an earlier plan's scripts of the campaign removed); the log lists them
    with their nodes, walltime and queue."""
    with logged(log_path) as log:
        rendered_runs([r for b in bundles for r in b.runs], site, results_dir)
        paths = write_bundles(bundles, site, Path(results_dir), campaign)
        for b, path in zip(bundles, paths):
            _say(log, f"{path}: {len(b.runs)} run(s), {b.nodes} node(s), {b.minutes} min, queue {b.queue or '-'}")
        _say(log, f"exabench: {len(bundles)} bundle script(s) in {Path(results_dir) / 'bundles'}; submit each "
                  f"(exabench plan --bundle shows the plan)", echo=True)
        for queue, (n, limit) in over_user_limits(bundles, site).items():
            _say(log, f"exabench: queue {queue} takes only {limit} job(s) per user at once ({site.path}): "
                      f"submit its {n} bundles as earlier ones end", echo=True)


# --- run -----------------------------------------------------------------------------------------

def run_job_environment(site: str, deployment_methods=()) -> dict[str, str]:
    """What the run jobs' shell (run.smk) reads: the Python that runs `exabench execute`, the
    package's folder, put first on its PYTHONPATH (the job finds the package Snakemake found), and
    the site file it renders from. Under `--sdm conda` the job's Python is the one of its conda
    environment (workflow/envs/exabench.yaml). Set in Snakemake's environment, not written into
    the rule: the rule's code and params, which decide a rerun, then hold no interpreter path and
    no spelling of the site's path (the site's content is in each run's render digest,
    exabench/rendered.py), so naming the site by another path re-runs nothing."""
    conda = any(str(getattr(m, "name", m)).lower() == "conda" for m in deployment_methods or ())
    return {"EXABENCH_PYTHON": "python" if conda else sys.executable,
            "EXABENCH_ROOT": str(Path(__file__).resolve().parents[1]),
            "EXABENCH_SITE": str(Path(site).resolve())}


def run_job_command(results: str, planned: str) -> str:
    """The run jobs' shell command (run.smk), a Snakemake format string: `exabench execute` with the
    run's plan entry (a param: a changed entry runs the run again), its spec and log, and the
    campaign's run ids. The paths that follow from the run id are written in rather than made
    params: Snakemake evaluates each param of each job at every invocation (about a second of a
    10,000-run dry run for the two)."""
    import shlex

    def literal(path: str) -> str:  # quoted for the shell, braces kept from Snakemake's formatting
        return shlex.quote(path).replace("{", "{{").replace("}", "}}")

    return ('PYTHONPATH="$EXABENCH_ROOT${{PYTHONPATH:+:$PYTHONPATH}}" "$EXABENCH_PYTHON" -m exabench execute'
            ' --render-site "$EXABENCH_SITE" --render-run {params.run:q}'
            f" --spec {literal(results + '/runs/')}{{wildcards.run_id}}/spec.json --log {{log:q}}"
            f" --planned {literal(planned)}")


def claim_results(results: str, checkout: str, config_files) -> None:
    """`onstart`: claim the results directory for this campaign (execute.ResultsClaim), or stop,
    naming the campaign that holds it; the claim is released when snakemake exits."""
    import atexit

    claim = ResultsClaim(results, checkout, config_files)
    if claim.acquire(lambda line: print(line, flush=True)):
        atexit.register(claim.release)


def drop_default_rate_limit(workflow) -> bool:
    """`onstart`: no job-rate limiter in a local campaign unless the user set one. Snakemake's limiter
    (--max-jobs-per-timespan, default 100/1s) starts a one-second timer after every scheduling round,
    and each timer's round starts another: the rounds per second grow with the jobs finished, each
    scanning every ready job (400 one-at-a-time no-op runs: 23,900 rounds; 1,000 runs: about 0.1 s of
    Snakemake's time a run, growing with the campaign). With an executor plugin (a cluster) the limit
    stays: it spaces submissions. True when the limiter was dropped."""
    limit = workflow.scheduling_settings.max_jobs_per_timespan
    scheduler = getattr(workflow, "scheduler", None)
    default = limit is not None and (limit.max_jobs, limit.timespan) == (100, 1)
    if not (workflow.local_exec and default and getattr(scheduler, "job_rate_limiter", None) is not None):
        return False
    scheduler.job_rate_limiter = None
    return True


def one_pending_reevaluation(workflow) -> bool:
    """`onstart`: at most one pending wake-up of Snakemake's scheduler for its job-rate limit (the
    limit a cluster campaign keeps: pipeline.drop_default_rate_limit). The scheduler starts a timer at
    the end of every round, which wakes it for another round once the limit's timespan has passed;
    that round starts another timer, so every job that ends adds a chain of rounds lasting as long as
    the campaign (a 1,000-run campaign through the Slurm plugin: 41 timer threads after 100 jobs, the
    submitting Snakemake busy 37% of a core with rounds, 9.5 s a job against 4.4 s in a 100-run one).
    A wake-up asked for while one is due is dropped: the limit still frees its slots after each
    timespan. True when the scheduler was changed (it has such a limit and this Snakemake's method)."""
    import time

    scheduler = getattr(workflow, "scheduler", None)
    schedule = getattr(scheduler, "_schedule_reevalutation", None)  # sic: Snakemake's spelling
    if schedule is None or getattr(scheduler, "job_rate_limiter", None) is None:
        return False
    lock = threading.Lock()
    due = [float("-inf")]

    def schedule_once(delay):
        with lock:
            now = time.monotonic()
            if now < due[0]:
                return
            due[0] = now + delay
        schedule(delay)

    scheduler._schedule_reevalutation = schedule_once
    return True


def stop_runs_on_signal(results: str, workflow=None) -> None:
    """`onstart`: SIGINT and SIGTERM to snakemake stop the campaign within seconds: its running runs
    (each run's execution polls for the `stop` file this writes, stops its ranks and writes no
    record, so a resume runs it again) and the scheduling of any other job (Snakemake's own graceful
    exit, as on SIGTERM: it exits once its running jobs ended), then snakemake's own handling goes on.
    Without this the ranks, in their own session, ran on to the end after Ctrl-C; and a snakemake
    started with SIGINT ignored (by a script, with `&`: a shell without job control does that) took
    each Ctrl-C's stopped run for a failed job and, with keep-going, started the next."""
    import os
    import signal

    me = os.getpid()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    stop_scheduling = getattr(getattr(workflow, "scheduler", None), "exit_gracefully", None)

    def handler(signum, frame):
        if os.getpid() == me:  # not in a process forked from snakemake
            asked = request_stop(Path(results) / "runs", me)
            if asked:
                print(f"exabench: {signal.Signals(signum).name}: stopping {len(asked)} running run(s): "
                      f"{', '.join(asked[:5])}{' ...' if len(asked) > 5 else ''}", flush=True)
            if stop_scheduling is not None:  # whatever becomes of the KeyboardInterrupt below
                stop_scheduling()
        prev = previous[signum]
        if callable(prev):
            prev(signum, frame)
        elif prev != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    for sig in previous:
        signal.signal(sig, handler)


def job_resources(site, get_run) -> dict:
    """Snakemake `resources` of a run job for the site's executor plugin (callables of wildcards),
    each read from the run's allocation.run_job, the one object its batch header is rendered from;
    the names the plugin gives them are the scheduler module's (schedulers.<name>.executor_resources)."""
    sched = schedulers.of(site)
    if not sched.FACTS.executor:
        return {}
    jobs: dict = {}  # a run's JobAllocation, made once per run: what decides it is its layout and time limit

    def job(wildcards):
        run = get_run(wildcards)
        key = (run.run_id, run.layout, run.timeout_s)
        if key not in jobs:
            jobs[key] = allocation.run_job(site, run)
        return jobs[key]

    # The plugins take tasks per node or the total, not both (the Slurm plugin's submit_string): tasks
    # per node where there are several, else the total (one per node, or srun's --ntasks-per-gpu
    # placement, which refuses --ntasks-per-node and so asks none: JobAllocation.tasks_per_node 0).
    def tasks(wildcards):
        j = job(wildcards)
        return 0 if j.tasks_per_node > 1 else j.tasks

    def tasks_per_node(wildcards):
        j = job(wildcards)
        return j.tasks_per_node if j.tasks_per_node > 1 else 0

    def cpus_per_task(wildcards):
        # The plugin turns 0 into Snakemake's threads (--cpus-per-task=1); -1 is its documented
        # "ask none", as the header does for ibrun (Stampede2).
        return job(wildcards).cpus_per_task or -1

    def mpi(wildcards):
        # The rule's own shell starts the ranks with the site's launcher: the plugin's documented
        # `mpi` resource keeps its job step from wrapping the rule in another srun. The plugin
        # refuses `mpi` with one task, so one-rank runs go without it (srun.py adds --overlap).
        return site.launcher if job(wildcards).tasks > 1 else ""

    res = {
        "nodes": lambda wildcards: job(wildcards).nodes,
        "tasks": tasks,
        "tasks_per_node": tasks_per_node,
        "cpus_per_task": cpus_per_task,
        "runtime": lambda wildcards: job(wildcards).minutes,
        "mpi": mpi,
        # Always given: 0 (none asked, as the header) replaces Snakemake's own default (1,000-8,000 MB),
        # which the plugins would otherwise ask for (allocation.memory_mb).
        "mem_mb": lambda wildcards: job(wildcards).mem_mb,
    }
    res.update(allocation_resources(site))
    res.update(sched.executor_resources(site, job))  # queue picked by size, allocation-wide flags
    return res


def allocation_resources(site) -> dict:
    """Where any job of the site is charged and queued (Slurm: partition, account, QoS, constraint;
    LSF: queue and project), in its executor plugin's names. Every job the plugins submit gets them,
    an image build too."""
    return schedulers.site_resources(site)


# --- tables, verdicts, plots, archive -------------------------------------------------------------

def compare_table_names(baseline: str) -> list[str]:
    return compare.table_names(baseline or None)


def unfinished_records(results: str, run_ids) -> list[str]:
    """The records of the campaign's runs that have none (set aside by `exabench retry`, deleted by
    hand), once the campaign's table exists: the default target names them, so that they run. The
    table is newer than every record left, and Snakemake does not remake a missing input of a job
    whose output is up to date, so without this the campaign's command said "Nothing to be done".
    Before the first table the aggregate asks for every record anyway: nothing to add. One listing
    of records/, not a stat per run."""
    records = Path(results) / "records"
    if not Path(results, "tables", "results.csv").exists():
        return []
    try:
        present = {name[:-5] for name in os.listdir(records) if name.endswith(".json")}
    except FileNotFoundError:
        present = set()
    return [f"{records}/{run_id}.json" for run_id in run_ids if run_id not in present]


def aggregate_site(records: list[str], csv: str, markdown: str, site: Site, log_path: str) -> None:
    with logged(log_path):
        aggregate(records, csv, markdown, site.name)


def compare_tables(records: list[str], plan: str, site: Site, baseline: str, out_dir: str, log_path: str) -> None:
    with logged(log_path) as log:
        _say(log, compare.write_comparison(records, plan, site.name, baseline or None, out_dir))


def mlperf_score_tables(records: list[str], out_dir: str, mode: str, prune: int, log_path: str) -> None:
    """tables/mlperf.md and .json: Time To Solution or Throughput from the records' MLPerf logs."""
    from exabench.analysis import mlperf_scores
    from exabench.records.record import read_record
    with logged(log_path) as log:
        recs = [read_record(r) for r in records if Path(r).exists()]
        result = mlperf_scores.write_scores(recs, out_dir, mode, prune)
        _say(log, f"mlperf {mode}: {result['logs']} log(s) scored")


def accept_verdicts(records: list[str], references: str, plan: str, site: Site, markdown: str, csv: str, junit: str,
                    log_path: str) -> None:
    with logged(log_path) as log:
        rows = acceptance.write_verdicts(records, references, plan, site.name, markdown, csv, junit)
        _say(log, f"acceptance of {site.name}: " + ", ".join(f"{n} {v}" for v, n in acceptance.counts(rows).items()))


def accept_check(verdicts: str, log_path: str) -> None:
    """Fail the rule, naming the failing runs, when any run failed acceptance."""
    with logged(log_path) as log:
        passed, text = acceptance.check_verdicts(verdicts)
        _say(log, text, echo=True)
        if not passed:
            raise ExabenchError(text.splitlines()[-1])


def node_report_job(runs: dict, results_dir: str, inputs, outputs, log_path: str, site: Site, config: dict) -> None:
    """The node_report rule's job (acceptance.smk): its named inputs and outputs, read here."""
    node_report(inputs.nodes, inputs.references, site, outputs.markdown, outputs.csv, log_path, outputs.json,
                config.get("every_node") or {}, config["campaign"], (list(runs.values()), results_dir))


def node_report(records: list[str], references: list[str], site: Site, markdown: str, csv: str,
                log_path: str, verdict_json: str | None = None, every_node: dict | None = None,
                campaign: str = "", plan: tuple | None = None) -> None:
    """The per-node report, judged as node_acceptance judges (every_node.verdict's criteria), with its
    verdict.json and drain list beside it (verdict_json's folder); it always gets written (node_check
    then fails on it). With `plan` (the campaign's runs, its results folder) and `verdict.confirm`
    (the default), the first pass screens and a confirmation round decides, its jobs written for the
    user to submit (exabench.analysis.node_confirm_scripts)."""
    from exabench.analysis import node_confirm_scripts as rounds
    crit = node_criteria(every_node or {})
    with logged(log_path) as log:
        todo = []

        def confirm(first):
            doc = rounds.confirmation(first, crit, plan[0], site, Path(plan[1]), campaign)
            todo.append(rounds.pending(doc) if doc else "")
            return rounds.judged(first, doc, crit)
        rows = acceptance.write_node_check(records, references[0] if references else None, site.name, markdown,
                                           csv=csv, out_dir=str(Path(verdict_json).parent) if verdict_json else None,
                                           crit=crit, campaign=campaign,
                                           confirm=confirm if plan and crit.confirm else None)
        _say(log, acceptance.node_check_line(rows, markdown) + "".join(f"; {t}" for t in todo if t), echo=True)


def run_node_groups(runs: list[Run], site: Site, results_dir: str, groups, out_json: str, log_path: str) -> None:
    """Submit the every-node group jobs whose runs are not all recorded, follow them to the end, and
    write what happened (runs recorded, not run because their node was down, missing)."""
    from exabench.campaign import node_jobs
    with logged(log_path) as log:
        if site.scheduler != "slurm":
            raise ExabenchError(f"site '{site.name}': node_acceptance submits with Slurm; scheduler "
                                f"{site.scheduler!r} is not valid for it (submit nodes/groups/submit.sh instead)")
        root = Path(results_dir)
        planned = node_jobs.planned_node_runs(runs, groups, root)
        scripts = {g.name: root / "nodes" / "groups" / f"{g.name}.sh" for g in groups}
        result = node_jobs.run_groups(planned, scripts, node_jobs.slurm_env(site.env),
                                      lambda text: _say(log, f"exabench: {text}", echo=True))
        node_jobs.write_jobs(out_json, result)


def confirm_node_groups(runs: list[Run], site: Site, results_dir: str, jobs_json: str, every_node: dict,
                        campaign: str, out_json: str, log_path: str) -> None:
    """The confirmation round after the first pass (exabench.analysis.node_confirm): every node the
    first pass flags measured again beside known-good nodes, as new runs; written as
    nodes/groups/confirm.json (the round, its suspects and controls, why none ran, its runs), which
    node_verdict reads beside jobs.json."""
    from exabench.analysis import node_confirm, node_verdict
    from exabench.analysis.node_verdict_files import read_node_record
    from exabench.campaign import node_jobs
    with logged(log_path) as log:
        def say(text):
            _say(log, f"exabench: {text}", echo=True)
        planned = json.loads(Path(jobs_json).read_text())["planned"]
        records = {p["run_id"]: read_node_record(p) for p in planned if Path(p["record"]).exists()}
        crit = node_criteria(every_node)
        first = node_verdict.judge(planned, records, crit)
        flagged = node_confirm.suspects(first) if crit.confirm else []
        doc = {"round": None, "suspects": flagged, "controls": [], "in_doubt": "", "planned": [], "jobs": {}}
        controls = node_confirm.controls(first, flagged)
        if flagged:
            doc["in_doubt"] = node_confirm.in_doubt(first, crit) or (
                "" if controls else "no node passed the first pass: no control to confirm against")
        if not flagged:
            say("first pass: no node flagged, nothing to confirm")
        elif doc["in_doubt"]:
            say(f"first pass flags {' '.join(flagged)}; not confirmed: {doc['in_doubt']}")
        else:
            round_ = node_jobs.next_round(Path(results_dir))
            say(f"first pass flags {' '.join(flagged)}: confirmation round {round_} beside controls "
                f"{' '.join(controls)}")
            result = node_jobs.confirmation_round(runs, site, Path(results_dir),
                                                  node_confirm.groups(flagged, controls, round_), round_, campaign,
                                                  node_jobs.slurm_env(site.env), say)
            doc.update(round=round_, controls=controls, planned=result["planned"], jobs=result["jobs"])
        node_jobs.write_jobs(out_json, doc)


def missing_node_runs(runs: list[Run], groups, results_dir: str) -> list[str]:
    """The node runs without a record (node_jobs' params: a change re-runs it, so a rerun after a
    node came back submits what it missed)."""
    from exabench.campaign.node_jobs import planned_node_runs
    return [p["run_id"] for p in planned_node_runs(runs, groups, Path(results_dir)) if not Path(p["record"]).exists()]


def node_criteria(every_node: dict):
    """The judging criteria of `every_node.verdict` (its defaults where a key is not given)."""
    from exabench.analysis import node_verdict as nv
    judging = every_node.get("verdict") or {}
    defaults = nv.Criteria()
    keys = ("z_max", "min_effect", "node_min_tests", "pair_min_tests", "max_outlier_share", "confirmations",
            "z_screen", "accept_down", "unstable_factor")
    return nv.Criteria(**{k: judging.get(k, getattr(defaults, k)) for k in keys}, confirm=judging.get("confirm", True),
                       metrics=judging.get("metrics") or {}, best_of=tuple(judging.get("best_of") or ()))


def node_confirm_job(runs: dict, site: Site, results_dir: str, inputs, outputs, log_path: str, config: dict) -> None:
    """The node_confirm rule's job (one call: Snakemake's lint wants short run blocks)."""
    confirm_node_groups(list(runs.values()), site, results_dir, inputs[0], config.get("every_node") or {},
                        config["campaign"], outputs[0], log_path)


def node_verdict_job(inputs, outputs, log_path: str, site: Site, config: dict, out_dir: str) -> None:
    """The node_verdict rule's job: the verdict of the first pass with the confirmation round applied."""
    node_verdict(inputs.jobs, out_dir, site, config.get("every_node") or {}, outputs.json, log_path,
                 config["campaign"], inputs.confirm)


def node_verdict(jobs_json: str, out_dir: str, site: Site, every_node: dict, verdict_json: str,
                 log_path: str, campaign: str = "", confirm_json: str | None = None) -> None:
    """The cluster verdict (exabench.analysis.node_verdict): report, verdict.json, tests table, plots, JUnit,
    drain list."""
    from exabench.analysis.node_verdict_files import write_verdict
    with logged(log_path) as log:
        # verdict_json (the rule's output) is out_dir/verdict.json: named so that Snakemake knows it
        v = write_verdict(jobs_json, out_dir, site.name, node_criteria(every_node), campaign, confirm_json)
        cleared, unsure = ([n for n, st in v["status"].items() if st == want] for want in ("suspect-cleared",
                                                                                          "inconclusive"))
        confirmed = (f"cleared by confirmation: {' '.join(cleared) or 'none'}; inconclusive: "
                     f"{' '.join(unsure) or 'none'}; ") if v.get("confirmation") else ""
        _say(log, f"exabench: cluster acceptance: {len(v['nodes'])} nodes; bad nodes: "
                  f"{' '.join(v['bad_nodes']) or 'none'}; bad links: {' '.join(v['bad_links']) or 'none'}; "
                  f"suspects: {' '.join(v['suspects']) or 'none'}; {confirmed}"
                  f"down: {' '.join(v['down']) or 'none'} -> {out_dir}/verdict.md", echo=True)


def node_acceptance_check(verdict_json: str, log_path: str) -> None:
    """Fail the rule unless verdict.json's exit code is 0: naming the nodes to drain (1), or what could
    not be decided (2: suspects to re-test, nodes down, nodes inconclusive)."""
    with logged(log_path) as log:
        v = json.loads(Path(verdict_json).read_text())
        text = verdict_line(v, Path(verdict_json).parent / "drain.txt")
        _say(log, text, echo=True)
        if v["exit_code"]:
            raise ExabenchError(text)


def verdict_line(doc: dict, drain_txt) -> str:
    """verdict.json's decision in one line."""
    by = {}
    for node, n in doc["nodes"].items():
        by.setdefault(n["status"], []).append(node)
    if doc["exit_code"] == 1:
        links = [n for n in by.get("drain", []) if "link" in (doc["nodes"][n]["cause"] or "")]
        return (f"exabench: cluster acceptance FAILED: drain {' '.join(by['drain'])} (" + "; ".join(
            f"{n}: {doc['nodes'][n]['cause']}" for n in by["drain"]) + ")"
            + (f", check the links of {' '.join(links)}" if links else "") + f" (drain list: {drain_txt})")
    if doc["exit_code"] == 2:
        what = "; ".join(f"{s} {' '.join(by[s])}" for s in ("suspect", "down", "inconclusive") if by.get(s))
        return (f"exabench: cluster acceptance UNDECIDED (exit 2): {what or 'a whole-allocation run failed'}"
                " (suspects: re-test; down: bring back and run again; docs/acceptance.md)")
    down = by.get("down", [])
    return "exabench: cluster acceptance passed: nothing flagged" + (f" ({' '.join(down)} down, accepted by "
                                                                    "accept_down)" if down else "")


def node_check(nodes_csv: str, references: list[str], log_path: str) -> None:
    """Fail the rule, naming the nodes, when a node is flagged or nothing could be judged."""
    with logged(log_path) as log:
        passed, text = acceptance.check_nodes(nodes_csv, bool(references))
        verdict = Path(nodes_csv).parent / "nodes" / "verdict.json"  # node_report's, beside the table
        todo = sorted({e[len("to confirm: "):] for n in (json.loads(verdict.read_text())["nodes"].values()
                                                          if verdict.exists() else ())
                       for e in n["evidence"] if e.startswith("to confirm: ")})
        text += "".join(f"; next: {t}" for t in todo)
        _say(log, text, echo=True)
        if not passed:
            raise ExabenchError(text)


def write_html_pages(markdown_pages: list[str], html_pages: list[str], log_path: str) -> None:
    """Each Markdown page (summary, comparison table, verdicts) as an HTML page for the report."""
    from exabench.markdown import to_html

    with logged(log_path) as log:
        for md, page in zip(markdown_pages, html_pages, strict=True):
            atomic_write_text(page, to_html(Path(md).read_text(), Path(md).stem))
            _say(log, f"{md} -> {page}")


def write_plots(records: list[str], nodes: list[str], plan: str, site: Site, out_dir: str, log_path: str) -> None:
    with logged(log_path) as log:
        _say(log, plots.write_plots(records, nodes, plan, site.name, out_dir))


def campaign_page_job(inputs, out: str, log_path: str, site: Site) -> None:
    """The campaign_page rule's job (report.smk): its named inputs, read here (a short run: block)."""
    indexes = [inputs.plots, *inputs.studies, *inputs.history, *inputs.nodes]
    write_campaign_page(site, inputs.summary, indexes, list(inputs.tables),
                        inputs.verdicts[0] if inputs.verdicts else None, out, log_path)


def write_campaign_page(site: Site, summary: str, indexes: list[str], tables: list[str], verdicts: str | None,
                        out: str, log_path: str) -> None:
    """The campaign's own HTML page (exabench.analysis.report_page), in Snakemake's report too."""
    from exabench.analysis.report_page import write_campaign_page as write

    with logged(log_path) as log:
        _say(log, write(site.name, summary, indexes, tables, verdicts, out))


def archive_campaign(results: str, out: str, site: Site, logs: str, configs: list[str], references: str | None,
                     baseline: str, baseline_records: list[str], log_path: str, studies: dict | None = None,
                     rule_logs: list[str] = ()) -> None:
    with logged(log_path) as log:
        _say(log, archive.archive_campaign(results, out, site.name, logs, configs, site.path, references,
                                           baseline=baseline or None, baseline_records=baseline_records,
                                           studies=studies or None, rule_logs=list(rule_logs)))


def ingest_campaign(records: list[str], store: str, receipt: str, log_path: str) -> None:
    """Add the campaign's records to the results store (one transaction) and write the receipt."""
    with logged(log_path) as log:
        try:
            result = ingest(records, store)
            _say(log, result.line(), echo=True)
            done = result.to_dict()
        except StoreBusyError as exc:  # another campaign's ingestion or a long query: the campaign goes on
            done = {"store": store, "campaigns": [], "added": 0, "skipped": 0, "corrupt": [], "not_ingested": str(exc)}
            _say(log, f"exabench: this campaign was not ingested: {exc}. Add it later with: exabench ingest "
                      f"{Path(receipt).parent.parent} --store {store}", echo=True)
        atomic_write_text(receipt, json.dumps(done, indent=1, sort_keys=True) + "\n")


def history_report(store: str, receipt: str, site: Site, csv: str, markdown: str, plot: str, log_path: str) -> None:
    """The campaign just ingested against the site's history: regression verdicts (Markdown, CSV) and
    the history trend picture of each benchmark where the store has data for it
    (exabench.analysis.history_pictures), their index (`plot`, JSON) saying which or why not, for
    the campaign page."""
    with logged(log_path) as log:
        done = json.loads(Path(receipt).read_text())
        if done.get("not_ingested"):
            _no_history(f"The campaign was not ingested: {done['not_ingested']}", csv, markdown, plot)
            return
        try:
            _history_report(store, done, site, csv, markdown, plot, log)
        except StoreBusyError as exc:
            _no_history(str(exc), csv, markdown, plot)


def _no_history(why: str, csv: str, markdown: str, plot: str) -> None:
    """The report's history pages when the store could not be read: why, and no picture."""
    from exabench.analysis import history
    from exabench.analysis.history_pictures import no_history
    print(f"exabench: no regression verdicts: {why}", flush=True)
    atomic_write_text(markdown, f"# Regression verdicts\n\nNone: {why}\n")
    atomic_write_text(csv, ",".join(history.REGRESSION_COLUMNS) + "\n")

    plots.write_index(no_history(why, Path(plot).parent), plot)


def _history_report(store: str, done: dict, site: Site, csv: str, markdown: str, plot: str, log) -> None:
    from exabench.analysis import history
    from exabench.analysis.history_pictures import history_pictures

    with store_errors(store):
        added = [c["campaign_id"] for c in done["campaigns"] if c["site"] == site.name]
        table = history.campaigns(store)
        # The campaign this run added; nothing new (a rerun that changed no record): the site's latest.
        current_ids = added[-1:] or history.select(table, f"site:{site.name},latest")
        df = None
        if current_ids:
            df = history.regressions(store, current=f"campaign:{current_ids[0]}")
            _say(log, history.write_regressions(df, csv, markdown))
        else:  # nothing of this site stored (results_store was off, or no record is ok)
            atomic_write_text(markdown, f"# Regression verdicts\n\nNo campaign of site {site.name} in {store}.\n")
            atomic_write_text(csv, ",".join(history.REGRESSION_COLUMNS) + "\n")
        site_ids = history.select(table, f"site:{site.name}")
        entries = history_pictures(history.samples(store, site_ids), df, current_ids, Path(plot).parent)
        plots.write_index(entries, plot)
        drawn = [e["file"] for e in entries if e["file"]]
        _say(log, f"history pictures: {', '.join(drawn) or 'none'} -> {Path(plot).parent}")


def measure_allreduce_sweep(records: list[str], out_csv: str, site: Site, log_path: str) -> None:
    """The allreduce sweep table: from the campaign's records, else measured here with the site's Python."""
    write_sweep(records, out_csv, site.python_executable, site.env, log_path)


# --- the end of a campaign -----------------------------------------------------------------------

def final_summary(results: str | Path, site: str) -> str:
    """Where the results are: table, comparison, report command, acceptance verdict."""
    results = Path(results)
    c = progress_counts(results)
    lines = [f"exabench: {c['done']} of {c['planned']} runs done, {c['failed']} failed, {c['remaining']} remaining"]
    if (results / "tables" / "results.csv").is_file():
        lines.append(f"  table:       {results}/tables/results.csv (summary {results}/tables/summary.md)")
    else:  # e.g. after `bundle`: the runs have not run yet
        lines.append(f"  table:       none yet: snakemake --profile profiles/{site} makes it from the records")
    if (results / "tables" / "comparison.md").is_file():
        lines.append(f"  comparison:  {results}/tables/comparison.md (CSV and Parquet beside it)")
    if (results / "plots").is_dir():
        lines.append(f"  plots:       {results}/plots/ (index.md: what was drawn, what not and why)")
    receipt = results / "history" / "ingested.json"
    if receipt.is_file():
        store = json.loads(receipt.read_text()).get("store")
        lines.append(f"  history:     {store} (exabench history --store {store}; docs/history.md)")
    if (results / "report" / "index.html").is_file():
        lines.append(f"  page:        {results}/report/index.html (summary, pictures, tables; opens offline)")
    lines.append(f"  report:      snakemake --profile profiles/{site} --report {results}/report.html")
    if c["failed"]:
        lines.append(f"  retry:       exabench retry --results {results}, then this snakemake command again "
                     "(runs only the failed runs; docs/results.md)")
    verdicts = results / "acceptance" / "verdicts.md"
    if verdicts.is_file():
        last = verdicts.read_text().rstrip().splitlines()[-1]
        lines.append(f"  verdict:     {last} ({verdicts}, JUnit {results}/acceptance/junit.xml)")
    else:
        lines.append(f"  verdict:     not judged yet: snakemake --profile profiles/{site} acceptance")
    return "\n".join(lines)


def print_summary(results: str, site: Site, study_tables: list[str] | None = None) -> None:
    """The end of a run: the site's summary and where its results and verdict are; with
    `study_tables` (a run of the `study` target alone), those tables only: the summary and verdict on
    disk are an earlier campaign's, which the study run did not make."""
    if study_tables:
        for table in (Path(t) for t in study_tables if t.endswith(".md")):
            print(f"\n{table.read_text()}\nTable: {table.with_suffix('.csv')}")
        return
    summary = Path(results) / "tables" / "summary.md"
    if summary.exists():
        print(f"\n{summary.read_text()}\nTable: {Path(results) / 'tables' / 'results.csv'}")
    print(f"\n{final_summary(results, site.name)}")
