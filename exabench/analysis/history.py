"""Queries over the results store (exabench.records.store): the campaigns, two selections
compared with aggregations, regression verdicts of a campaign against its history, and
references derived from history (docs/history.md).

A selection names campaigns with comma-separated terms, all of which must hold:
  latest, latest~N      the newest matching campaign (N before it)
  all                   every campaign
  <id>, campaign:<id>   a campaign id or a prefix of one
  name:<campaign>       the config's `campaign` name
  site:<site>           the site
  since:<date>, until:<date>   started on or after / before (ISO date or time, UTC)
  commit:<prefix>       the exabench git commit
  image:<prefix>        the container image digest (sha256:...)
  system:<prefix>       the system fingerprint
  last:N                the N newest matching campaigns
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from exabench.analysis import regression
from exabench.errors import ExabenchError
from exabench.io import atomic_write_text
from exabench.markdown import table as markdown_table
from exabench.records.store import DEFAULT_STORE, connect

TERMS = ("latest", "latest~N", "all", "<id>", "campaign:", "name:", "site:", "since:", "until:", "commit:", "image:",
         "system:", "last:")
AGGREGATES = ("count", "median", "mean", "std", "min", "max", "pN (percentile N, e.g. p5, p95)")
DEFAULT_AGGREGATES = ("count", "median", "mean", "p5", "p95")
CAMPAIGN_COLUMNS = ["campaign_id", "campaign", "site", "started", "system", "commit", "image", "runs", "ok", "failed"]


class SelectionError(ExabenchError):
    """A selection or aggregation a user wrote that cannot be read: names the term and what is valid."""


def campaigns(store: str | Path = DEFAULT_STORE) -> pd.DataFrame:
    """Every campaign in the store, oldest first."""
    con = connect(store, read_only=True)
    try:
        return con.sql("SELECT * FROM campaigns ORDER BY started NULLS FIRST, ingested_at, campaign_id").df()
    finally:
        con.close()


def _time(value: str, term: str) -> pd.Timestamp:
    try:
        t = pd.Timestamp(value)
    except ValueError:
        raise SelectionError(f"selection term {term!r}: {value!r} is not a date; valid: an ISO date or time "
                             "such as 2025-06-01 or 2025-06-01T12:00") from None
    return t.tz_convert("UTC").tz_localize(None) if t.tzinfo else t


def select(table: pd.DataFrame, selection: str) -> list[str]:
    """The campaign ids a selection names (oldest first); raises SelectionError on a bad term."""
    rows = table
    pick = None
    for term in [t.strip() for t in selection.split(",") if t.strip()] or ["latest"]:
        key, _, value = term.partition(":")
        if term == "all":
            continue
        if term == "latest" or term.startswith("latest~"):
            back = term.partition("~")[2] or "0"
            if not back.isdigit():
                raise SelectionError(f"selection term {term!r}: valid: latest or latest~N (N a whole number)")
            pick = ("latest", int(back))
        elif key == "last" and value:
            if not value.isdigit() or int(value) < 1:
                raise SelectionError(f"selection term {term!r}: valid: last:N with N >= 1")
            pick = ("last", int(value))
        elif value and key in ("campaign", "name", "site", "commit", "image", "system", "since", "until"):
            col = {"campaign": "campaign_id", "name": "campaign", "commit": "git_commit", "image": "image_digest",
                   "system": "system_fingerprint"}.get(key, key)
            if key == "since":
                rows = rows[rows["started"] >= _time(value, term)]
            elif key == "until":
                rows = rows[rows["started"] < _time(value, term)]
            elif key in ("campaign", "commit", "image", "system"):
                rows = rows[rows[col].fillna("").str.startswith(value)]
            else:
                rows = rows[rows[col] == value]
        elif ":" not in term:
            rows = rows[rows["campaign_id"].str.startswith(term)]
            if rows.empty:
                raise SelectionError(f"selection term {term!r} names no campaign; valid: {', '.join(TERMS)} "
                                     "(exabench history lists the campaign ids)")
        else:
            raise SelectionError(f"selection term {term!r} is not valid; valid: {', '.join(TERMS)}")
    ids = list(rows["campaign_id"])
    if pick and ids:
        kind, n = pick
        ids = ([ids[-1 - n]] if n < len(ids) else []) if kind == "latest" else ids[-n:]
    return ids


def campaign_table(table: pd.DataFrame) -> pd.DataFrame:
    """The campaigns as `exabench history` shows them."""
    if table.empty:
        return pd.DataFrame(columns=CAMPAIGN_COLUMNS)
    out = pd.DataFrame({
        "campaign_id": table["campaign_id"], "campaign": table["campaign"], "site": table["site"],
        "started": table["started"].dt.strftime("%Y-%m-%d %H:%M").fillna(""),
        "system": table["system_summary"].fillna("") + " [" + table["system_fingerprint"].fillna("-") + "]",
        "commit": table["git_commit"].fillna("").str[:10] + np.where(table["git_dirty"].fillna(False), "+dirty", ""),
        "image": table["image_digest"].fillna("native").str.replace("sha256:", "", regex=False).str[:12],
        "runs": table["runs"], "ok": table["ok"], "failed": table["failed"]})
    return out.reset_index(drop=True)


def samples(store: str | Path, campaign_ids: list[str], metric: str = "headline") -> pd.DataFrame:
    """One row per (record, metric) of ok runs of the campaigns: the record's columns, value, samples."""
    if not campaign_ids:
        return pd.DataFrame(columns=["campaign_id", "site", "benchmark", "series", "metric", "unit", "value",
                                     "higher_is_better", "samples", "params_hash", "started", "system_fingerprint"])
    where = "m.is_headline" if metric == "headline" else ("TRUE" if metric == "all" else "m.metric = ?")
    args = [] if metric in ("headline", "all") else [metric]
    con = connect(store, read_only=True)
    try:
        con.register("wanted", pd.DataFrame({"campaign_id": campaign_ids}))
        return con.execute(f"""
            SELECT r.campaign_id, r.site, r.benchmark, r.series, r.run_id, m.metric, m.unit, m.value,
                   m.higher_is_better, m.samples, r.params_hash, r.params, c.started, r.system_fingerprint
            FROM metrics m JOIN records r USING (record_id, content_hash)
                 JOIN campaigns c ON c.campaign_id = r.campaign_id
            WHERE r.status = 'ok' AND r.campaign_id IN (SELECT campaign_id FROM wanted) AND {where}
            ORDER BY c.started, r.series, m.metric""", args).df()
    finally:
        con.close()


