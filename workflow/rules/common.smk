# Validate config and site before anything runs, and expand the plan that gives the wildcards.
import functools
import json
import os
import sys
from glob import glob
from pathlib import Path

# exabench.pipeline is the one package module the stages import (its name leaves Snakemake's
# own `workflow` object usable).
from exabench import pipeline

# Errors name the user's file: the last --configfile (it overrides the Snakefile's default), else the default.
CONFIG_FILE = pipeline.config_file_of(workflow.overwrite_configfiles, workflow.configfiles)
# The command line the user typed; None in a job's own Snakemake process, which decides nothing by it.
USER_ARGV = pipeline.user_command_line(workflow)
try:
    pipeline.keep_profile_config(workflow, config, USER_ARGV)  # --config typed keeps the profile's other entries
    pipeline.check_job_command_line(
        workflow.config_settings.config_args, workflow.configfiles, Path.cwd(), workflow.basedir
    )
    pipeline.check_config_files(workflow.configfiles)
    pipeline.validate_config(config, CONFIG_FILE, workflow.config_settings.config)  # fills in defaults
    SITE = pipeline.load_site(config["site"])
    # A job step (an executor plugin's Snakemake for one job on its node) reads the plan the
    # campaign's start saved (run.smk's onstart) rather than expanding it again.
    RUNS = pipeline.campaign_runs(config, SITE, CONFIG_FILE, job_step=workflow.remote_exec)
    # Bundle mode's allocations (the `bundle` rule's scripts): the campaign split where no queue admits it whole.
    BUNDLES = pipeline.plan_bundles(list(RUNS.values()), SITE, config["campaign"], CONFIG_FILE)
    # The node-hour budget, judged in the user's own process (its jobs run what it let through).
    if USER_ARGV is not None:
        pipeline.check_budget(config, SITE, list(RUNS.values()), BUNDLES, CONFIG_FILE)
    # A bundle site (submit: bundles) never runs a benchmark here: a plain run (the default target)
    # with runs still pending lists their bundles and the commands that submit them, and stops.
    if pipeline.plain_run_on_bundle_site(SITE, USER_ARGV):
        PENDING = pipeline.pending_report(BUNDLES, SITE, f"results/{SITE.name}", pipeline.profile_hint(USER_ARGV))
        if PENDING:
            print(f"exabench: {PENDING}", file=sys.stderr)
            raise SystemExit(0)
    NODE_GROUPS = pipeline.node_groups(config, SITE, CONFIG_FILE)  # `every_node`: one job per node group
    pipeline.check_groups(NODE_GROUPS, list(RUNS.values()), CONFIG_FILE)
except pipeline.ExabenchError as exc:
    pipeline.stop(f"invalid configuration: {exc}")

RESULTS = f"results/{SITE.name}"
LOGS = f"logs/{SITE.name}"
try:  # a rerun killed halfway: its records and the campaign's before it must not share one table
    pipeline.rerun_marker.check_unfinished(RESULTS, RUNS, USER_ARGV)
except pipeline.ExabenchError as exc:
    pipeline.stop(str(exc))
TEMPLATES = Path(workflow.basedir) / "workflow" / "templates"


wildcard_constraints:
    run_id=pipeline.RUN_ID_PATTERN,


def get_run(wildcards):
    return RUNS[wildcards.run_id]


@functools.cache
def run_dict(run_id):
    # A run as a dict, made once and when first asked for: a job step that an executor plugin
    # starts on a compute node asks for its own run's only, not the whole plan's.
    return RUNS[run_id].to_dict()


# Every template, found once: the render job's inputs, and (their digest) a param of every run, so
# that editing one re-renders and re-runs the runs.
RUN_TEMPLATES = sorted(str(p) for p in TEMPLATES.rglob("*.j2"))
TEMPLATES_DIGEST = pipeline.files_digest(RUN_TEMPLATES)
# The run jobs' `exabench execute` (run.smk): its Python, the package's folder and the site file,
# in the environment.
os.environ.update(pipeline.run_job_environment(config["site"], workflow.deployment_settings.deployment_method))
# What the render job writes: its stamp (every run's job.sh and spec.json beside it), and the campaign's run ids.
RUN_FILES = pipeline.run_file_outputs(RESULTS)
# The site file's content: a param of the render job (an edited site renders the campaign again).
SITE_DIGEST = pipeline.files_digest([config["site"]])


def get_run_json(wildcards):
    # The run's plan entry: what its job renders its files from, and (a param) what runs it again
    # when it changes, and no other run.
    return json.dumps(run_dict(wildcards.run_id), sort_keys=True)


@functools.cache
def plan_digest():
    return pipeline.digest(get_plan_dicts())


def get_plan_digest(wildcards=None):
    # The plan's digest, made once: the param of the campaign-wide jobs (plan, render, bundles): a
    # changed run writes the plan and renders the campaign again (and the changed run alone runs
    # again: run.smk). Not the plan itself: Snakemake keeps each param in its metadata and compares
    # it on every later invocation (10,000 runs' dicts: megabytes a job).
    return plan_digest()


def get_plan_dicts(wildcards=None):
    # Every run as a dict: plan.json's content, and what the plan's digest is made of.
    return [run_dict(run_id) for run_id in RUNS]


def get_run_threads(wildcards):
    lay = get_run(wildcards).layout
    return lay.ranks_per_node * lay.threads_per_rank


def get_records(wildcards=None):
    return [f"{RESULTS}/records/{run_id}.json" for run_id in RUNS]


