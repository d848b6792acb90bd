# Every run's job script and spec, rendered in one job per campaign by the batch write (one
# Python process for the campaign, not one per run): the input of the bundle, every-node and
# throughput scripts (`snakemake ... render` renders them alone). Its declared output is a stamp
# (pipeline.run_file_outputs: Snakemake's bookkeeping of 20,000 declared files cost more than
# writing them); what reads the files renders again any deleted since (pipeline.rendered_runs).
# A run job renders its own two files (run.smk), so this job never sits above the run jobs.


localrules:
    render,


rule render:
    input:
        templates=RUN_TEMPLATES,
        # The digest check at render time needs the built image, except on a bundle site, whose
        # login node may have no container runtime: the image is built where the bundles run
        # (`snakemake --profile profiles/<site> containers` there) and checked at job start.
        images=[] if SITE.submit == "bundles" else CONTAINER_IMAGES,
    output:
        rendered=RUN_FILES["rendered"],
    log:
        f"{LOGS}/render.log",
    params:
        plan=get_plan_digest,
        site=SITE_DIGEST,
    run:
        pipeline.render_campaign(list(RUNS.values()), SITE, RESULTS, output.rendered, log[0])