def _values(group: pd.DataFrame) -> np.ndarray:
    """Pooled per-iteration samples of the group's records (a record without samples gives its value)."""
    out = []
    for value, s in zip(group["value"], group["samples"]):
        s = [x for x in (list(s) if s is not None else []) if x is not None and math.isfinite(x)]
        out += s if s else ([value] if value is not None and not pd.isna(value) else [])
    return np.asarray(out, dtype=float)


def aggregate(values: np.ndarray, name: str) -> float:
    if name == "count":
        return float(len(values))
    if not len(values):
        return float("nan")
    if name in ("median", "mean", "std", "min", "max"):
        return float(getattr(np, name)(values))
    if name.startswith("p") and name[1:].replace(".", "", 1).isdigit() and 0 <= float(name[1:]) <= 100:
        return float(np.percentile(values, float(name[1:])))
    raise SelectionError(f"aggregation {name!r} is not valid; valid: {', '.join(AGGREGATES)}")


def parse_aggregates(text: str | None) -> tuple[str, ...]:
    names = tuple(a.strip() for a in (text or ",".join(DEFAULT_AGGREGATES)).split(",") if a.strip())
    for name in names:
        aggregate(np.asarray([1.0]), name)  # raises on an unknown one
    return names


KEY = ["benchmark", "series", "metric", "unit"]


def check_metric(store: str | Path, metric: str) -> None:
    """A --metric must be headline, all or a metric some stored record has: a misspelt one would
    select nothing, and a CI gate on an empty table (`history regress --strict`) passes forever."""
    if metric in ("headline", "all"):
        return
    con = connect(store, read_only=True)
    try:
        names = [row[0] for row in con.execute("SELECT DISTINCT metric FROM metrics ORDER BY metric").fetchall()]
    finally:
        con.close()
    if metric not in names:
        raise SelectionError(f"--metric {metric}: no stored record in {store} has this metric; valid: headline, all, "
                             + (", ".join(names) or "(the store holds no metric yet)"))


