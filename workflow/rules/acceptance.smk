# Acceptance against the site's references (a named target, not part of `all`):
#   snakemake --profile profiles/<site> acceptance
# Verdicts and JUnit XML are always written; the `acceptance` rule then fails, naming the
# failing runs, when any run fails (so CI sees a non-zero exit and keeps the JUnit file).
REFERENCES = config.get("references") or str(Path(config["site"]).parent / "references.yaml")
ACCEPTANCE = f"{RESULTS}/acceptance"


localrules:
    acceptance_verdicts,
    acceptance,
    every_node_script,
    node_check,


rule acceptance_verdicts:
    input:
        records=get_records,
        plan=f"{RESULTS}/plan.json",
        references=REFERENCES,
    output:
        markdown=report(f"{ACCEPTANCE}/verdicts.md", caption="../report/acceptance.rst", category="Acceptance"),
        csv=f"{ACCEPTANCE}/verdicts.csv",
        junit=f"{ACCEPTANCE}/junit.xml",
    log:
        f"{LOGS}/acceptance_verdicts.log",
    shell:
        "{EXABENCH} accept --references {input.references} --plan {input.plan} --site-name {SITE.name} "
        "--markdown {output.markdown} --csv {output.csv} --junit {output.junit} {input.records} > {log} 2>&1"


rule acceptance:
    input:
        verdicts=f"{ACCEPTANCE}/verdicts.csv",
        junit=f"{ACCEPTANCE}/junit.xml",
    output:
        touch(f"{ACCEPTANCE}/accepted"),
    log:
        f"{LOGS}/acceptance.log",
    shell:
        "{EXABENCH} accept-check --verdicts {input.verdicts} 2>&1 | tee {log}"


# Cluster-wide acceptance: one job running every single-node run on every node of the
# allocation, one launch per node in parallel. Render it, submit it (or run it with bash on
# the local profile), then check the nodes:
#   snakemake --profile profiles/<site> every_node_script   -> results/<site>/nodes/every-node.sh
#   sbatch results/<site>/nodes/every-node.sh               (or: bash ... on the local profile)
#   snakemake --profile profiles/<site> node_check          -> results/<site>/acceptance/nodes.md
def get_single_node_specs(wildcards=None):
    return [f"{RESULTS}/runs/{run_id}/spec.json" for run_id, run in RUNS.items() if run.layout.nodes == 1]


rule every_node_script:
    input:
        get_single_node_specs,
    output:
        f"{RESULTS}/nodes/every-node.sh",
    params:
        nodes=config.get("acceptance_nodes") or SITE.max_nodes,
    log:
        f"{LOGS}/every_node_script.log",
    run:
        from exabench.node_sweep import render_node_sweep
        from exabench.results import atomic_write_text

        text = render_node_sweep(list(RUNS.values()), SITE, Path(RESULTS), params.nodes)
        atomic_write_text(output[0], text, mode=0o755)


rule node_check:
    input:
        nodes=get_node_records,
        references=REFERENCES,
    output:
        report(f"{ACCEPTANCE}/nodes.md", caption="../report/nodes.rst", category="Acceptance"),
    log:
        f"{LOGS}/node_check.log",
    shell:
        "{EXABENCH} nodes --report-only --references {input.references} --site-name {SITE.name} "
        "--markdown {output} {input.nodes} 2>&1 | tee {log}"
