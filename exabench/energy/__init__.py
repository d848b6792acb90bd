"""Energy over a run's timed region and over the whole run, from the counters the machine really has.

One module per source, each importable without its vendor library (a missing library or file is a
reason, never an error): `nvml` (NVIDIA GPUs), `amd` (AMD GPUs through amdsmi), `powercap` (CPU
packages and DRAM through Linux powercap/RAPL), `cray` (HPE Cray `pm_counters`: node, CPU, memory,
accelerators) and `slurm` (`sacct`'s ConsumedEnergy after a job). `meter` holds the readers of one
rank and the regions they meter; `summary` turns every rank's readings into the record's `energy`
section and its energy metrics, without counting one device twice. See docs/energy.md.
"""

from exabench.energy.meter import Meter, activate, deactivate, open_meter, timed_region

__all__ = ["Meter", "activate", "deactivate", "open_meter", "timed_region"]
