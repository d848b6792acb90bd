"""What a scheduler module declares about itself (its FACTS), so that every per-scheduler table (how
a script is submitted, how its header names a queue or pins named nodes, how a job lists its nodes,
how the user's queued jobs are counted, how the executor plugin names resources, which rule book the
rehearsal's stand-in checks) is read from the modules, as launchers' facts are.

A scheduler is one module in exabench/campaign/schedulers/ with `FACTS = SchedulerFacts(...)` and,
where its facts say it has them:
- `request(site, layout, node_local) -> dict`: the AllocationRequest fields it sets beyond the
  site's own (SMT mode, GPUs asked for, LSF's -alloc_flags, an NVMe constraint); none: nothing more;
- `pinned(request, site, nodes) -> dict`: a header request placed on exactly `nodes` (FACTS.pin);
- `queue_key(site) -> str`: where the queue picked by size goes ("partition" unless the module says);
- `site_resources(site)` and `executor_resources(site, job) -> dict`: the Snakemake executor
  plugin's resources (FACTS.executor), `job` giving a run's JobAllocation from its wildcards;
- `rehearsal_book(site) -> str`: the stand-in's rule book, where the site picks one (PBS Pro or Torque);
- `HEADER`: its batch header template's text, for a scheduler whose template is not a file
  workflow/templates/batch/<name>.sh.j2 (which extends batch/base.sh.j2 and fills its `header` block).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerFacts:
    name: str               # the site file's `scheduler` value
    submit: str             # the shell words a batch script's path follows to submit it ("bsub <")
    directive: str          # the header lines' prefix ("#SBATCH"); "": no header
    queue: str              # how the header names the queue, in the scheduler's words
    node_list: str          # shell command printing the job's compute nodes, one per line, in allocation order
    queued_by_user: str = ""  # shell command: the user's jobs ($me) in queue $1, one line each ("": not counted)
    pin: str = ""           # how a job is placed on named nodes, with the page that documents it ("": refused)
    # The scheduler_options keys it reads (core_spec, cpu_freq, pbs_select, ...): another one set away
    # from its default is refused, not ignored (`extra` goes with any scheduler that has a directive).
    renders: frozenset = frozenset()
    asks_memory: bool = False  # the header and the executor ask for memory per node (allocation.memory_mb)
    executor: str = ""      # the Snakemake executor plugin submitting each run as a job ("": bundles only)
    rehearsal_book: str = ""  # the rehearsal stand-in's rule book for its submit command (rehearsal/rules/)
    launchers: tuple = ()   # launchers its allocations start beyond those that declare it (their FACTS.schedulers)
    # Its submit command runs the job to its end where it is started (bash): jobs meant to run side by
    # side (a confirmation round's suspects and controls) are then started in the background together.
    runs_in_foreground: bool = False
    # How a submitted job is held until others have ended, for a hand-submitted confirmation round's pairs:
    # (the submit command's option, "$cond" standing for the condition; one job's condition, printf's %s its
    # id; the joiner of several), and the user's unfinished jobs in any queue, one id per line (the jobs
    # that have ended are left out of the condition: a scheduler may refuse a dependency on a purged job).
    # (): pairs are sent with the rest.
    after: tuple = ()
    unfinished_by_user: str = ""

    @property
    def submit_tool(self) -> str:
        """The submit command's program (`bsub` of `bsub <`)."""
        return self.submit.split()[0]
