# Acceptance against the site's references (a named target, not part of `all`):
#   snakemake --profile profiles/<site> acceptance
# Verdicts and JUnit XML are always written; the `acceptance` rule then fails, naming the
# failing runs, when any run fails (so CI sees a non-zero exit and keeps the JUnit file).
# REFERENCES (the site's references.yaml unless the config names one): common.smk.
ACCEPTANCE = f"{RESULTS}/acceptance"
NO_REFERENCES = pipeline.acceptance_without_references(REFERENCES, bool(config.get("references")), SITE, USER_ARGV)
if NO_REFERENCES:
    pipeline.stop(NO_REFERENCES)


localrules:
    acceptance_verdicts,
    acceptance,
    every_node_script,
    every_node_groups,
    node_report,
    node_check,
    node_jobs,
    node_confirm,
    node_verdict,
    node_acceptance,


rule acceptance_verdicts:
    input:
        table=RECORDS_TABLE,
        plan=f"{RESULTS}/plan.json",
        references=REFERENCES,
    output:
        markdown=f"{ACCEPTANCE}/verdicts.md",  # in the report as report/verdicts.html
        csv=f"{ACCEPTANCE}/verdicts.csv",
        junit=f"{ACCEPTANCE}/junit.xml",
    log:
        f"{LOGS}/acceptance_verdicts.log",
    run:
        pipeline.accept_verdicts(
            get_records(), input.references, input.plan, SITE, output.markdown, output.csv, output.junit, log[0]
        )


rule acceptance:
    input:
        verdicts=f"{ACCEPTANCE}/verdicts.csv",
        junit=f"{ACCEPTANCE}/junit.xml",
    output:
        touch(f"{ACCEPTANCE}/accepted"),
    log:
        f"{LOGS}/acceptance.log",
    run:
        pipeline.accept_check(input.verdicts, log[0])


# Cluster-wide acceptance: one job running every single-node run on every node of the
# allocation, one launch per node in parallel (several jobs where runs need different allocations,
# Summit's smt1 and smt4, or more time than one job may have: every-node.sh then submits them).
# Render it, submit it (or run it with bash on the local profile), then check the nodes:
#   snakemake --profile profiles/<site> every_node_script   -> results/<site>/nodes/every-node.sh
#   sbatch|bsub|qsub results/<site>/nodes/every-node.sh     (or: bash ... on the local profile)
#   snakemake --profile profiles/<site> node_check          -> results/<site>/acceptance/nodes.md; fails
#                                                              when a node is flagged or none can be judged
# acceptance_nodes sets the allocation (default: the most nodes one job may have, the largest queue's).
rule every_node_script:
    input:
        RUN_FILES["rendered"],
    output:
        pipeline.node_sweep_outputs(list(RUNS.values()), SITE, RESULTS, config.get("acceptance_nodes") or 0),
    log:
        f"{LOGS}/every_node_script.log",
    params:
        nodes=config.get("acceptance_nodes") or 0,
    run:
        pipeline.write_node_sweep(list(RUNS.values()), SITE, RESULTS, params.nodes, output[-1], log[0])


# One job per node (or node group) of the config's `every_node` key, each running in sequence every
# run planned on that many nodes; a run recorded before is skipped, so resubmitting runs what is missing:
#   snakemake --profile profiles/<site> every_node_groups   -> results/<site>/nodes/groups/<group>.sh, submit.sh
#                                                              (<group>-NN-of-MM.sh where runs need several allocation modes)
#   bash results/<site>/nodes/groups/submit.sh              (sbatch/bsub < each group's script; bash on no scheduler)
#   snakemake --profile profiles/<site> node_check
rule every_node_groups:
    input:
        RUN_FILES["rendered"],
    output:
        scripts=pipeline.node_group_outputs(list(RUNS.values()), SITE, RESULTS, NODE_GROUPS),
        submit=f"{RESULTS}/nodes/groups/submit.sh",
    log:
        f"{LOGS}/every_node_groups.log",
    params:
        groups=get_node_groups_digest,
    run:
        pipeline.write_node_groups(list(RUNS.values()), SITE, RESULTS, NODE_GROUPS, config["campaign"], log[0])


