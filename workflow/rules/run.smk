# Execute each rendered job script; a record exists afterwards whatever happened
# (a failed benchmark is a result with status `failed`, not a pipeline error).
# With a cluster executor plugin (slurm, lsf) each run is one job whose resources come from
# the plan and the site (exabench/pipeline.py); the rule then runs the rendered launch
# line (srun/jsrun ...) inside that allocation. With no scheduler the dict is empty.
# Each run job is one light process, `exabench execute` (its Python: pipeline.run_job_environment): it
# imports what one run needs and not the workflow. It first renders its own job script and spec
# from its plan entry, unless they were rendered from the same sources (exabench/rendered.py), then
# runs it. Nothing that can need to run sits above the run jobs but the images they run in:
# Snakemake does not re-evaluate the jobs
# below a job that must run, so a campaign-wide render job above them hid a changed or forced run
# (its old record kept) whenever the campaign was rendered again. A run runs again when its own plan
# entry or a template changes (its params), or its image is rebuilt.
# A run holds runs/<run_id>/run.lock while it runs (a second execution is refused); SIGINT and
# SIGTERM to snakemake stop the running ranks and leave those runs without a record, so a
# resume runs only them (exabench/execute.py). A campaign claims its results directory
# (campaign.claim): a campaign of another checkout or working directory is refused while it runs.
# At the start: the campaign's run ids (the progress lines count against them), its plan for the job
# steps of an executor plugin (pipeline.save_plan: a job step does not expand it again), and the files
# of the runs about to run, rendered in one batch where their images exist (each job then renders
# nothing). Snakemake's job-rate limit is dropped in a local campaign and, where it stays (a
# cluster's), wakes the scheduler once a timespan rather than once more for every job ended.


onstart:
    try:
        pipeline.claim_results(RESULTS, workflow.basedir, workflow.configfiles)
    except pipeline.ExabenchError as exc:
        raise WorkflowError(f"exabench: {exc}") from None
    pipeline.stop_runs_on_signal(RESULTS, workflow)
    if pipeline.rerun_marker.is_rerun(USER_ARGV):  # `make rerun`: marked until a command ends well
        pipeline.rerun_marker.mark(RESULTS, USER_ARGV)
    if not pipeline.drop_default_rate_limit(workflow):  # a cluster's limit (or the user's) stays
        pipeline.one_pending_reevaluation(workflow)
    pipeline.write_run_ids(RESULTS, list(RUNS))
    pipeline.save_plan(RUNS, config, SITE)
    pipeline.render_runs_to_run(
        workflow.dag.needrun_jobs(), RUNS, SITE, RESULTS, CONTAINER_IMAGES, f"{LOGS}/render.log"
    )


rule run_benchmark:
    input:
        images=CONTAINER_IMAGES,
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
        run=get_run_json,
        templates=TEMPLATES_DIGEST,
    shell:
        pipeline.run_job_command(RESULTS, RUN_FILES["run_ids"])
