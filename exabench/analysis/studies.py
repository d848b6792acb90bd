"""Published studies against their reproduction (docs/studies.md): each published figure of a study
(campaign.studies loads the catalogue and plans the campaigns) beside the same figure computed from
the study's records, with its verdict.

Each figure says the way the same figure is computed from the study's records (`reproduce`). The
verdict of a figure is one of VERDICTS: a value is judged only on its own machine, from a checkable
source (a seed line or a public document's table), never where the catalogue has none or the figure
says why it is not judged. The inventory of the seeds (studies/seeds/inventory.yaml) lists every
quantitative result of the seed documents and the figure of the catalogue that carries it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from exabench import markdown
from exabench.analysis import scaling
from exabench.analysis.runs import workers_of
from exabench.campaign.studies import Study
from exabench.records.record import workload_of
from exabench.records.tidy import load_records
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

POINT_LAYOUT = ("nodes", "ranks_per_node", "threads_per_rank", "gpus_per_rank", "smt", "ranks", "workers")
SCALE_KEYS = ("nodes", "ranks_per_node", "ranks", "workers")
TINY = "tiny, not comparable"
NO_VALUE = "no published value in the catalogue"
NOT_MEASURED = "not measured"
DIFFERENT_MACHINE = "different machine: not judged"
UNVERIFIED = "unverified: not judged"
NOT_JUDGED = "not judged"
WITHIN = "within tolerance"
OUTSIDE = "outside tolerance"
VERDICTS = (WITHIN, OUTSIDE, NOT_MEASURED, NO_VALUE, UNVERIFIED, NOT_JUDGED, DIFFERENT_MACHINE, TINY)

COLUMNS = [
    "study",
    "figure",
    "quantity",
    "published",
    "unit",
    "published_on",
    "published_layout",
    "source",
    "read_from_figure",
    "verified",
    "reproduced",
    "reproduced_on",
    "reproduced_at",
    "ratio",
    "tolerance",
    "tolerance_why",
    "verdict",
    "detail",
]


def record_rows(records: list[dict]) -> list[dict]:
    """One row per run and metric (ok runs with the metric only), with the run's point."""
    rows = []
    for rec in records:
        if rec.get("status") != "ok":
            continue
        lay = rec.get("layout") or {}
        facts = workload_of(rec)
        base = {
            "run_id": rec["run_id"],
            "benchmark": rec["benchmark"],
            "params": rec.get("params") or {},
            "scaling": facts["scaling"],
            "headline": facts["headline"],
            "workers": workers_of(lay),
            "ranks": int(lay.get("ranks") or lay["nodes"] * lay["ranks_per_node"]),
            **{k: int(lay.get(k) or 0) for k in ("nodes", "ranks_per_node", "threads_per_rank", "gpus_per_rank")},
            "smt": int(lay.get("smt") or 1),
        }
        for name, m in (rec.get("metrics") or {}).items():
            rows.append(
                {
                    **base,
                    "metric": name,
                    "value": float(m["value"]),
                    "stats": m.get("stats") or {},
                    "unit": m.get("unit", ""),
                    "higher_is_better": bool(m.get("higher_is_better", True)),
                }
            )
    return rows


def _matches(row: dict, point: dict) -> bool:
    for key, want in point.items():
        have = row.get(key) if key in POINT_LAYOUT else row["params"].get(key)
        if str(have) != str(want):
            return False
    return True


@dataclass
class Point:
    value: float
    unit: str
    workers: int
    threads: int
    nodes: int
    scaling: str
    higher_is_better: bool
    run_ids: list[str]
    ignored: dict


def find_point(
    rows: list[dict],
    benchmark: str,
    metric: str | None,
    point: dict,
    largest: bool,
    tiny: bool,
    statistic: str = "value",
) -> tuple[Point | None, str]:
    """The measured point: rows of `benchmark` and `metric` (default its headline) matching `point`; of
    several configurations the one with the most (`largest`) or fewest workers and threads, its repeats'
    median.
    On a tiny variant a key no row has is ignored (and named): tiny campaigns run smaller points.
    `statistic` other than `value` takes that statistic of the run's samples (`max` for a peak rate)."""
    mine = [r for r in rows if r["benchmark"] == benchmark]
    if not mine:
        return None, f"no ok run of {benchmark}"
    metric = metric or mine[0]["headline"]
    mine = [r for r in mine if r["metric"] == metric]
    if not mine:
        return None, f"the ok runs of {benchmark} report no metric {metric!r}"
    ignored = {}
    if tiny:
        for key, want in point.items():
            if not any(_matches(r, {key: want}) for r in mine):
                ignored[key] = want
    wanted = {k: v for k, v in point.items() if k not in ignored}
    hits = [r for r in mine if _matches(r, wanted)]
    if not hits:
        shown = ", ".join(f"{k}={v}" for k, v in wanted.items())
        return None, f"no ok run of {benchmark} at {shown}"
    # The most (or fewest) workers, then threads per rank; of several configurations left (a swept
    # parameter the point does not name) one, in a stable order.
    size = (max if largest else min)((r["workers"], r["threads_per_rank"]) for r in hits)
    hits = [r for r in hits if (r["workers"], r["threads_per_rank"]) == size]
    first_config = min(str(sorted(r["params"].items())) for r in hits)
    hits = [r for r in hits if str(sorted(r["params"].items())) == first_config]
    values = sorted(r["value"] if statistic == "value" else r["stats"].get(statistic, math.nan) for r in hits)
    median = float(pd.Series(values).median())
    first = hits[0]
    return Point(
        median,
        first["unit"],
        first["workers"],
        first["threads_per_rank"],
        first["nodes"],
        first["scaling"],
        first["higher_is_better"],
        sorted(r["run_id"] for r in hits),
        ignored,
    ), ""


