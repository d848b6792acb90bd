# Bundle mode: one batch script per allocation that runs the whole campaign in turn
# (avoids scheduler submit limits on large sweeps; the only mode for PBS/Cobalt/CSM sites).
#   snakemake --profile profiles/<site> bundle      render results/<site>/bundles/<campaign>.sh
#   sbatch|bsub|qsub results/<site>/bundles/<campaign>.sh
#   snakemake --profile profiles/<site>             afterwards: the records exist, only aggregation runs


localrules:
    bundle,


rule bundle:
    input:
        scripts=expand(f"{RESULTS}/runs/{{run_id}}/job.sh", run_id=list(RUNS)),
        specs=expand(f"{RESULTS}/runs/{{run_id}}/spec.json", run_id=list(RUNS)),
    output:
        f"{RESULTS}/bundles/{config['campaign']}.sh",
    log:
        f"{LOGS}/bundle.log",
    params:
        runs=get_plan_params,
    run:
        pipeline.write_bundle_script(list(RUNS.values()), SITE, RESULTS, config["campaign"], output[0], log[0])
