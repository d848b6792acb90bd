# exabench: the pipeline index. Stages live in workflow/rules/, logic in the exabench package.
#   snakemake --profile profiles/<site>          run the campaign of config/config.yaml on a site
#   snakemake --profile profiles/<site> -n       list the planned runs
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/containers.smk"
include: "workflow/rules/render.smk"
include: "workflow/rules/run.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/bundle.smk"
include: "workflow/rules/models.smk"


rule all:
    input:
        get_final_outputs,
    default_target: True
