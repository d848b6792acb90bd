# All records of the site -> tidy table and Markdown summary (printed at the end).


localrules:
    aggregate,


rule aggregate:
    input:
        get_records,
    output:
        csv=RECORDS_TABLE,
        markdown=f"{RESULTS}/tables/summary.md",
    log:
        f"{LOGS}/aggregate.log",
    run:
        pipeline.aggregate_site(list(input), output.csv, output.markdown, SITE, log[0])


onsuccess:
    pipeline.rerun_marker.clear(RESULTS)  # its records are one campaign's (common.smk checked)
    # a `study` run prints its own tables, not the summary and verdict of the campaign before it
    pipeline.print_summary(RESULTS, SITE, pipeline.study_tables_only(workflow.dag_settings, STUDIES, RESULTS))
