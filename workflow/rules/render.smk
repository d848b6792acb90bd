# One rendered job script + spec per run.


localrules:
    render,


rule render:
    input:
        templates=RUN_TEMPLATES,
        images=CONTAINER_IMAGES,  # the digest check at render time needs the built image
    output:
        script=f"{RESULTS}/runs/{{run_id}}/job.sh",
        spec=f"{RESULTS}/runs/{{run_id}}/spec.json",
    log:
        f"{LOGS}/render/{{run_id}}.log",
    params:
        spec=get_run_spec_params,
    run:
        pipeline.render_run(get_run(wildcards), SITE, RESULTS, log[0])
