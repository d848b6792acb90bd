"""PBS Pro (ALCF Polaris, Aurora) and Torque (OLCF Titan: the site's scheduler_options.pbs_select: nodes).

- Submit: `qsub script` (PBS Pro and Torque qsub).
- Queue: `#PBS -q Q`.
- Pinning: not done (PBS selects nodes by resources, not by name here): node groups are refused.
- Node list: `sort -u "$PBS_NODEFILE"` (PBS_NODEFILE names each node once per rank slot).
- Executor: none; the campaign is submitted as bundles.
- Rehearsal: the stand-in's qsub checks Torque's rules (`-l nodes=`) or PBS Pro's (`-l select=`).
"""

from __future__ import annotations

from exabench.campaign.schedulers.facts import SchedulerFacts

FACTS = SchedulerFacts(name="pbs", submit="qsub", directive="#PBS", queue="-q Q",
                       node_list='sort -u "$PBS_NODEFILE"', rehearsal_book="pbspro-alcf",
                       renders=frozenset({"pbs_select", "pbs_select_extra", "pbs_resources"}))


def rehearsal_book(site) -> str:
    return "torque-olcf" if site.scheduler_options.get("pbs_select") == "nodes" else FACTS.rehearsal_book
