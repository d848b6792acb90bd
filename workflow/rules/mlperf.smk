# MLPerf-HPC scores from the campaign's MLPerf logs (exabench/analysis/mlperf_scores.py):
#   Time To Solution  config/mlperf_submission.yaml: every benchmark at its required number of seeds
#     snakemake --profile profiles/<site> --configfile config/mlperf_submission.yaml
#   Throughput        config/mlperf_throughput.yaml: M instances started together in one allocation
#     snakemake --profile profiles/<site> throughput_bundle --configfile config/mlperf_throughput.yaml
#     sbatch|bsub|qsub|bash results/<site>/bundles/<campaign>.throughput.sh
#     snakemake --profile profiles/<site> --configfile config/mlperf_throughput.yaml
localrules:
    mlperf_scores,
    throughput_bundle,


rule mlperf_scores:
    input:
        table=RECORDS_TABLE,
    output:
        markdown=f"{RESULTS}/tables/mlperf.md",
        json=f"{RESULTS}/tables/mlperf.json",
    log:
        f"{LOGS}/mlperf_scores.log",
    params:
        mode=MLPERF_SCORES or "time_to_solution",
        prune=config.get("score_mlperf_prune", 0),
    run:
        pipeline.mlperf_score_tables(get_records(), f"{RESULTS}/tables", params.mode, params.prune, log[0])


rule throughput_bundle:
    input:
        rendered=RUN_FILES["rendered"],
    output:
        f"{RESULTS}/bundles/{config['campaign']}.throughput.sh",
    log:
        f"{LOGS}/throughput_bundle.log",
    params:
        plan=get_plan_digest,
    run:
        pipeline.write_bundle_script(
            list(RUNS.values()), SITE, RESULTS, config["campaign"], output[0], log[0], concurrent=True
        )
