# Execute each rendered job script; a record exists afterwards whatever happened
# (a failed benchmark is a result with status `failed`, not a pipeline error).


rule run_benchmark:
    input:
        script=f"{RESULTS}/runs/{{run_id}}/job.sh",
        spec=f"{RESULTS}/runs/{{run_id}}/spec.json",
    output:
        record=f"{RESULTS}/records/{{run_id}}.json",
    log:
        f"{LOGS}/runs/{{run_id}}.log",
    threads: get_run_threads
    run:
        pipeline.execute_run(input.spec, log[0])
