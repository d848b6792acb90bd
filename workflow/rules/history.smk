# Every finished campaign lands in the results store (results/history.duckdb: docs/history.md).
# Part of `all` (it takes about a second); `results_store: none` in the config turns it off.
#   snakemake --profile profiles/<site> ingest      the same on its own
# The store is shared by every site and campaign under results/, so it is not a declared output
# (Snakemake would delete it before the rule runs): the rule writes a receipt naming what it added.
# HISTORY_STORE and get_history_outputs live in common.smk.


localrules:
    ingest,


rule ingest:
    input:
        records=get_records,
    output:
        f"{RESULTS}/history/ingested.json",
    params:
        store=HISTORY_STORE if HISTORY_STORE != "none" else "results/history.duckdb",
    log:
        f"{LOGS}/ingest.log",
    run:
        pipeline.ingest_campaign(list(input.records), params.store, output[0], log[0])
