# Published studies (docs/studies.md): with `--config study=<name>` (or several, or `all`) the campaign
# is the studies' own for the site, and each study's table puts its published figures beside the
# reproduced ones:
#   snakemake --profile profiles/<site> study --config site=profiles/<site>/site.yaml study=<name>
#   -> results/<site>/tables/study-<name>.md|csv (the profile's site= is kept under --config)
try:
    STUDIES = pipeline.study_plans(config, SITE, CONFIG_FILE)
except pipeline.ExabenchError as exc:
    pipeline.stop(f"invalid study: {exc}")
HOROVOD_MISSING = pipeline.study_horovod_missing(STUDIES, SITE)
if HOROVOD_MISSING:
    pipeline.stop(HOROVOD_MISSING)
if pipeline.study_target_without_study(config, USER_ARGV):
    pipeline.stop(
        "the `study` target runs the studies named by --config study=<name> "
        "(several separated by commas, or all; docs/studies.md), and none is named"
    )


wildcard_constraints:
    study=r"[a-z0-9][a-z0-9-]*",


localrules:
    study_table,
    study,


rule study_table:
    input:
        get_study_records,
    output:
        markdown=f"{RESULTS}/tables/study-{{study}}.md",
        csv=f"{RESULTS}/tables/study-{{study}}.csv",
        # published against reproduced: drawn beside it (study-<name>.png) where the table supports it
        picture=f"{RESULTS}/plots/study-{{study}}.json",
    log:
        f"{LOGS}/study-{{study}}.log",
    run:
        study, variant, _ = STUDIES[wildcards.study]
        pipeline.write_study_table(
            study, variant, list(input), SITE, output.markdown, output.csv, output.picture, log[0]
        )


rule study:
    input:
        get_study_outputs,
