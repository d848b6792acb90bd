"""Every rank's readings -> the record's `energy` section and its energy metrics.

No device is counted twice: a channel read by two ranks (a GPU they share, a node counter) is kept
once, from the lowest rank; and where two sources measure the same part of a node (NVML and Cray's
accel<N>_energy both measure a GPU), one source per part and node is used, in PREFERENCE order. A
node counter covers the others: the total is the node figure where every node has one, else the sum
of the parts that were measured, and the record names what it covers. Nothing is estimated: where
no source measured a region its joules are null, with the reason."""

from __future__ import annotations

from exabench.energy.source import implausible

FORMAT = "exabench.energy/1"
# Per domain, the sources in the order they are trusted: counters on the device before a board's view.
PREFERENCE = {"node": ("cray_pm",), "gpu": ("nvml", "amdsmi", "cray_pm"),
              "cpu_package": ("powercap", "cray_pm"), "dram": ("powercap", "cray_pm")}
PARTS = ("gpu", "cpu_package", "dram")
# What each source measures, in the record's words.
MEASURES = {"nvml": "GPU board (NVML total-energy counter, or its power sampled where the counter is absent)",
            "amdsmi": "GPU (amdsmi energy counter)",
            "powercap": "CPU package / DRAM (Linux powercap RAPL counters)",
            "cray_pm": "node, CPU, memory and accelerators (HPE Cray pm_counters)",
            "slurm": "the job's nodes (Slurm acct_gather_energy: ConsumedEnergy)"}


def _unique_channels(reports: list[dict]) -> list[dict]:
    seen, out = set(), []
    for rep in sorted(reports, key=lambda r: r["rank"]):
        for ch in rep["channels"]:
            key = (rep["host"], ch["source"], ch["device"])
            if key not in seen:
                seen.add(key)
                out.append({**ch, "host": rep["host"], "rank": rep["rank"]})
    return out


def _refuse_implausible(channels: list[dict]) -> list[dict]:
    """The channels with every region's joules that no device of its domain could draw in that time
    (a garbage reading from any source: source.implausible) made null, the reason as its error."""
    out = []
    for c in channels:
        whys = {region: implausible(c["domain"], c[region]["joules"], c[region]["seconds"])
                for region in ("timed", "run") if c[region].get("joules") is not None}
        whys = {region: why for region, why in whys.items() if why}
        if whys:
            c = {**c, **{region: {**c[region], "joules": None} for region in whys}}
            c["error"] = "; ".join(filter(None, [c.get("error")] + [f"{c['source']} {c['device']} {region}: {why}"
                                                                     for region, why in whys.items()]))
        out.append(c)
    return out


def _chosen(channels: list[dict]) -> list[dict]:
    """One source per domain and host, the first of PREFERENCE that has the domain there."""
    out = []
    for domain, order in PREFERENCE.items():
        for host in sorted({c["host"] for c in channels}):
            here = [c for c in channels if c["host"] == host and c["domain"] == domain]
            for source in order:
                picked = [c for c in here if c["source"] == source]
                if picked:
                    out += picked
                    break
    return out


def _region_total(chosen: list[dict], region: str, hosts: list[str]) -> dict:
    """Joules, watts and what they cover, for one region over all hosts."""
    by_domain = {}
    for domain in PREFERENCE:
        chs = [c for c in chosen if c["domain"] == domain and c[region]["entries"]]
        if not chs:
            continue
        errors = [c["error"] for c in chs if c.get("error")]
        joules = None if errors else sum(c[region]["joules"] for c in chs)
        by_domain[domain] = {"joules": joules, "devices": len(chs), "hosts": sorted({c["host"] for c in chs}),
                             "sources": sorted({c["source"] for c in chs}),
                             "seconds": max(c[region]["seconds"] for c in chs), "error": "; ".join(errors) or None}
    node = by_domain.get("node")
    if node and node["joules"] is not None and set(node["hosts"]) >= set(hosts):
        covers = ["node"]
    else:
        covers = [d for d in PARTS if d in by_domain and by_domain[d]["joules"] is not None]
    if not covers:
        reason = "; ".join(d["error"] for d in by_domain.values() if d["error"]) or "no source measured it"
        return {"joules": None, "watts": None, "seconds": None, "covers": [], "by_domain": by_domain,
                "reason": reason}
    joules = sum(by_domain[d]["joules"] for d in covers)
    seconds = max(by_domain[d]["seconds"] for d in covers)
    if joules <= 0:  # a counter that never stepped measured nothing: not zero joules
        return {"joules": None, "watts": None, "seconds": seconds, "covers": [], "by_domain": by_domain,
                "reason": f"the counters did not step during the region ({seconds:.3g} s): it is shorter than "
                          "their update period; time more iterations"}
    missing = sorted(set(hosts) - set().union(*(by_domain[d]["hosts"] for d in covers)))
    return {"joules": joules, "watts": joules / seconds if seconds > 0 else None, "seconds": seconds,
            "covers": covers, "by_domain": by_domain, "hosts_missing": missing, "reason": None}


