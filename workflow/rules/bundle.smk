# Bundle mode: batch scripts that each run many runs of the campaign in turn in one allocation
# (avoids scheduler submit limits on large sweeps; the only mode for PBS/Cobalt/CSM sites). One
# script, <campaign>.sh, where a queue admits the whole campaign; else <campaign>-01-of-NN.sh ...,
# each fitting a queue (exabench.campaign.bundles; `exabench plan --bundle` shows them).
#   snakemake --profile profiles/<site> bundle      render the scripts under results/<site>/bundles/
#   sbatch|bsub|qsub results/<site>/bundles/<campaign>.sh   (split: each <campaign>-NN-of-NN.sh)
#   snakemake --profile profiles/<site>             afterwards: the records exist, only aggregation runs


localrules:
    bundle,


rule bundle:
    input:
        rendered=RUN_FILES["rendered"],
    output:
        pipeline.bundle_outputs(BUNDLES, RESULTS),
    log:
        f"{LOGS}/bundle.log",
    params:
        plan=get_plan_digest,
    run:
        pipeline.write_bundle_scripts(BUNDLES, SITE, RESULTS, config["campaign"], log[0])
