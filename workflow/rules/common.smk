# Validate config and site before anything runs, and expand the plan that gives the wildcards.
from glob import glob
from pathlib import Path

from exabench import pipeline
from exabench.errors import ExabenchError
from exabench.job_resources import job_resources
from exabench.config import validate
from exabench.plan import RUN_ID_PATTERN
from exabench.plan import expand as expand_plan  # Snakemake's own `expand` stays usable
from exabench.site import load_site

# The last config file given wins where keys overlap: name it in errors.
CONFIG_FILE = workflow.configfiles[-1] if workflow.configfiles else "config/config.yaml"
try:
    validate(config, "config", CONFIG_FILE)
    SITE = load_site(config["site"])
    RUNS = {run.run_id: run for run in expand_plan(config, SITE, CONFIG_FILE)}
except ExabenchError as exc:
    raise WorkflowError(f"exabench: invalid configuration: {exc}") from None

RESULTS = f"results/{SITE.name}"
LOGS = f"logs/{SITE.name}"
TEMPLATES = Path(workflow.basedir) / "workflow" / "templates"


wildcard_constraints:
    run_id=RUN_ID_PATTERN,


def get_run(wildcards):
    return RUNS[wildcards.run_id]


def get_run_spec_params(wildcards):
    # A change to one run's resolved spec re-renders (and so re-runs) that run only.
    return get_run(wildcards).to_dict()


def get_plan_params(wildcards):
    return [run.to_dict() for run in RUNS.values()]


def get_templates(wildcards):
    # Editing a template re-renders (and so re-runs) the runs that use it.
    return sorted(str(p) for p in TEMPLATES.rglob("*.j2"))


def get_run_threads(wildcards):
    lay = get_run(wildcards).layout
    return lay.ranks_per_node * lay.threads_per_rank


def get_records(wildcards=None):
    return [f"{RESULTS}/records/{run_id}.json" for run_id in RUNS]


def get_final_outputs(wildcards=None):
    return [f"{RESULTS}/plan.csv", f"{RESULTS}/tables/results.csv", f"{RESULTS}/tables/summary.md"]


def print_summary(summary, table):
    from exabench.report import final_summary

    if Path(summary).exists():
        print(f"\n{Path(summary).read_text()}\nTable: {table}")
    print(f"\n{final_summary(RESULTS, SITE.name)}")


# --- comparison, acceptance and report stages -------------------------------------

def get_baseline_records(wildcards=None):
    if not BASELINE or BASELINE == SITE.name:
        return []
    return sorted(glob(f"results/{BASELINE}/records/*.json") + glob(f"results/reference/{BASELINE}/*.json"))


def get_node_records(wildcards=None):
    # Per-node records of a cluster-wide acceptance campaign (results/<site>/records/nodes/).
    return sorted(glob(f"{RESULTS}/records/nodes/*.json"))


def get_plan_dicts(wildcards=None):
    return [r.to_dict() for r in RUNS.values()]


def get_compare_outputs(wildcards=None):
    return [f"{RESULTS}/tables/{name}.{ext}" for name in COMPARE_TABLES for ext in ("csv", "parquet", "md")]


def get_single_node_specs(wildcards=None):
    return [f"{RESULTS}/runs/{run_id}/spec.json" for run_id, run in RUNS.items() if run.layout.nodes == 1]


def get_plot_outputs(wildcards=None):
    return [f"{RESULTS}/plots/{name}.png" for name in PLOTS]


def get_archive_argv(wildcards, input, output):
    refs = ["--references", REFERENCES] if Path(REFERENCES).exists() else []
    return ["archive", "--results", RESULTS, "--logs", LOGS, "--site-name", SITE.name, "--site", config["site"],
            "--config", *map(str, workflow.configfiles), *refs, *(["--baseline", BASELINE] if BASELINE else []),
            "--baseline-records", *input.baseline, "--out", output[0]]
