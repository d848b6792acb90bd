"""All records of a site -> one tidy table (a row per run and metric) and a Markdown summary.

Failed, timed-out and skipped runs keep their row, with the error, so a table never
has a silent hole; a file that is not a valid record (truncated, not JSON, the wrong shape,
named after another run) is a `corrupt` row naming the file and the reason, never an abort."""

from __future__ import annotations

import json
from pathlib import Path

from exabench import markdown
from exabench.records.record import LAYOUT, RecordError, corrupt_record, read_record, workload_of
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

# The run's energy over its timed region (exabench/energy), on every row of the run: joules and watts
# summed over its nodes, what they cover (node, or the parts: gpu, cpu_package, dram), and why they are
# empty where they are. The same figures are also metric rows (energy, power, <headline>_per_joule).
ENERGY_COLUMNS = ["energy_j", "power_w", "energy_covers", "energy_note"]
# The image each run ran in (provenance.container, which every runtime's exec line fills through
# EXABENCH_CONTAINER_*): empty for a native run.
CONTAINER_COLUMNS = ["container_runtime", "container_image", "container_digest"]
COLUMNS = ["run_id", "benchmark", "suite", "framework", "site", "preset", "repeat", "nodes", "ranks_per_node",
           "threads_per_rank", "gpus_per_rank", "ranks", "params", "swept", "status", "error", "metric", "value",
           "unit", "precision", "median", "std", "iqr", "n_samples", "higher_is_better", "headline", "communication",
           *ENERGY_COLUMNS, *CONTAINER_COLUMNS]


def records_to_rows(records: list[dict]) -> list[dict]:
    rows = []
    for rec in records:
        lay = rec.get("layout", {})
        base = {"run_id": rec["run_id"], "benchmark": rec["benchmark"], "suite": rec.get("suite"),
                "framework": rec.get("framework"), "site": rec.get("site"), "preset": rec.get("preset"),
                "repeat": rec.get("repeat"), **{k: lay.get(k) for k in (*LAYOUT, "ranks")},
                "params": json.dumps(rec.get("params", {}), sort_keys=True),
                "swept": json.dumps(rec.get("swept", {}), sort_keys=True),
                "status": rec["status"], "error": rec.get("error"), "headline": workload_of(rec)["headline"],
                "communication": json.dumps(workload_of(rec)["communication"], sort_keys=True),
                **energy_columns(rec), **container_columns(rec)}
        metrics = rec.get("metrics") or {}
        if not metrics:
            rows.append({**base, "metric": None, "value": None})
        for name, m in metrics.items():
            st = m.get("stats", {})
            rows.append({**base, "metric": name, "value": m["value"], "unit": m["unit"],
                         "precision": m.get("precision"), "median": st.get("median"), "std": st.get("std"),
                         "iqr": st.get("iqr"), "n_samples": st.get("n", 0),
                         "higher_is_better": m.get("higher_is_better")})
    return rows


def container_columns(rec: dict) -> dict:
    """The run's CONTAINER_COLUMNS: the runtime, image and digest its ranks ran in (None: native)."""
    container = (rec.get("provenance") or {}).get("container") or {}
    return {"container_runtime": container.get("runtime"), "container_image": container.get("image"),
            "container_digest": container.get("digest")}


def energy_columns(rec: dict) -> dict:
    """The run's ENERGY_COLUMNS: the timed region's figures, else the reason there are none."""
    energy = rec.get("energy")
    if not energy:
        return {"energy_j": None, "power_w": None, "energy_covers": None,
                "energy_note": "no energy section (a record from before exabench.energy/1, or a run that failed)"}
    timed = energy.get("timed") or {}
    return {"energy_j": timed.get("joules"), "power_w": timed.get("watts"),
            "energy_covers": "+".join(timed.get("covers") or []) or None,
            "energy_note": timed.get("reason") or energy.get("reason")}


