# exabench: the pipeline index. Stages live in workflow/rules/, logic in the exabench package.
#   snakemake --profile profiles/<site>          run the site's campaign (profiles/<site>/campaign.yaml; local: config/config.yaml)
#   snakemake --profile profiles/<site> -n       list the planned runs
#   snakemake --profile profiles/<site> acceptance   verdicts against profiles/<site>/references.yaml
#   snakemake --profile profiles/<site> --report results/<site>/report.html   the HTML report
#   snakemake --profile profiles/<site> study --config study=<name>   a published study (docs/studies.md)
#   exabench run --profile profiles/<site> ...   the same, config and profile files checked first
#   exabench history                                  the campaigns in results/history.duckdb (docs/history.md)
from snakemake.utils import min_version

min_version("9.0")


# The campaign: config/config.yaml, or the user's --configfile alone (plus --config), never the user's
# file merged over the default (a config without `benchmarks:` would plan the default campaign).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/containers.smk"
include: "workflow/rules/render.smk"
include: "workflow/rules/run.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/bundle.smk"
include: "workflow/rules/mlperf.smk"
include: "workflow/rules/perf.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/acceptance.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/archive.smk"
include: "workflow/rules/history.smk"
include: "workflow/rules/studies.smk"


rule all:
    default_target: True
    input:
        get_final_outputs,
        get_compare_outputs,
        get_plot_outputs,
        get_report_outputs,
        get_history_outputs,
        get_mlperf_outputs,
        get_study_outputs,
