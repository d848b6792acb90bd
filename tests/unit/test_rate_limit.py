"""A local campaign drops Snakemake's default job-rate limiter (its timers multiply with the jobs
finished: pipeline.drop_default_rate_limit); a limit the user set, or a cluster's, stays."""

from __future__ import annotations

from types import SimpleNamespace

from snakemake.settings.types import MaxJobsPerTimespan

from exabench.pipeline import drop_default_rate_limit


def workflow(limit: str, local: bool):
    parsed = MaxJobsPerTimespan.parse_choice(limit)
    return SimpleNamespace(scheduling_settings=SimpleNamespace(max_jobs_per_timespan=parsed), local_exec=local,
                           scheduler=SimpleNamespace(job_rate_limiter=object()))


def test_only_the_default_limit_of_a_local_campaign_is_dropped():
    default_local = workflow("100/1s", local=True)
    assert drop_default_rate_limit(default_local) and default_local.scheduler.job_rate_limiter is None
    for kept in (workflow("10/1s", local=True), workflow("100/1m", local=True), workflow("100/1s", local=False)):
        assert not drop_default_rate_limit(kept) and kept.scheduler.job_rate_limiter is not None