def load_records(paths) -> list[dict]:
    """The records in `paths`; a file that is not a valid record gives its `corrupt` row
    (record.corrupt_record) in its place."""
    out = []
    for p in sorted(map(str, paths)):
        try:
            out.append(read_record(p))
        except RecordError as exc:
            out.append(corrupt_record(p, exc))
    return out


def tidy_table(records: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(records_to_rows(records), columns=COLUMNS)
    return df.sort_values(["benchmark", "run_id", "metric"], na_position="first", kind="stable").reset_index(drop=True)


SHOWN_ERROR_CHARS = 300  # what a summary line shows beyond the root cause, which is never cut


def shown_error(error) -> str:
    """A run's error on one summary line: the root cause always whole, what follows it trimmed.
    - a Python traceback shows its last line (the exception type and message), not the frames;
    - rank errors (execute._error_from: the root cause and where its traceback is, then the other
      ranks' errors, which are its consequences) keep the root cause and say that more follow;
    - a job's last output lines keep the last ones (the failure is at the end), as many as fit;
    - anything else is one message, shown whole."""
    if not isinstance(error, str):  # pandas 3 stores a missing error as NaN
        return ""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    frames = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if frames:
        lines = lines[: frames[0]] + lines[-1:]
    text = " ".join(lines)
    if len(text) > SHOWN_ERROR_CHARS:
        root, sep, rest = text.partition(" (traceback: ")
        if sep and ")" in rest:
            where, _, more = rest.partition(")")
            text = f"{root}{sep}{where})" + ("; more rank errors follow in results.csv" if more.strip("; ") else "")
        else:
            head, sep, tail = text.partition("last output: ")
            if sep:
                parts = tail.split(" | ")
                kept = [parts.pop()]
                while parts and len(head) + len(" | ".join([parts[-1], *kept])) < SHOWN_ERROR_CHARS:
                    kept.insert(0, parts.pop())
                text = head + sep + ("... | " if parts else "") + " | ".join(kept)
    return text.replace("|", "/")


def markdown_summary(df: pd.DataFrame, site: str) -> str:
    """One line per run: its headline figure (the first metric where its record names none), spread
    and status."""
    cells = []
    n_ok = 0
    # Plain dicts grouped in order of first appearance (as groupby(sort=False)): fast for 10^4 runs.
    by_run: dict[str, list[dict]] = {}
    cols = ["run_id", "benchmark", "swept", "metric", "value", "unit", "iqr", "n_samples", "status", "error",
            "headline"]
    for values in zip(*(df[c].tolist() for c in cols)):  # column lists: far faster than to_dict on arrow strings
        rec = dict(zip(cols, values))
        by_run.setdefault(rec["run_id"], []).append(rec)
    for run_id, g in by_run.items():
        want = g[0]["headline"]
        row = next((r for r in g if r["metric"] == want), g[0])
        n_ok += row["status"] == "ok"
        swept = ", ".join(f"{k}={v}" for k, v in json.loads(row["swept"]).items())
        err = shown_error(row["error"])
        # A run that is not ok has no figure: the status and the error say why.
        figure = [markdown.cell(row[c]) for c in ("value", "unit", "iqr", "n_samples")] if row["status"] == "ok" else [""] * 4
        cells.append([run_id, row["benchmark"], swept, markdown.cell(row["metric"]), *figure, row["status"], err])
    total = df["run_id"].nunique()
    lines = [f"# exabench results: site {site}", "",
             *markdown.table(["run", "benchmark", "swept", "figure", "value", "unit", "spread (IQR)", "n", "status",
                              "error"], cells)]
    lines += ["", f"{n_ok} of {total} runs ok, {total - n_ok} not ok."]
    return "\n".join(lines) + "\n"


def aggregate(record_paths, csv_path: str | Path, md_path: str | Path, site: str) -> pd.DataFrame:
    from exabench.io import atomic_write_text
    df = tidy_table(load_records(record_paths))
    atomic_write_text(csv_path, df.to_csv(index=False))
    atomic_write_text(md_path, markdown_summary(df, site))
    return df
