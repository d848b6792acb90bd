"""python -m exabench.energy [--seconds S]: which energy sources this process can read, and what they
measure over S idle seconds (the record's `energy` section, as JSON); --slurm-job ID: a finished
Slurm job's ConsumedEnergy, through sacct."""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

from exabench.energy.meter import open_meter
from exabench.energy.slurm import job_energy
from exabench.energy.summary import summarise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exabench.energy", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="how long to meter (default 2)")
    ap.add_argument("--slurm-job", metavar="ID", help="print this finished job's energy from sacct instead")
    args = ap.parse_args(argv)
    if args.slurm_job:
        print(json.dumps(job_energy(args.slurm_job), indent=1, sort_keys=True))
        return 0
    meter = open_meter(every_gpu=True)
    with meter.region("run"), meter.region("timed"):
        time.sleep(max(0.0, args.seconds))
    meter.close()
    print(json.dumps(summarise([meter.report()], [socket.gethostname()]), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
