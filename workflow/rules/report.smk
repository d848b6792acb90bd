# Plots for the HTML report. The report itself is Snakemake's:
#   snakemake --profile profiles/<site> --report results/<site>/report.html
# It collects every output marked report(): the comparison tables, these plots, and the
# acceptance verdicts when the acceptance target has been run.
PLOTS = ["scaling", "precision", "allreduce", "nodes"]


localrules:
    plots,


def get_node_records(wildcards=None):
    # Per-node records of a cluster-wide acceptance campaign (results/<site>/records/nodes/).
    return sorted(glob(f"{RESULTS}/records/nodes/*.json"))


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
        nodes=lambda wildcards, input: ("--nodes " + " ".join(input.nodes)) if input.nodes else "",
    log:
        f"{LOGS}/plots.log",
    shell:
        "{EXABENCH} plots --out {RESULTS}/plots --plan {input.plan} --site-name {SITE.name} {params.nodes} -- "
        "{input.records} {input.baseline} > {log} 2>&1"
