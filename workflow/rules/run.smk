# Execute each rendered job script; a record exists afterwards whatever happened
# (a failed benchmark is a result with status `failed`, not a pipeline error).
# With a cluster executor plugin (slurm, lsf) each run is one job whose resources come from
# the plan and the site (exabench/pipeline.py); the rule then runs the rendered launch
# line (srun/jsrun ...) inside that allocation. With no scheduler the dict is empty.
# Each run job is one light process, `exabench execute` (its Python: pipeline.run_job_environment): it
# imports what one run needs and not the workflow. Its job script and spec come from the campaign's one render
# job and are read as `ancient`: the render job running again (a new run in the plan) does not run
# the finished runs again; a run whose own spec or templates changed does run again (its params).
# A run holds runs/<run_id>/run.lock while it runs (a second execution is refused); SIGINT and
# SIGTERM to snakemake stop the running ranks and leave those runs without a record, so a
# resume runs only them (exabench/execute.py). A campaign claims its results directory
# (campaign.claim): a campaign of another checkout or working directory is refused while it runs.


onstart:
    try:
        pipeline.claim_results(RESULTS, workflow.basedir, workflow.configfiles)
    except pipeline.ExabenchError as exc:
        raise WorkflowError(f"exabench: {exc}") from None
    pipeline.stop_runs_on_signal(RESULTS)


rule run_benchmark:
    input:
        script=ancient(f"{RESULTS}/runs/{{run_id}}/job.sh"),
        spec=ancient(f"{RESULTS}/runs/{{run_id}}/spec.json"),
        run_ids=ancient(RUN_FILES["run_ids"]),
    output:
        record=f"{RESULTS}/records/{{run_id}}.json",
    log:
        f"{LOGS}/runs/{{run_id}}.log",
    conda:
        "../envs/exabench.yaml"
    threads: get_run_threads
    resources:
        **pipeline.job_resources(SITE, get_run),
    params:
        run=get_run_spec_params,
    shell:
        'PYTHONPATH="$EXABENCH_ROOT${{PYTHONPATH:+:$PYTHONPATH}}" "$EXABENCH_PYTHON" -m exabench execute'
        " --spec {input.spec:q} --log {log:q} --planned {input.run_ids:q}"
