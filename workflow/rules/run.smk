# Execute each rendered job script; a record exists afterwards whatever happened.


rule run_benchmark:
    input:
        script=f"{RESULTS}/runs/{{run_id}}/job.sh",
        spec=f"{RESULTS}/runs/{{run_id}}/spec.json",
    output:
        record=f"{RESULTS}/records/{{run_id}}.json",
    log:
        f"{LOGS}/runs/{{run_id}}.log",
    threads: get_run_threads
    shell:
        "{EXABENCH} execute --spec {input.spec} > {log} 2>&1 && tail -n 1 {log}"
