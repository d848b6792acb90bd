# Records (and the plan, so runs that left no record show as missing) -> comparison tables.
# BASELINE and COMPARE_TABLES: common.smk.


localrules:
    compare,


rule compare:
    input:
        table=RECORDS_TABLE,
        baseline=get_baseline_records,
        plan=f"{RESULTS}/plan.json",
    output:
        markdown=f"{RESULTS}/tables/comparison.md",
        tables=[f"{RESULTS}/tables/{name}.csv" for name in COMPARE_TABLES],
        others=[f"{RESULTS}/tables/{name}.{ext}" for name in COMPARE_TABLES for ext in ("parquet", "md")],
    log:
        f"{LOGS}/compare.log",
    run:
        pipeline.compare_tables(
            [*get_records(), *input.baseline], input.plan, SITE, BASELINE, f"{RESULTS}/tables", log[0]
        )
