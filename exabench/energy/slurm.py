"""A Slurm job's energy after it ends: sacct's ConsumedEnergyRaw (joules), where the site gathers it.

Slurm fills ConsumedEnergy only when the cluster runs an acct_gather_energy plugin (rapl: CPU
packages and DRAM; ipmi: the node's BMC; pm_counters: HPE Cray nodes; gpu: NVML/RSMI), summed
over the job's nodes and over the job's whole allocation (set-up and tear-down included), so it is
the whole job's figure, not a timed region's. Its accuracy is the plugin's; sacct shows 0 or
nothing where no plugin gathers energy, which is a reason here, never zero joules."""

from __future__ import annotations

import subprocess

SOURCE = "slurm"
FIELDS = "JobIDRaw,ConsumedEnergyRaw,Elapsed,State"


def parse_sacct(job_id: str, text: str) -> dict:
    """sacct --parsable2 --noheader -o FIELDS for one job -> {joules, seconds, state} of the job's own
    line (its steps are inside it), or {joules: None, reason}."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 4 or parts[0] != str(job_id):
            continue
        raw, elapsed, state = parts[1].strip(), parts[2].strip(), parts[3].strip()
        if not raw.isdigit() or int(raw) == 0:
            return {"joules": None, "state": state,
                    "reason": f"sacct reports no ConsumedEnergy for job {job_id} ({raw or 'empty'}): the "
                              "cluster gathers no energy (AcctGatherEnergyType)"}
        return {"joules": float(raw), "seconds": _seconds(elapsed), "state": state, "reason": None}
    return {"joules": None, "reason": f"sacct has no line for job {job_id}"}


def _seconds(elapsed: str) -> float | None:
    """[D-]HH:MM:SS -> seconds."""
    days, _, clock = elapsed.rpartition("-")
    try:
        h, m, s = (int(x) for x in clock.split(":"))
    except ValueError:
        return None
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def job_energy(job_id: str, sacct: str = "sacct", timeout_s: float = 30) -> dict:
    """The job's ConsumedEnergy through sacct, as parse_sacct says, with its source and what it covers."""
    try:
        done = subprocess.run([sacct, "-j", str(job_id), "--noheader", "--parsable2", "-o", FIELDS],
                              capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"source": SOURCE, "joules": None, "reason": f"sacct did not run: {exc}"}
    if done.returncode != 0:
        return {"source": SOURCE, "joules": None,
                "reason": f"sacct failed ({done.returncode}): {done.stderr.strip()[:200]}"}
    return {"source": SOURCE, "domain": "node", "covers": "the job's whole allocation, every node",
            **parse_sacct(job_id, done.stdout)}
