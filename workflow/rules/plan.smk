# The plan: one row per run (plan.csv for people, plan.json for the tables, which show planned
# runs without a record as missing).


localrules:
    plan,
    plan_json,


rule plan:
    output:
        f"{RESULTS}/plan.csv",
    log:
        f"{LOGS}/plan.log",
    params:
        plan=get_plan_digest,
    run:
        pipeline.write_plan(list(RUNS.values()), output[0], log[0])


rule plan_json:
    output:
        f"{RESULTS}/plan.json",
    log:
        f"{LOGS}/plan_json.log",
    params:
        plan=get_plan_digest,
    run:
        pipeline.write_plan_json(get_plan_dicts(), output[0], log[0])
