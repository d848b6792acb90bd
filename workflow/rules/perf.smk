# Performance models (docs/perf.md). Named targets, not part of `rule all`:
#   snakemake --profile profiles/local perf_validation perf_projection      (no runs needed)
#   snakemake --profile profiles/local perf --configfile config/perf.yaml  (runs the tiny campaign)
# Validation and projection read results/reference/published_scaling.yaml only; the fit and the local
# check read this site's records (through the campaign's table: common.smk, RECORDS_TABLE).
PERF = "results/perf"
REFERENCE = str(Path(workflow.basedir) / "results" / "reference" / "published_scaling.yaml")
# Open MPI's shared-memory transport changes protocol around here: fit one latency-bandwidth pair per side.
SPLIT_BYTES = 65536


localrules:
    perf_validation,
    perf_projection,
    perf_allreduce_sweep,
    perf_comm_fit,
    perf_site_comm,
    perf_fit,
    perf_local_check,
    perf,


rule perf_validation:
    input:
        REFERENCE,
    output:
        csv=f"{PERF}/validation.csv",
        markdown=f"{PERF}/validation.md",
    log:
        "logs/perf/validation.log",
    run:
        pipeline.write_validation(input[0], output.csv, output.markdown, log[0])


rule perf_projection:
    input:
        REFERENCE,
    output:
        csv=f"{PERF}/projection.csv",
        markdown=f"{PERF}/projection.md",
        plot=f"{PERF}/projection.png",
    log:
        "logs/perf/projection.log",
    run:
        pipeline.projection.write_projection(input[0], output.csv, output.markdown, output.plot, log[0])


rule perf_allreduce_sweep:
    # From the campaign's allreduce records when it has some, else a 2-rank mpi4py sweep on this machine.
    input:
        pipeline.allreduce_records(RUNS, RESULTS),
    output:
        f"{RESULTS}/perf/allreduce_sweep.csv",
    log:
        f"{LOGS}/perf/allreduce_sweep.log",
    run:
        pipeline.measure_allreduce_sweep(list(input), output[0], SITE, log[0])


rule perf_comm_fit:
    input:
        f"{RESULTS}/perf/allreduce_sweep.csv",
    output:
        markdown=f"{RESULTS}/perf/comm_fit.md",
        csv=f"{RESULTS}/perf/comm_fit.csv",
    log:
        f"{LOGS}/perf/comm_fit.log",
    run:
        pipeline.write_comm_fit(input[0], output.markdown, SPLIT_BYTES, log[0], csv=output.csv)


rule perf_site_comm:
    # The latency and bandwidth the model uses on this site: fitted (they win) or the site file's.
    input:
        pipeline.site_sweep(RUNS, RESULTS, SITE),
    output:
        csv=f"{RESULTS}/perf/comm_params.csv",
        markdown=f"{RESULTS}/perf/comm_params.md",
    log:
        f"{LOGS}/perf/site_comm.log",
    run:
        pipeline.write_site_comm(
            SITE, input[0] if input else None, output.csv, output.markdown, SPLIT_BYTES, log[0]
        )


rule perf_fit:
    input:
        f"{RESULTS}/tables/results.csv",
    output:
        markdown=f"{RESULTS}/perf/loglinear.md",
        effects=f"{RESULTS}/perf/effects.csv",
        predictions=f"{RESULTS}/perf/predictions.csv",
        loo=f"{RESULTS}/perf/loo.csv",
        speedups=f"{RESULTS}/perf/speedups.csv",
        measured=f"{RESULTS}/perf/measured_speedups.csv",
    log:
        f"{LOGS}/perf/fit.log",
    run:
        pipeline.write_loglinear(input[0], Path(output.markdown).parent, log=log[0])


rule perf_local_check:
    # The check reads each run's record (parameter count, load average) besides the table, which is
    # newer than every record (common.smk: RECORDS_TABLE), so that a changed record re-runs it.
    input:
        table=RECORDS_TABLE,
        sweep=f"{RESULTS}/perf/allreduce_sweep.csv",
    output:
        csv=f"{RESULTS}/perf/local_scaling.csv",
        markdown=f"{RESULTS}/perf/local_scaling.md",
    log:
        f"{LOGS}/perf/local_check.log",
    run:
        pipeline.write_local_check(
            input.table,
            input.sweep,
            get_records(),
            output.csv,
            output.markdown,
            SPLIT_BYTES,
            log[0],
            site=SITE,
        )


rule perf:
    input:
        rules.perf_validation.output,
        rules.perf_projection.output,
        rules.perf_comm_fit.output,
        rules.perf_site_comm.output,
        rules.perf_fit.output,
        rules.perf_local_check.output,
