# The plan: one row per run (plan.csv for people, plan.json for the tables, which show planned
# runs without a record as missing).


localrules:
    plan,
    plan_json,


rule plan:
    output:
        f"{RESULTS}/plan.csv",
    params:
        runs=get_plan_params,
    log:
        f"{LOGS}/plan.log",
    run:
        pipeline.write_plan(list(RUNS.values()), output[0], log[0])


rule plan_json:
    output:
        f"{RESULTS}/plan.json",
    params:
        runs=get_plan_dicts,
    log:
        f"{LOGS}/plan_json.log",
    run:
        pipeline.write_plan_json(params.runs, output[0], log[0])