def compare_selections(store: str | Path, a: str, b: str, metric: str = "headline",
                       aggregates: tuple[str, ...] = DEFAULT_AGGREGATES) -> pd.DataFrame:
    """Per benchmark, parameter set (series) and metric: each aggregation of selection A and of B,
    and the change of the median, B / A - 1 (like ReFrame's --performance-compare)."""
    check_metric(store, metric)
    table = campaigns(store)
    ids_a, ids_b = select(table, a), select(table, b)
    for sel, ids in ((a, ids_a), (b, ids_b)):
        if not ids:
            raise SelectionError(f"selection {sel!r} names no campaign in {store} (exabench history lists them)")
    sa, sb = samples(store, ids_a, metric), samples(store, ids_b, metric)
    keys = pd.concat([sa[KEY], sb[KEY]]).drop_duplicates().sort_values(KEY)
    rows = []
    for key in keys.itertuples(index=False):
        row = dict(zip(KEY, key))
        va = _values(sa[(sa[KEY] == list(key)).all(axis=1)])
        vb = _values(sb[(sb[KEY] == list(key)).all(axis=1)])
        for side, v in (("A", va), ("B", vb)):
            for name in aggregates:
                row[f"{side} {name}"] = aggregate(v, name)
        row["change"] = (float(np.median(vb) / np.median(va) - 1.0) if len(va) and len(vb) and np.median(va)
                         else float("nan"))
        rows.append(row)
    out = pd.DataFrame(rows, columns=KEY + [f"{s} {n}" for s in "AB" for n in aggregates] + ["change"])
    out.attrs.update({"A": a, "B": b, "A_ids": ids_a, "B_ids": ids_b})
    return out


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        return f"{x:.4g}"
    return str(x)


def to_markdown(df: pd.DataFrame, title: str,
                percent: tuple[str, ...] = ("change", "ci_low", "ci_high", "floor", "spread_run")) -> str:
    header = list(df.columns)
    unsigned = ("floor", "spread_run")  # sizes, not changes
    rows = [[((f"{v:.1%}" if c in unsigned else f"{v:+.1%}") if c in percent and isinstance(v, float)
              and not math.isnan(v) else _fmt(v))
             for c, v in zip(header, r)] for r in df.itertuples(index=False)]
    return f"# {title}\n\n" + "\n".join(markdown_table(header, rows)) + "\n"


def write_table(df: pd.DataFrame, title: str, csv: str | None = None, markdown: str | None = None) -> str:
    """The table as Markdown (returned, for the terminal) and, when asked, as CSV and Markdown files."""
    text = to_markdown(df, title)
    if csv:
        atomic_write_text(csv, df.to_csv(index=False))
    if markdown:
        atomic_write_text(markdown, text)
    return text


# --- regression verdicts -----------------------------------------------------------------------

REGRESSION_COLUMNS = ["site", "benchmark", "series", "metric", "unit", "verdict", "level", "n_current", "n_history",
                      "campaigns_current", "campaigns_history", "median_current", "median_history", "change", "ci_low",
                      "ci_high", "p_value", "p_adjusted", "effect", "spread_run", "spread_campaign", "floor", "detect",
                      "repeats_needed", "note", "params_differ", "summary"]


def _runs(group: pd.DataFrame) -> list[regression.Run]:
    """One regression.Run per record of the group: its campaign, its value (the run's summary) and steps."""
    return [regression.Run(cid, float(v) if v is not None and not pd.isna(v) else math.nan,
                           [float(x) for x in s] if s is not None else [])
            for cid, v, s in zip(group["campaign_id"], group["value"], group["samples"])]


