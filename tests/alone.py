"""The integration test modules that `make test` runs in a second pass, with no other test beside
them: they time what they judge, or start what there is one of per machine. The first pass runs the
rest, TEST_WORKERS at a time (Makefile; tests/conftest.py). `python3 tests/alone.py` prints their
paths (the Makefile)."""

ALONE = {
    "test_slurm.py": "starts the loopback Slurm's daemons (one set per machine)",
    "test_rehearsal.py": "rehearses Slurm sites on the loopback Slurm",
    "test_cluster_acceptance.py": "network namespaces with a slurmd each; judges nodes by measured speed",
    "test_every_node.py": "times node preparation against its budget",
    "test_faults.py": "signals process groups and waits on a campaign's progress",
    "test_orphans.py": "stops orphaned ranks by process group on this host",
    "test_regression_noise.py": "judges measured noise",
    "test_commmodel.py": "fits measured message times within an error bound",
    "test_perf_pipeline.py": "fits measured allreduce times within an error bound",
    # Campaigns of many runs that each keep both cores busy (2 ranks, or 1 rank of 2 threads): two of
    # them side by side oversubscribed 2 cores (measured: 909 s and 968 s, against 231 s and 175 s
    # each alone).
    "test_studies.py": "runs every study's tiny variants, dozens of 2-rank runs",
    "test_mlperf_scores.py": "runs the MLPerf time-to-solution campaign, 12 runs of 2 threads",
}


if __name__ == "__main__":
    print(" ".join(f"tests/integration/{name}" for name in ALONE))
