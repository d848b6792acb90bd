# Performance models (docs/models.md). Named targets, not part of `rule all`:
#   snakemake --profile profiles/local model_validation model_projection      (no runs needed)
#   snakemake --profile profiles/local --configfile config/models.yaml models  (runs the tiny campaign)
# Validation and projection read results/reference/published_scaling.yaml only; the fit and the local
# check read this site's records.
from exabench import perfmodel, projection

MODELS = "results/models"
REFERENCE = str(Path(workflow.basedir) / "results" / "reference" / "published_scaling.yaml")
# Open MPI's shared-memory transport changes protocol around here: fit one latency-bandwidth pair per side.
SPLIT_BYTES = 65536


localrules:
    model_validation,
    model_projection,
    model_allreduce_sweep,
    model_comm_fit,
    model_site_comm,
    model_fit,
    model_local_check,
    models,


rule model_validation:
    input:
        REFERENCE,
    output:
        csv=f"{MODELS}/validation.csv",
        markdown=f"{MODELS}/validation.md",
    log:
        "logs/models/validation.log",
    run:
        projection.write_validation(input[0], output.csv, output.markdown, log[0])


rule model_projection:
    input:
        REFERENCE,
    output:
        csv=f"{MODELS}/projection.csv",
        markdown=f"{MODELS}/projection.md",
        plot=f"{MODELS}/projection.png",
    log:
        "logs/models/projection.log",
    run:
        projection.write_projection(input[0], output.csv, output.markdown, output.plot, log[0])


rule model_allreduce_sweep:
    # From the campaign's allreduce records when it has some, else a 2-rank mpi4py sweep on this machine.
    input:
        projection.allreduce_records(RUNS, RESULTS),
    output:
        f"{RESULTS}/models/allreduce_sweep.csv",
    log:
        f"{LOGS}/models/allreduce_sweep.log",
    run:
        projection.write_sweep(list(input), output[0], SITE.python_executable, SITE.env, log[0])


rule model_comm_fit:
    input:
        f"{RESULTS}/models/allreduce_sweep.csv",
    output:
        markdown=f"{RESULTS}/models/comm_fit.md",
        csv=f"{RESULTS}/models/comm_fit.csv",
    log:
        f"{LOGS}/models/comm_fit.log",
    run:
        projection.write_comm_fit(input[0], output.markdown, SPLIT_BYTES, log[0], csv=output.csv)


rule model_site_comm:
    # The latency and bandwidth the model uses on this site: fitted (they win) or the site file's.
    input:
        projection.site_sweep(RUNS, RESULTS, SITE),
    output:
        csv=f"{RESULTS}/models/comm_params.csv",
        markdown=f"{RESULTS}/models/comm_params.md",
    log:
        f"{LOGS}/models/site_comm.log",
    run:
        projection.write_site_comm(SITE.path, input[0] if input else None, output.csv, output.markdown,
                                   SPLIT_BYTES, log[0])


rule model_fit:
    input:
        f"{RESULTS}/tables/results.csv",
    output:
        markdown=f"{RESULTS}/models/loglinear.md",
        effects=f"{RESULTS}/models/effects.csv",
        predictions=f"{RESULTS}/models/predictions.csv",
        loo=f"{RESULTS}/models/loo.csv",
        speedups=f"{RESULTS}/models/speedups.csv",
        measured=f"{RESULTS}/models/measured_speedups.csv",
    log:
        f"{LOGS}/models/fit.log",
    run:
        perfmodel.write_report(input[0], Path(output.markdown).parent, log=log[0])


rule model_local_check:
    input:
        table=f"{RESULTS}/tables/results.csv",
        sweep=f"{RESULTS}/models/allreduce_sweep.csv",
    output:
        csv=f"{RESULTS}/models/local_scaling.csv",
        markdown=f"{RESULTS}/models/local_scaling.md",
    log:
        f"{LOGS}/models/local_check.log",
    run:
        projection.write_local_check(input.table, input.sweep, output.csv, output.markdown, SPLIT_BYTES, log[0],
                                     site_path=SITE.path)


rule models:
    input:
        rules.model_validation.output,
        rules.model_projection.output,
        rules.model_comm_fit.output,
        rules.model_site_comm.output,
        rules.model_fit.output,
        rules.model_local_check.output,