def regressions(store: str | Path = DEFAULT_STORE, current: str = "latest", against: str | None = None,
                last: int | None = None, same_system: bool = True, metric: str = "headline",
                alpha: float = regression.ALPHA, min_change: float = regression.MIN_CHANGE,
                correction: str = "bh", seed: int = 0, detect: float = regression.DETECT,
                campaign_spread: float = regression.CAMPAIGN_SPREAD) -> pd.DataFrame:
    """Regression verdicts of the current selection's metrics against their history, run by run
    (exabench/analysis/regression.py: each run one sample, campaigns a level of their own).

    The history of a metric is the same site, series (run id without repeat) and metric in the
    `against` selection (default: every campaign that started before the current one), minus
    the current campaigns, limited to campaigns on the same system fingerprint unless
    `same_system` is off, and to the `last` N of them when given. `detect`: the change the
    repeats_needed column is sized for."""
    if correction not in regression.CORRECTIONS:
        raise SelectionError(f"correction {correction!r} is not valid; valid: {', '.join(regression.CORRECTIONS)}")
    for name, value in (("--alpha", alpha), ("--min-change", min_change), ("--detect", detect)):
        if not 0 < value < 1:
            raise SelectionError(f"{name} {value!r} is not valid; valid: a fraction between 0 and 1 (e.g. 0.05)")
    if not 0 <= campaign_spread < 1:
        raise SelectionError(f"--campaign-spread {campaign_spread!r} is not valid; valid: a fraction from 0 (campaigns "
                             "known not to differ) up to 1 (e.g. 0.05)")
    check_metric(store, metric)
    table = campaigns(store)
    cur_ids = select(table, current)
    if not cur_ids:
        raise SelectionError(f"selection {current!r} names no campaign in {store} (exabench history lists them)")
    first = table[table["campaign_id"].isin(cur_ids)]["started"].min()
    if against:
        hist_ids = [i for i in select(table, against) if i not in cur_ids]
    else:
        earlier = table[(table["started"] < first) | table["started"].isna()] if not pd.isna(first) else table
        hist_ids = [i for i in earlier["campaign_id"] if i not in cur_ids]
    cur, hist = samples(store, cur_ids, metric), samples(store, hist_ids, metric)
    rows, comps = [], []
    keys = cur[["site"] + KEY].drop_duplicates().sort_values(["site"] + KEY)
    for key in keys.itertuples(index=False):
        site, benchmark, series, name, unit = key
        c = cur[(cur["site"] == site) & (cur["series"] == series) & (cur["metric"] == name)]
        h = hist[(hist["site"] == site) & (hist["series"] == series) & (hist["metric"] == name)]
        if same_system:
            prints = set(c["system_fingerprint"].dropna())
            h = h[h["system_fingerprint"].isin(prints)]
        if last:
            keep = list(dict.fromkeys(h.sort_values("started")["campaign_id"]))[-last:]
            h = h[h["campaign_id"].isin(keep)]
        hib = c["higher_is_better"].dropna()
        comp = regression.compare_runs(_runs(c), _runs(h), bool(hib.iloc[0]) if len(hib) else True, alpha=alpha,
                                       min_change=min_change, detect=detect, seed=seed,
                                       campaign_spread=campaign_spread)
        comps.append(comp)
        rows.append({"site": site, "benchmark": benchmark, "series": series, "metric": name, "unit": unit,
                     "params_differ": _params_differ(c, h)})
    regression.judge_all(comps, alpha, correction)
    for row, comp in zip(rows, comps):
        row.update({k: v for k, v in comp.to_dict().items() if k != "higher_is_better"})
        row["summary"] = regression.describe(comp) + (f" (parameters differ: {row['params_differ']})"
                                                       if row["params_differ"] else "")
    out = pd.DataFrame(rows, columns=REGRESSION_COLUMNS)
    out.attrs.update({"current": current, "current_ids": cur_ids, "history_ids": hist_ids, "alpha": alpha,
                      "min_change": min_change, "correction": correction, "detect": detect,
                      "campaign_spread": campaign_spread})
    return out


def _params_differ(cur: pd.DataFrame, hist: pd.DataFrame) -> str:
    """The parameters whose values differ between the current runs and their history ('' if none):
    a series is the same run id, which does not name every parameter."""
    if hist.empty:
        return ""
    a = [json.loads(p) for p in cur["params"].unique()]
    b = [json.loads(p) for p in hist["params"].unique()]
    names = sorted({k for x in a for y in b for k in set(x) | set(y) if x.get(k) != y.get(k)})
    return ", ".join(names)


def regression_counts(df: pd.DataFrame) -> dict[str, int]:
    return {v: int((df["verdict"] == v).sum()) for v in regression.VERDICTS if (df["verdict"] == v).any()}


