# One rendered job script + spec per run.


localrules:
    render,


rule render:
    output:
        script=f"{RESULTS}/runs/{{run_id}}/job.sh",
        spec=f"{RESULTS}/runs/{{run_id}}/spec.json",
    input:
        templates=RUN_TEMPLATES,
        images=CONTAINER_IMAGES,  # the digest check at render time needs the built image
    params:
        spec=get_run_spec_params,
    log:
        f"{LOGS}/render/{{run_id}}.log",
    run:
        pipeline.render_run(get_run(wildcards), SITE, RESULTS, log[0])
