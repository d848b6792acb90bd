# Bundle mode: one batch script per allocation that runs the whole campaign in turn
# (avoids scheduler submit limits on large sweeps; the only mode for PBS/Cobalt/CSM sites).
#   snakemake --profile profiles/<site> bundle      render results/<site>/bundles/<campaign>.sh
#   sbatch|bsub|qsub results/<site>/bundles/<campaign>.sh
#   snakemake --profile profiles/<site>             afterwards: the records exist, only aggregation runs


localrules:
    bundle,


rule bundle:
    input:
        # (a list comprehension: common.smk's `expand` is exabench.plan.expand, not Snakemake's)
        scripts=[f"{RESULTS}/runs/{run_id}/job.sh" for run_id in RUNS],
        specs=[f"{RESULTS}/runs/{run_id}/spec.json" for run_id in RUNS],
    output:
        f"{RESULTS}/bundles/{config['campaign']}.sh",
    params:
        runs=lambda wildcards: [r.to_dict() for r in RUNS.values()],
    log:
        f"{LOGS}/bundle.log",
    run:
        from exabench.launch import write_bundle

        write_bundle(list(RUNS.values()), SITE, Path(RESULTS), config["campaign"], Path(output[0]))
