# Records (and the plan, so runs that left no record show as missing) -> comparison tables.
BASELINE = config.get("baseline_site") or ""
COMPARE_TABLES = pipeline.compare_table_names(BASELINE)
REPORT_TABLES = ["summary", *COMPARE_TABLES]  # as HTML pages in the report (report.smk)


localrules:
    compare,


rule compare:
    input:
        records=get_records,
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
            [*input.records, *input.baseline], input.plan, SITE, BASELINE, f"{RESULTS}/tables", log[0]
        )
