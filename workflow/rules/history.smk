# Every finished campaign lands in the results store (results/history.duckdb: docs/history.md).
# Part of `all` (it takes about a second); `results_store: none` in the config turns it off.
#   snakemake --profile profiles/<site> ingest      the same on its own
# The store is shared by every site and campaign under results/, so it is not a declared output
# (Snakemake would delete it before the rule runs): the rule writes a receipt naming what it added.
# HISTORY_STORE and get_history_outputs live in common.smk.


localrules:
    ingest,
    history_report,


rule ingest:
    input:
        table=RECORDS_TABLE,
    output:
        f"{RESULTS}/history/ingested.json",
    log:
        f"{LOGS}/ingest.log",
    params:
        store=HISTORY_STORE if HISTORY_STORE != "none" else "results/history.duckdb",
    run:
        pipeline.ingest_campaign(get_records(), params.store, output[0], log[0])


# The campaign against its site's history (same system): regression verdicts and the metric over
# time, in the HTML report beside the tables, and on the campaign page beside the other pictures.
rule history_report:
    input:
        f"{RESULTS}/history/ingested.json",
    output:
        markdown=f"{RESULTS}/history/regressions.md",  # in the report as report/regressions.html
        csv=f"{RESULTS}/history/regressions.csv",
        # the index of the history pictures (history-<benchmark>.png), drawn beside it where the store has data
        plot=f"{RESULTS}/history/pictures.json",
    log:
        f"{LOGS}/history_report.log",
    params:
        store=HISTORY_STORE,
    run:
        pipeline.history_report(params.store, input[0], SITE, output.csv, output.markdown, output.plot, log[0])
