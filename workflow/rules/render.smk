# Plan table and one rendered job script + spec per run.


localrules:
    plan,
    render,


rule plan:
    output:
        f"{RESULTS}/plan.csv",
    params:
        runs=lambda wildcards: [r.to_dict() for r in RUNS.values()],
    log:
        f"{LOGS}/plan.log",
    run:
        from exabench.plan import plan_table
        from exabench.results import atomic_write_text
        import pandas as pd

        atomic_write_text(output[0], pd.DataFrame(plan_table(list(RUNS.values()))).to_csv(index=False))


rule render:
    output:
        script=f"{RESULTS}/runs/{{run_id}}/job.sh",
        spec=f"{RESULTS}/runs/{{run_id}}/spec.json",
    input:
        templates=workflow.source_path("../templates/batch/base.sh.j2"),
    params:
        spec=get_run_spec_params,
    log:
        f"{LOGS}/render/{{run_id}}.log",
    run:
        from pathlib import Path
        from exabench.launch import RunPaths, write_run_files

        write_run_files(get_run(wildcards), SITE, RunPaths(Path(RESULTS), wildcards.run_id))
