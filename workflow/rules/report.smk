# Plots for the HTML report. The report itself is Snakemake's:
#   snakemake --profile profiles/<site> --report results/<site>/report.html
# It collects every output marked report(): the comparison tables, these plots, and the
# acceptance verdicts when the acceptance target has been run.
PLOTS = pipeline.PLOTS


localrules:
    plots,


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
    log:
        f"{LOGS}/plots.log",
    run:
        pipeline.write_plots([*input.records, *input.baseline], input.nodes, input.plan, SITE,
                             f"{RESULTS}/plots", log[0])
