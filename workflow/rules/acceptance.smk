# Acceptance against the site's references (a named target, not part of `all`):
#   snakemake --profile profiles/<site> acceptance
# Verdicts and JUnit XML are always written; the `acceptance` rule then fails, naming the
# failing runs, when any run fails (so CI sees a non-zero exit and keeps the JUnit file).
# REFERENCES (the site's references.yaml unless the config names one): common.smk.
ACCEPTANCE = f"{RESULTS}/acceptance"


localrules:
    acceptance_verdicts,
    acceptance,
    every_node_script,
    every_node_groups,
    node_report,
    node_check,


rule acceptance_verdicts:
    input:
        records=get_records,
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
            input.records, input.references, input.plan, SITE, output.markdown, output.csv, output.junit, log[0]
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
# allocation, one launch per node in parallel. Render it, submit it (or run it with bash on
# the local profile), then check the nodes:
#   snakemake --profile profiles/<site> every_node_script   -> results/<site>/nodes/every-node.sh
#   sbatch results/<site>/nodes/every-node.sh               (or: bash ... on the local profile)
#   snakemake --profile profiles/<site> node_check          -> results/<site>/acceptance/nodes.md; fails
#                                                              when a node is flagged or none can be judged
rule every_node_script:
    input:
        get_single_node_specs,
    output:
        f"{RESULTS}/nodes/every-node.sh",
    log:
        f"{LOGS}/every_node_script.log",
    params:
        nodes=config.get("acceptance_nodes") or SITE.max_nodes,
    run:
        pipeline.write_node_sweep(list(RUNS.values()), SITE, RESULTS, params.nodes, output[0], log[0])


# One job per node (or node group) of the config's `every_node` key, each running in sequence every
# run planned on that many nodes; a run recorded before is skipped, so resubmitting runs what is missing:
#   snakemake --profile profiles/<site> every_node_groups   -> results/<site>/nodes/groups/<group>.sh, submit.sh
#   bash results/<site>/nodes/groups/submit.sh              (sbatch/bsub each group's script; bash on no scheduler)
#   snakemake --profile profiles/<site> node_check
rule every_node_groups:
    input:
        get_node_group_specs,
    output:
        scripts=[f"{RESULTS}/nodes/groups/{g.name}.sh" for g in NODE_GROUPS],
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
    log:
        f"{LOGS}/node_report.log",
    run:
        pipeline.node_report(input.nodes, input.references, SITE, output.markdown, output.csv, log[0])


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