rule node_report:
    input:
        nodes=get_node_records,
        references=get_references_if_any,  # outliers among peers need none
    output:
        markdown=report(f"{ACCEPTANCE}/nodes.md", caption="../report/nodes.rst", category="Acceptance"),
        csv=f"{ACCEPTANCE}/nodes.csv",
        # the same verdict as node_acceptance's: verdict.json, drain.txt, junit.xml, verdict.md, tests.csv
        json=f"{ACCEPTANCE}/nodes/verdict.json",
        drain=f"{ACCEPTANCE}/nodes/drain.txt",
    log:
        f"{LOGS}/node_report.log",
    run:
        pipeline.node_report_job(RUNS, RESULTS, input, output, log[0], SITE, config)


rule node_check:
    input:
        csv=f"{ACCEPTANCE}/nodes.csv",
        references=get_references_if_any,
    output:
        touch(f"{ACCEPTANCE}/nodes-accepted"),
    log:
        f"{LOGS}/node_check.log",
    run:
        pipeline.node_check(input.csv, input.references, log[0])


# Cluster-wide acceptance in one target (docs/acceptance.md): the every_node groups' jobs (single
# nodes, pair rounds, the whole allocation) submitted and followed; a dead node's runs are "not
# run: node down" and the next run of the target submits only what is missing. Then the verdict
# against peers (bad nodes, bad links, evidence), JUnit, drain list; the target fails when
# anything is flagged:
#   snakemake --profile profiles/slurm-cluster node_acceptance -> results/<site>/acceptance/cluster/
rule node_jobs:
    input:
        # submit.sh, written by the job that writes every group script (a rule's input list of one
        # item per group is checked item by item against the others: minutes at Frontier's 9,408)
        rules.every_node_groups.output.submit,
    output:
        f"{RESULTS}/nodes/groups/jobs.json",
    log:
        f"{LOGS}/node_jobs.log",
    params:
        missing=get_missing_node_runs,  # changes when runs are recorded: a rerun submits what is missing
    run:
        pipeline.run_node_groups(list(RUNS.values()), SITE, RESULTS, NODE_GROUPS, output[0], log[0])


# Screen, then confirm: every node the first pass flags is measured again, beside known-good nodes
# (controls) in the same round, as new runs (<run>.node-<node>.confirm-<round>); the verdict drains
# only what the round confirms (docs/acceptance.md).
rule node_confirm:
    input:
        f"{RESULTS}/nodes/groups/jobs.json",
    output:
        f"{RESULTS}/nodes/groups/confirm.json",
    log:
        f"{LOGS}/node_confirm.log",
    run:
        pipeline.node_confirm_job(RUNS, SITE, RESULTS, input, output, log[0], config)


rule node_verdict:
    input:
        jobs=f"{RESULTS}/nodes/groups/jobs.json",
        confirm=f"{RESULTS}/nodes/groups/confirm.json",
    output:
        markdown=report(f"{ACCEPTANCE}/cluster/verdict.md", caption="../report/node_verdict.rst", category="Acceptance"),
        json=f"{ACCEPTANCE}/cluster/verdict.json",
        csv=f"{ACCEPTANCE}/cluster/tests.csv",
        junit=f"{ACCEPTANCE}/cluster/junit.xml",
        drain=f"{ACCEPTANCE}/cluster/drain.txt",
    log:
        f"{LOGS}/node_verdict.log",
    run:
        pipeline.node_verdict_job(input, output, log[0], SITE, config, f"{ACCEPTANCE}/cluster")


rule node_acceptance:
    input:
        f"{ACCEPTANCE}/cluster/verdict.json",
    output:
        touch(f"{ACCEPTANCE}/cluster/accepted"),
    log:
        f"{LOGS}/node_acceptance.log",
    run:
        pipeline.node_acceptance_check(input[0], log[0])