def _series_point(at: dict) -> dict:
    """The default baseline of a scaling figure: `at` without its scale keys (the smallest run of the series)."""
    return {k: v for k, v in at.items() if k not in SCALE_KEYS}


def reproduce(fig: dict, rows: list[dict], figures: dict[str, dict], tiny: bool) -> tuple[float, str, str]:
    """(reproduced value or NaN, where it was measured, why not where it was not), in the figure's unit."""
    value, where, why = _reproduce(fig, rows, figures, tiny)
    return value * fig["reproduce"].get("scale", 1.0), where, why


def _reproduce(fig: dict, rows: list[dict], figures: dict[str, dict], tiny: bool) -> tuple[float, str, str]:
    rep = fig["reproduce"]
    kind, bench, metric = rep["kind"], rep["benchmark"], rep.get("metric")
    at = rep.get("at") or {}
    point, why = find_point(rows, bench, metric, at, largest=True, tiny=tiny, statistic=rep.get("statistic", "value"))
    if point is None:
        return math.nan, "", why
    where = f"{point.workers} workers x {point.threads} threads ({point.nodes} node(s))"
    if point.ignored:
        where += " [tiny: " + ", ".join(f"{k}={v}" for k, v in point.ignored.items()) + " not run]"
    if kind == "value":
        return point.value, where, ""
    if kind == "over_figure":
        return point.value / figures[rep["of"]]["value"], where, ""
    if kind == "figure_over":
        return figures[rep["of"]]["value"] / point.value, where, ""
    base_at = dict(rep.get("baseline") or {})
    base_bench = base_at.pop("benchmark", bench)
    base_metric = base_at.pop("metric", metric)
    if kind == "ratio":
        # Another benchmark's point is taken as the point is (largest); the same benchmark's other
        # point is the smaller one (a tiny run that has neither point still gives a ratio of two).
        base, why = find_point(rows, base_bench, base_metric, base_at, largest=base_bench != bench, tiny=tiny)
        if base is None:
            return math.nan, where, "baseline: " + why
        return point.value / base.value, f"{where} over {base.workers} workers x {base.threads} threads", ""
    base, why = find_point(rows, base_bench, base_metric, base_at or _series_point(at), largest=False, tiny=tiny)
    if base is None:
        return math.nan, where, "baseline: " + why
    if base.workers >= point.workers:
        return math.nan, where, f"one scale only ({point.workers} workers): no scaling to measure"
    fn = scaling.efficiency if kind == "efficiency" else scaling.speedup
    value = fn(point.value, base.value, point.workers, base.workers, point.scaling, point.higher_is_better)
    return value, f"{where} vs {base.workers} workers", ""


def within(published: float, reproduced: float, tolerance: dict) -> bool:
    if "absolute" in tolerance:
        return abs(reproduced - published) <= tolerance["absolute"]
    return abs(reproduced - published) <= tolerance["relative"] * abs(published)


def verdict(fig: dict, reproduced: float, site: str, tiny: bool) -> tuple[str, str]:
    """Judged (within or outside tolerance) only a published value from a checkable source, on the
    machine it was published on, measured; every other figure is shown with the reason it is not."""
    if tiny:
        return TINY, "the tiny variant runs the study's code path at laptop scale"
    if fig["value"] is None:
        return NO_VALUE, ""
    if not fig["verified"]:
        return UNVERIFIED, "no seed line or public table prints the value"
    if fig.get("not_judged"):
        return NOT_JUDGED, fig["not_judged"]
    if site != fig["machine"]:
        return DIFFERENT_MACHINE, f"reproduced on {site}, published on {fig['machine']}"
    if math.isnan(reproduced):
        return NOT_MEASURED, ""
    return (WITHIN, "") if within(fig["value"], reproduced, fig["tolerance"]) else (OUTSIDE, "")


def _tolerance_text(tol: dict | None) -> str:
    if not tol:
        return ""
    return f"±{tol['relative']:.0%}" if "relative" in tol else f"±{tol['absolute']:g}"


