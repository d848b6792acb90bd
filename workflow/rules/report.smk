# Plots and pages for the HTML report. The report itself is Snakemake's:
#   snakemake --profile profiles/<site> --report results/<site>/report.html
# It collects every output marked report(): the plots, and the summary, comparison tables and
# acceptance verdicts as HTML pages (the report shows HTML in place; a CSV is only a download).
# The verdicts are part of `all` when the site has references (the failing `acceptance` target is not).
# PLOTS and REPORT_TABLES: common.smk.


localrules:
    plots,
    report_tables,
    report_verdicts,
    report_regressions,


rule report_tables:
    input:
        [f"{RESULTS}/tables/{name}.md" for name in REPORT_TABLES],
    output:
        [
            report(
                f"{RESULTS}/report/{name}.html",
                caption=f"../report/table_{name}.rst",
                category="Tables",
                labels={"table": name},
            )
            for name in REPORT_TABLES
        ],
    log:
        f"{LOGS}/report_tables.log",
    run:
        pipeline.write_html_pages(list(input), list(output), log[0])


rule report_verdicts:
    input:
        f"{ACCEPTANCE}/verdicts.md",
    output:
        report(
            f"{RESULTS}/report/verdicts.html",
            caption="../report/acceptance.rst",
            category="Acceptance",
            labels={"table": "verdicts"},
        ),
    log:
        f"{LOGS}/report_verdicts.log",
    run:
        pipeline.write_html_pages(list(input), list(output), log[0])


rule report_regressions:
    input:
        f"{RESULTS}/history/regressions.md",
    output:
        report(
            f"{RESULTS}/report/regressions.html",
            caption="../report/regressions.rst",
            category="History",
            labels={"table": "regressions"},
        ),
    log:
        f"{LOGS}/report_regressions.log",
    run:
        pipeline.write_html_pages(list(input), list(output), log[0])


rule plots:
    input:
        table=RECORDS_TABLE,
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
        pipeline.write_plots(
            [*get_records(), *input.baseline], input.nodes, input.plan, SITE, f"{RESULTS}/plots", log[0]
        )
