# Plots and pages for the HTML report. The report itself is Snakemake's:
#   snakemake --profile profiles/<site> --report results/<site>/report.html
# It collects every output marked report(): exabench's campaign page (summary, verdict, every picture
# the records support, inline), and the summary, comparison tables and
# acceptance verdicts as HTML pages (the report shows HTML in place; a CSV is only a download).
# The verdicts are part of `all` when the site has references (the failing `acceptance` target is not).
# REPORT_TABLES: common.smk; the pictures and their order: exabench.analysis.plots.PLOTS.


localrules:
    plots,
    campaign_page,
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
        # The index, not the pictures: which ones the records support is known once they are read.
        # The rule draws them beside it and removes the pictures an earlier campaign left there.
        get_plot_outputs(),
    log:
        f"{LOGS}/plots.log",
    run:
        pipeline.write_plots(
            [*get_records(), *input.baseline], input.nodes, input.plan, SITE, f"{RESULTS}/plots", log[0]
        )


# exabench's own page of the campaign: summary and verdict, the pictures inline, the tables. One file
# that opens without network; the Snakemake report shows it first.
rule campaign_page:
    input:
        summary=f"{RESULTS}/tables/summary.md",
        plots=get_plot_outputs()[0],
        studies=get_study_pictures,
        history=[f"{RESULTS}/history/pictures.json"] if HISTORY_STORE != "none" else [],
        nodes=get_node_acceptance_pictures,
        tables=[f"{RESULTS}/tables/{name}.md" for name in COMPARE_TABLES],
        verdicts=[f"{ACCEPTANCE}/verdicts.md"] if Path(REFERENCES).exists() else [],
    output:
        report(f"{RESULTS}/report/index.html", caption="../report/campaign.rst", category="Campaign"),
    log:
        f"{LOGS}/campaign_page.log",
    run:
        pipeline.campaign_page_job(input, output[0], log[0], SITE)
