# Plots for the HTML report. The report itself is Snakemake's:
#   snakemake --profile profiles/<site> --report results/<site>/report.html
# It collects every output marked report(): the comparison tables, these plots, and the
# acceptance verdicts when the acceptance target has been run.
PLOTS = ["scaling", "precision", "allreduce", "nodes"]


localrules:
    plots,
    archive,


def get_nodes_option(wildcards, input):
    return ("--nodes " + " ".join(input.nodes)) if input.nodes else ""


def get_plot_outputs(wildcards=None):
    return [f"{RESULTS}/plots/{name}.png" for name in PLOTS]


rule plots:
    input:
        records=get_records,
        baseline=get_baseline_records,
        nodes=get_node_records,
        plan=f"{RESULTS}/plan.json",
    output:
        [
            report(f"{RESULTS}/plots/{name}.png", caption=f"../report/plot_{name}.rst", category="Plots")
            for name in PLOTS
        ],
    params:
        nodes=get_nodes_option,
    log:
        f"{LOGS}/plots.log",
    shell:
        "{EXABENCH} plots --out {RESULTS}/plots --plan {input.plan} --site-name {SITE.name} {params.nodes} -- "
        "{input.records} {input.baseline} > {log} 2>&1"


# A named target, not part of `all`: pack the finished campaign into one archive.
#   snakemake --profile profiles/<site> archive      then: exabench reproduce results/archives/<site>.tar.gz
rule archive:
    input:
        get_final_outputs,
        get_compare_outputs,
        get_plot_outputs,
        baseline=get_baseline_records,
    output:
        f"results/archives/{SITE.name}.tar.gz",
    params:
        configs=" ".join(map(str, workflow.configfiles)),
        baseline=f"--baseline {BASELINE}" if BASELINE else "",
        references=f"--references {REFERENCES}" if Path(REFERENCES).exists() else "",
    log:
        f"{LOGS}/archive.log",
    shell:
        "{EXABENCH} archive --results {RESULTS} --logs {LOGS} --site-name {SITE.name} --site {config[site]} "
        "--config {params.configs} {params.references} {params.baseline} --baseline-records {input.baseline} "
        "--out {output} > {log} 2>&1"