def _source_rows(channels: list[dict]) -> list[dict]:
    """Per channel as the record keeps it: joules and watts per region, method, rate and coverage."""
    rows = []
    for c in channels:
        row = {k: c[k] for k in ("source", "domain", "device", "method", "host")}
        row["measures"] = MEASURES.get(c["source"], c["source"])
        for region in ("timed", "run"):
            r = c[region]
            j = r["joules"]
            row[region] = {"joules": j, "seconds": r["seconds"],
                           "watts": j / r["seconds"] if j is not None and r["seconds"] > 0 else None}
            if c["method"] == "sampling":
                hz = r["samples"] / r["seconds"] if r["seconds"] > 0 else None
                row[region]["sample_hz"] = hz
                # The share of the region the samples stand for at the nominal period (1: none missed).
                row[region]["coverage"] = (min(1.0, r["samples"] * c["sample_s"] / r["seconds"])
                                           if r["seconds"] > 0 else None)
                row[region]["samples"] = r["samples"]
        if c.get("error"):
            row["error"] = c["error"]
        if c.get("facts"):
            row["facts"] = c["facts"]
        rows.append(row)
    return rows


def summarise(reports: list[dict], hosts: list[str]) -> dict:
    """The record's `energy` section from every rank's Meter.report()."""
    channels = _refuse_implausible(_unique_channels(reports))
    unavailable = {}
    for rep in reports:
        for source, why in rep["unavailable"].items():
            if not any(c["source"] == source for c in channels):
                unavailable.setdefault(source, why)
    hosts = sorted(set(hosts) or {r["host"] for r in reports})
    if not channels:
        reason = "no energy source on this machine: " + "; ".join(f"{s}: {w}" for s, w in unavailable.items())
        return {"format": FORMAT, "measured": False, "reason": reason, "timed": None, "run": None,
                "sources": [], "unavailable": unavailable}
    chosen = _chosen(channels)
    regions = {r: _region_total(chosen, r, hosts) for r in ("timed", "run")}
    timed = regions["timed"]
    if not any(c["timed"]["entries"] for c in channels):
        timed["reason"] = "the benchmark marks no timed region: only the whole run is metered"
    return {"format": FORMAT, "measured": regions["run"]["joules"] is not None,
            "reason": regions["run"]["reason"], **regions, "sources": _source_rows(channels),
            "unavailable": unavailable}


# The metrics energy_metrics may add to any benchmark's record, and the suffix of its per-joule headline.
ENERGY_METRICS = ("energy", "power", "energy_run")
PER_JOULE = "_per_joule"


def energy_metrics(energy: dict, metrics: dict, headline: str | None) -> dict:
    """The energy figures as ordinary metrics (so tables, history and regression verdicts treat them
    like any other): `energy` and `power` over the timed region, `energy_run`, and the headline per
    joule where the headline is a rate (images/s -> images/J, TFLOP/s -> TFLOP/J). Only measured
    figures become metrics; the `energy` section says why the others are missing."""
    out = {}
    timed, run = energy.get("timed") or {}, energy.get("run") or {}
    covers = "+".join(timed.get("covers") or [])
    if timed.get("joules") is not None:
        out["energy"] = _metric(timed["joules"], "J", f"energy over the timed region ({covers}), summed over nodes")
        if timed.get("watts") is not None:
            out["power"] = _metric(timed["watts"], "W", f"average power over the timed region ({covers})")
    if run.get("joules") is not None:
        out["energy_run"] = _metric(run["joules"], "J", f"energy over the whole run ({'+'.join(run['covers'])})")
    head = metrics.get(headline) if headline else None
    if head and "power" in out and head.get("value") is not None and str(head.get("unit", "")).endswith("/s"):
        per_joule = head["value"] / out["power"]["value"]
        out[headline + PER_JOULE] = {
            **_metric(per_joule, head["unit"][:-2] + "/J",
                      f"{headline} / average power over the timed region ({covers})"),
            "higher_is_better": True}
    return out


def _metric(value: float, unit: str, description: str) -> dict:
    # One sample per run: repeats of a configuration pool into the samples a verdict compares.
    return {"value": value, "unit": unit, "samples": [value], "higher_is_better": False,
            "description": description}
