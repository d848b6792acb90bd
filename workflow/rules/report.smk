# Plots for the HTML report. The report itself is Snakemake's:
#   snakemake --profile profiles/<site> --report results/<site>/report.html
# It collects every output marked report(): the comparison tables, these plots, and the
# acceptance verdicts when the acceptance target has been run.
PLOTS = ["scaling", "precision", "allreduce", "nodes"]


localrules:
    plots,
    archive,


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
        nodes = ["--nodes", *input.nodes] if input.nodes else []
        pipeline.cli(["plots", "--out", f"{RESULTS}/plots", "--plan", input.plan, "--site-name", SITE.name,
                      *nodes, "--", *input.records, *input.baseline], log[0])


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
        argv=get_archive_argv,
    log:
        f"{LOGS}/archive.log",
    run:
        pipeline.cli(params.argv, log[0])
