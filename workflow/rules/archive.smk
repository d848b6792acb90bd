localrules:
    archive,


# A named target, not part of `all`: pack the finished campaign into one archive (the campaign of the
# results folder's plan.json only, with its studies' tables when --config study=... is given).
#   snakemake --profile profiles/<site> archive      then: exabench reproduce results/archives/<site>.tar.gz
rule archive:
    input:
        get_final_outputs,
        get_compare_outputs,
        get_plot_outputs,
        plan=f"{RESULTS}/plan.json",  # packed, and which runs are the campaign's
        baseline=get_baseline_records,
        studies=lambda wildcards: pipeline.study_outputs(RESULTS, STUDIES),
        # Brought up to date for this campaign (a `study` run does not write them): never another's.
        verdicts=(
            [f"{ACCEPTANCE}/{name}" for name in ("verdicts.md", "verdicts.csv", "junit.xml")]
            if Path(REFERENCES).exists()
            else []
        ),
    output:
        f"results/archives/{SITE.name}.tar.gz",
    log:
        f"{LOGS}/archive.log",
    params:
        references=REFERENCES if Path(REFERENCES).exists() else None,
        configs=list(map(str, workflow.configfiles)),
        rule_logs=get_archived_rule_logs,
    run:
        pipeline.archive_campaign(
            RESULTS,
            output[0],
            SITE,
            LOGS,
            params.configs,
            params.references,
            BASELINE,
            input.baseline,
            log[0],
            STUDIES,
            params.rule_logs,
        )