def regression_line(df: pd.DataFrame) -> str:
    counts = ", ".join(f"{n} {v}" for v, n in regression_counts(df).items()) or "no metrics"
    return (f"regression of {', '.join(df.attrs.get('current_ids', []))} against "
            f"{len(df.attrs.get('history_ids', []))} earlier campaign(s), run by run: {counts} "
            f"(alpha {df.attrs.get('alpha')}, {df.attrs.get('correction')} correction; a change below the noise "
            f"floor, max({df.attrs.get('min_change'):.0%}, {regression.FLOOR_SPREADS:g} spreads of one run), is "
            f"unchanged; `repeats for {df.attrs.get('detect', regression.DETECT):.0%}`: runs the next campaign "
            f"needs to detect that change, or the floor if larger, with power {regression.POWER:.0%})")


def write_regressions(df: pd.DataFrame, csv: str | None = None, markdown: str | None = None) -> str:
    detect = df.attrs.get("detect", regression.DETECT)
    shown = df[["site", "series", "metric", "verdict", "floor", "change", "ci_low", "ci_high", "p_adjusted",
                "level", "n_current", "n_history", "campaigns_history", "spread_run", "repeats_needed", "note"]]
    shown = shown.rename(columns={"repeats_needed": f"repeats for {detect:.0%}"})
    text = write_table(shown, "Regression verdicts", None, markdown)
    if csv:
        atomic_write_text(csv, df.to_csv(index=False))
    return text + "\n" + regression_line(df)


# --- references from history -------------------------------------------------------------------

def parse_band(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise SelectionError(f"--band {text!r} is not valid; valid: LOW,HIGH percentiles, e.g. 5,95") from None
    return lo, hi


def history_references(store: str | Path, site: str, selection: str | None = None, last: int = 10,
                       band: tuple[float, float] = (5.0, 95.0), min_tolerance: float = 0.05,
                       same_system: bool = True) -> tuple[list[dict], list[str]]:
    """References of `site` from its stored campaigns: per benchmark, headline metric and point
    (as `exabench references --from` groups them), the median of the pooled samples of the last
    `last` campaigns (on the newest campaign's system fingerprint unless `same_system` is off),
    with a tolerance band from the `band` percentiles (at least `min_tolerance` each side).
    Each entry's note names its campaigns and sample count. Returns (entries, campaign ids)."""
    from exabench.analysis.acceptance import reference_points, stored_records
    from exabench.records.record import headline_metric

    lo_pct, hi_pct = band
    if not 0 <= lo_pct < 50 < hi_pct <= 100:
        raise SelectionError(f"--band {lo_pct:g},{hi_pct:g} is not valid; valid: LOW,HIGH percentiles with "
                             "0 <= LOW < 50 < HIGH <= 100 (e.g. 5,95)")
    table = campaigns(store)
    table = table[table["site"] == site]
    ids = select(table, selection) if selection else list(table["campaign_id"])
    chosen = table[table["campaign_id"].isin(ids)]
    if same_system and not chosen.empty and chosen["system_fingerprint"].notna().any():
        newest = chosen.dropna(subset=["system_fingerprint"]).iloc[-1]["system_fingerprint"]
        chosen = chosen[chosen["system_fingerprint"] == newest]
    ids = list(chosen["campaign_id"])[-last:]
    if not ids:
        raise SelectionError(f"no stored campaign of site {site!r}"
                             + (f" in selection {selection!r}" if selection else "")
                             + f" in {store} (exabench history lists them)")
    records = stored_records(store, ids)
    out = []
    for (bench, key), rs in reference_points(records).items():
        metric = headline_metric(rs[0])
        ms = [(r, r["metrics"][metric]) for r in rs if metric in r["metrics"]]
        if not ms:
            continue
        values = np.asarray([s for _, m in ms for s in (m.get("samples") or [m["value"]]) if s is not None], float)
        med = float(np.median(values))
        lo, hi = (float(x) for x in np.percentile(values, [lo_pct, hi_pct]))
        used = sorted({r["_campaign_id"] for r, _ in ms})
        out.append({"benchmark": bench, "metric": metric, "params": json.loads(key),
                    "value": float(f"{med:.4g}"),
                    "lower": float(round(max(min_tolerance, 1 - lo / med), 4)) if med else min_tolerance,
                    "upper": float(round(max(min_tolerance, hi / med - 1), 4)) if med else min_tolerance,
                    "unit": ms[0][1]["unit"],
                    "note": f"history: median of {len(values)} samples from {len(used)} campaign(s) "
                            f"{', '.join(used)}; band p{lo_pct:g}..p{hi_pct:g}"})
    return out, ids
