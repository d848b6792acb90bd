"""A local campaign drops Snakemake's default job-rate limiter (its timers multiply with the jobs
finished: pipeline.drop_default_rate_limit); a limit the user set, or a cluster's, stays, and wakes
the scheduler once a timespan, not once more for every job ended (pipeline.one_pending_reevaluation)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from snakemake.settings.types import MaxJobsPerTimespan

from exabench.pipeline import drop_default_rate_limit, one_pending_reevaluation


def workflow(limit: str, local: bool):
    parsed = MaxJobsPerTimespan.parse_choice(limit)
    return SimpleNamespace(scheduling_settings=SimpleNamespace(max_jobs_per_timespan=parsed), local_exec=local,
                           scheduler=SimpleNamespace(job_rate_limiter=object()))


def test_only_the_default_limit_of_a_local_campaign_is_dropped():
    default_local = workflow("100/1s", local=True)
    assert drop_default_rate_limit(default_local) and default_local.scheduler.job_rate_limiter is None
    for kept in (workflow("10/1s", local=True), workflow("100/1m", local=True), workflow("100/1s", local=False)):
        assert not drop_default_rate_limit(kept) and kept.scheduler.job_rate_limiter is not None


def scheduler_with_timers(limiter=True):
    asked = []
    scheduler = SimpleNamespace(job_rate_limiter=object() if limiter else None)
    scheduler._schedule_reevalutation = asked.append  # Snakemake's method: starts a timer per call
    return SimpleNamespace(scheduler=scheduler), asked


def test_a_kept_limit_has_one_wake_up_pending_at_a_time(monkeypatch):
    flow, asked = scheduler_with_timers()
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    assert one_pending_reevaluation(flow)
    for _ in range(50):  # the rounds of 50 jobs ended within the timespan: one timer
        flow.scheduler._schedule_reevalutation(1)
    assert asked == [1]
    clock[0] += 0.5
    flow.scheduler._schedule_reevalutation(1)
    assert asked == [1]
    clock[0] += 0.6  # the wake-up came: its round asks for the next one
    flow.scheduler._schedule_reevalutation(1)
    flow.scheduler._schedule_reevalutation(10)  # Snakemake's wait for queue input, within it: dropped
    assert asked == [1, 1]


def test_no_limit_or_an_unknown_scheduler_is_left_alone():
    flow, asked = scheduler_with_timers(limiter=False)
    assert not one_pending_reevaluation(flow)
    flow.scheduler._schedule_reevalutation(1)
    flow.scheduler._schedule_reevalutation(1)
    assert asked == [1, 1]
    assert not one_pending_reevaluation(SimpleNamespace(scheduler=SimpleNamespace(job_rate_limiter=object())))
    assert not one_pending_reevaluation(SimpleNamespace())
