# One rendered job script + spec per run.


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
        script=f"{RESULTS}/runs/{{run_id}}/job.sh",
        spec=f"{RESULTS}/runs/{{run_id}}/spec.json",
    log:
        f"{LOGS}/render/{{run_id}}.log",
    params:
        spec=get_run_spec_params,
    run:
        pipeline.render_run(get_run(wildcards), SITE, RESULTS, log[0])