# The campaign's table (the aggregate's output, made from every record) is the input of the other
# stages that read every record (compare, plots, acceptance, ingest, MLPerf scores, the local perf
# check), which read them through get_records() in their jobs. Snakemake resolves each input file of
# each job while it builds the DAG, about 1 ms a run for each of them (8 s of a 10,000-run dry run
# when all six named every record); the table is newer than every record, so a changed record
# still runs them again.
RECORDS_TABLE = f"{RESULTS}/tables/results.csv"


def get_final_outputs(wildcards=None):
    # With the runs that have no record (`exabench retry` set it aside): they run, then the tables.
    return [
        f"{RESULTS}/plan.csv",
        f"{RESULTS}/tables/results.csv",
        f"{RESULTS}/tables/summary.md",
        *pipeline.unfinished_records(RESULTS, RUNS),
    ]


# --- comparison, acceptance and report stages -------------------------------------
# Their names are set here, before the functions below and the stages' rule files read them.

BASELINE = config.get("baseline_site") or ""
COMPARE_TABLES = pipeline.compare_table_names(BASELINE)
REPORT_TABLES = ["summary", *COMPARE_TABLES]  # as HTML pages in the report (report.smk)
REFERENCES = config.get("references") or str(Path(config["site"]).parent / "references.yaml")


def get_baseline_records(wildcards=None):
    if not BASELINE or BASELINE == SITE.name:
        return []
    return sorted(glob(f"results/{BASELINE}/records/*.json") + glob(f"results/reference/{BASELINE}/*.json"))


def get_references_if_any(wildcards=None):
    return [REFERENCES] if Path(REFERENCES).exists() else []


def get_node_records(wildcards=None):
    # Per-node records of a cluster-wide acceptance campaign (results/<site>/records/nodes/).
    return sorted(glob(f"{RESULTS}/records/nodes/*.json"))


def get_node_acceptance_pictures(wildcards=None):
    # The cluster acceptance's pictures (the heat map of nodes x tests first) where `node_acceptance`
    # has run: the page shows them, and is redrawn when they change. Not node_verdict's output: the
    # page never makes `all` submit the node jobs.
    index = f"{ACCEPTANCE}/cluster/plots/index.json"
    return [index] if Path(index).exists() else []


def get_archived_rule_logs(wildcards=None):
    # archive.smk: the logs of the jobs that made what the archive packs, all of them above it (so ended before
    # it starts). Not the logs of jobs that may run beside it (the ingestion, the history, the
    # report's pages, the archive itself), which hold nothing packed and which Snakemake deletes as
    # each such job starts: packing them raced those jobs and packed an earlier campaign's.
    made = [rules.plan, rules.plan_json, rules.aggregate, rules.compare, rules.plots]
    made += [rules.acceptance_verdicts] if Path(REFERENCES).exists() else []
    return [*(log for rule in made for log in rule.log), *(f"{LOGS}/study-{name}.log" for name in STUDIES)]


def get_compare_outputs(wildcards=None):
    return [f"{RESULTS}/tables/{name}.{ext}" for name in COMPARE_TABLES for ext in ("csv", "parquet", "md")]


def get_report_outputs(wildcards=None):
    # The report's pages; the acceptance verdicts where the site has references to judge against.
    pages = [f"{RESULTS}/report/{name}.html" for name in ["index", *REPORT_TABLES]]
    pages += [f"{RESULTS}/report/regressions.html"] if HISTORY_STORE != "none" else []
    return pages + ([f"{RESULTS}/report/verdicts.html"] if Path(REFERENCES).exists() else [])


def get_missing_node_runs(wildcards=None):
    return pipeline.missing_node_runs(list(RUNS.values()), NODE_GROUPS, RESULTS)


def get_node_groups_digest(wildcards=None):
    # The groups' digest, not the groups: a param is kept in the record of each output (one per group).
    return pipeline.digest([[group.name, *group.nodes] for group in NODE_GROUPS])


def get_plot_outputs(wildcards=None):
    # The plots' index (index.json first): the pictures the records support are drawn beside it.
    return [f"{RESULTS}/plots/index.json", f"{RESULTS}/plots/index.md"]


# --- results store (history.smk) --------------------------------------------------

HISTORY_STORE = config.get("results_store") or "results/history.duckdb"
if HISTORY_STORE != "none" and Path(HISTORY_STORE).is_dir():  # found now, not by the ingest rule at the end
    pipeline.stop(
        "invalid configuration: "
        + str(
            pipeline.ConfigError(
                CONFIG_FILE, "results_store", HISTORY_STORE, "a DuckDB file's path, or none", "is a folder"
            )
        )
    )


def get_history_outputs(wildcards=None):
    if HISTORY_STORE == "none":
        return []
    return [
        f"{RESULTS}/history/{name}" for name in ("ingested.json", "regressions.md", "regressions.csv", "pictures.json")
    ]


# --- MLPerf-HPC scores (workflow/rules/mlperf.smk) ----------------------------------

MLPERF_SCORES = config.get("score_mlperf") or ""


def get_mlperf_outputs(wildcards=None):
    if not MLPERF_SCORES:
        return []
    return [f"{RESULTS}/tables/mlperf.md", f"{RESULTS}/tables/mlperf.json"]


# --- published studies (studies.smk, which sets STUDIES) ---------------------------


def get_study_outputs(wildcards=None):
    # tables/study-<name>.md and .csv of every study planned (none without `study`): `all` and `study`.
    return pipeline.study_outputs(RESULTS, STUDIES)


def get_study_pictures(wildcards=None):
    # Each planned study's picture index (plots/study-<name>.json), for the campaign page.
    return [f"{RESULTS}/plots/study-{name}.json" for name in STUDIES]


def get_study_records(wildcards):
    # One study's table reads its own runs' records (shared runs included).
    return pipeline.study_records(RESULTS, STUDIES, wildcards.study)
