"""Cobalt (ALCF Theta).

- Submit: `qsub script`, the script executable, its #COBALT lines read (ALCF Theta, "Job and
  Queue Scheduling": https://docs.alcf.anl.gov/theta/queueing-and-running-jobs/job-and-queue-scheduling/;
  the rehearsal's cobalt-alcf rule book keeps its rules).
- Queue: `#COBALT -q Q`.
- Pinning: not done: node groups are refused.
- Node list: `sort -u "$COBALT_NODEFILE"`.
- Executor: none; the campaign is submitted as bundles.
"""

from __future__ import annotations

from exabench.campaign.schedulers.facts import SchedulerFacts

FACTS = SchedulerFacts(name="cobalt", submit="qsub", directive="#COBALT", queue="-q Q",
                       node_list='sort -u "$COBALT_NODEFILE"', rehearsal_book="cobalt-alcf",
                       renders=frozenset({"cobalt_attrs"}))
