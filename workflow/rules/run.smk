# Execute each rendered job script; a record exists afterwards whatever happened
# (a failed benchmark is a result with status `failed`, not a pipeline error).
# With a cluster executor plugin (slurm, lsf) each run is one job whose resources come from
# the plan and the site (exabench/pipeline.py); the rule then runs the rendered launch
# line (srun/jsrun ...) inside that allocation. With no scheduler the dict is empty.
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
        script=f"{RESULTS}/runs/{{run_id}}/job.sh",
        spec=f"{RESULTS}/runs/{{run_id}}/spec.json",
    output:
        record=f"{RESULTS}/records/{{run_id}}.json",
    log:
        f"{LOGS}/runs/{{run_id}}.log",
    threads: get_run_threads
    resources:
        **pipeline.job_resources(SITE, get_run),
    run:
        pipeline.execute_run(input.spec, log[0], planned=list(RUNS))
