"""python -m exabench.energy [--seconds S]: which energy sources this process can read, and what they
measure over S idle seconds (the record's `energy` section, as JSON); --slurm-job ID: a finished
Slurm job's ConsumedEnergy, through sacct."""

from __future__ import annotations

import argparse
import json
import math
import re
import socket
import sys
import time

from exabench.energy.meter import open_meter
from exabench.energy.slurm import job_energy
from exabench.energy.summary import summarise


# A Slurm job id as sacct(1) -j takes it: 1234, an array task 1234_5, a heterogeneous job's
# component 1234+1, each with an optional step (.0, .batch, .extern).
SLURM_JOB_ID = re.compile(r"\d+(_\d+|\+\d+)?(\.(\d+|batch|extern))?")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not valid; valid: seconds >= 0, e.g. 2 or 0.5")
    return value


def _slurm_job(text: str) -> str:
    if not SLURM_JOB_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Slurm job id; valid: digits, e.g. 1234, an array "
                                         "task 1234_5 or a component 1234+1, optionally with a step (.0, .batch)")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exabench.energy", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=_seconds, default=2.0, help="how long to meter (default 2)")
    ap.add_argument("--slurm-job", metavar="ID", type=_slurm_job,
                    help="print this finished job's energy from sacct instead")
    # one line, as exabench's other refusals: the option, the value and what is valid (no usage block)
    ap.error = lambda message: ap.exit(2, f"{ap.prog}: error: {message}\n")
    args = ap.parse_args(argv)
    if args.slurm_job:
        print(json.dumps(job_energy(args.slurm_job), indent=1, sort_keys=True))
        return 0
    meter = open_meter(every_gpu=True)
    with meter.region("run"), meter.region("timed"):
        time.sleep(args.seconds)
    meter.close()
    print(json.dumps(summarise([meter.report()], [socket.gethostname()]), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
