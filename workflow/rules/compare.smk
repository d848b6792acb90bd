# Records (and the plan, so runs that left no record show as missing) -> comparison tables.
import json
from glob import glob
from pathlib import Path

COMPARE_TABLES = ["site", "scaling", "threads_x_size", "precision_x_algorithm", "frameworks"]
BASELINE = config.get("baseline_site") or ""
if BASELINE:
    COMPARE_TABLES.insert(1, "cross_site")


localrules:
    plan_json,
    compare,


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


rule plan_json:
    output:
        f"{RESULTS}/plan.json",
    params:
        runs=get_plan_dicts,
    log:
        f"{LOGS}/plan_json.log",
    run:
        from exabench.results import atomic_write_text

        atomic_write_text(output[0], json.dumps(params.runs, indent=1, sort_keys=True, default=str) + "\n")


rule compare:
    input:
        records=get_records,
        baseline=get_baseline_records,
        plan=f"{RESULTS}/plan.json",
    output:
        markdown=f"{RESULTS}/tables/comparison.md",
        tables=[
            report(
                f"{RESULTS}/tables/{name}.csv",
                caption=f"../report/table_{name}.rst",
                category="Tables",
                labels={"table": name},
            )
            for name in COMPARE_TABLES
        ],
        others=[f"{RESULTS}/tables/{name}.{ext}" for name in COMPARE_TABLES for ext in ("parquet", "md")],
    params:
        baseline=f"--baseline {BASELINE}" if BASELINE else "",
    log:
        f"{LOGS}/compare.log",
    shell:
        "{EXABENCH} compare --out {RESULTS}/tables --plan {input.plan} --site-name {SITE.name} {params.baseline} "
        "{input.records} {input.baseline} > {log} 2>&1"
