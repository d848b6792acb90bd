# Records (and the plan, so runs that left no record show as missing) -> comparison tables.
COMPARE_TABLES = ["site", "scaling", "threads_x_size", "precision_x_algorithm", "frameworks"]
BASELINE = config.get("baseline_site") or ""
if BASELINE:
    COMPARE_TABLES.insert(1, "cross_site")


localrules:
    plan_json,
    compare,


rule plan_json:
    output:
        f"{RESULTS}/plan.json",
    params:
        runs=get_plan_dicts,
    log:
        f"{LOGS}/plan_json.log",
    run:
        pipeline.write_plan_json(params.runs, output[0], log[0])


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
        baseline=["--baseline", BASELINE] if BASELINE else [],
    log:
        f"{LOGS}/compare.log",
    run:
        pipeline.cli(["compare", "--out", f"{RESULTS}/tables", "--plan", input.plan, "--site-name", SITE.name,
                      *params.baseline, *input.records, *input.baseline], log[0])