def source_text(src: dict) -> str:
    """The source as a reader checks it: document; place; seed file and line, or the address."""
    parts = [src["document"], src["place"]]
    if "seed" in src:
        parts.append(f"studies/seeds/{src['seed']}.txt line {src['line']}")
    if "url" in src:
        parts.append(src["url"])
    return "; ".join(parts)


def study_table(study: Study, records: list[dict], site: str, variant: str) -> pd.DataFrame:
    """Each published figure of `study` beside the one its records reproduce on `site`."""
    tiny = variant == "tiny"
    rows = record_rows(records)
    figures = {f["id"]: f for f in study.figures}
    out = []
    for fig in study.figures:
        value, where, why = reproduce(fig, rows, figures, tiny)
        v, detail = verdict(fig, value, site, tiny)
        if why and v not in (WITHIN, OUTSIDE):
            detail = "; ".join(filter(None, [detail, why]))
        published = fig["value"]
        # The ratio is shown wherever both numbers exist (tiny runs aside): a reader may read it, the
        # verdict says whether it is judged.
        ratio = value / published if published and not math.isnan(value) and v != TINY else math.nan
        out.append(
            {
                "study": study.name,
                "figure": fig["id"],
                "quantity": fig["quantity"],
                "published": math.nan if published is None else float(published),
                "unit": fig["unit"],
                "published_on": fig["machine"],
                "published_layout": fig["layout"],
                "source": source_text(fig["source"]),
                "read_from_figure": fig["read_from_figure"],
                "verified": fig["verified"],
                "reproduced": value,
                "reproduced_on": site + (" (tiny)" if tiny else ""),
                "reproduced_at": where,
                "ratio": ratio,
                "tolerance": _tolerance_text(fig.get("tolerance")),
                "tolerance_why": fig.get("tolerance_why", ""),
                "verdict": v,
                "detail": detail,
            }
        )
    return pd.DataFrame(out, columns=COLUMNS)


def study_markdown(study: Study, df: pd.DataFrame, site: str, variant: str, n_runs: int, n_ok: int) -> str:
    machines = ", ".join(study.machines())
    if variant == "tiny":
        scope = f"Reproduced on {site} with the tiny variant: **{TINY}** (published on {machines})."
    elif set(study.machines()) == {site}:
        scope = f"Reproduced on {site}, where it was published."
    else:
        scope = (
            f"Reproduced on {site}, published on {machines}: a figure is judged on its own machine only; "
            f"the others say **{DIFFERENT_MACHINE}** beside the reproduced value and the ratio."
        )
    cells = []
    for _, r in df.iterrows():
        published = markdown.cell(r["published"]) or NO_VALUE
        if r["read_from_figure"]:
            published += " (read from a figure)"
        if not r["verified"]:
            published += " (unverified)"
        cells.append(
            [
                r["figure"],
                r["quantity"],
                published,
                r["unit"],
                r["published_on"],
                markdown.cell(r["reproduced"]),
                r["reproduced_at"] or "",
                markdown.cell(r["ratio"]),
                r["tolerance"] + (f" ({r['tolerance_why']})" if r["tolerance_why"] else ""),
                r["verdict"],
                markdown.cell(r["detail"]),
            ]
        )
    lines = [
        f"# Study {study.name}: {study.data['title']}",
        "",
        scope,
        "",
        f"Campaign: variant `{variant}` of {study.path}, {n_runs} run(s), {n_ok} ok.",
        "",
        *markdown.table(
            [
                "figure",
                "quantity",
                "published",
                "unit",
                "published on",
                "reproduced",
                "reproduced at",
                "ratio",
                "tolerance (why)",
                "verdict",
                "detail",
            ],
            cells,
        ),
        "",
        "Sources:",
        "",
    ]
    lines += [f"- {r['figure']}: {markdown.cell(r['source'])}" for _, r in df.iterrows()]
    counts = df["verdict"].value_counts()
    lines += ["", "Verdicts: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v in counts) + "."]
    return "\n".join(lines) + "\n"


def write_study_table(
    study: Study, record_paths: list[str], site: str, variant: str, md_path: str | Path, csv_path: str | Path
) -> str:
    """tables/study-<name>.md and .csv (written together, atomically); returns a one-line summary."""
    from exabench.io import atomic_write_many

    records = load_records(record_paths)
    df = study_table(study, records, site, variant)
    n_ok = sum(r.get("status") == "ok" for r in records)
    md = study_markdown(study, df, site, variant, len(records), n_ok)
    atomic_write_many([(md_path, md, 0o644), (csv_path, df.to_csv(index=False), 0o644)])
    counts = df["verdict"].value_counts()
    return f"study {study.name} on {site} ({variant}): " + ", ".join(f"{n} {v}" for v, n in counts.items())
