"""Published studies as runnable artifacts (docs/studies.md): the catalogue in studies/, the campaign
each study runs on a site, and its table, each published figure beside the reproduced one.

A study file holds a campaign per site (`tiny` for local and slurm-local, a site's own variant, or
`default`) and its published figures, each with the source that prints it and the way the same
figure is computed from the study's records (`reproduce`). The verdict of a figure is one of
VERDICTS: a value is judged only on its own machine, from a checkable source (a seed line or a public
document's table), never where the catalogue has none or the figure says why it is not judged.
The inventory of the seeds (studies/seeds/inventory.yaml) lists every quantitative result of the seed
documents and the figure of the catalogue that carries it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from exabench import markdown
from exabench.analysis import scaling
from exabench.analysis.runs import workers_of
from exabench.campaign.plan import Run
from exabench.campaign.plan import expand as expand_runs
from exabench.campaign.site import Site
from exabench.config import REPO_ROOT, load_and_validate, validate
from exabench.errors import ConfigError
from exabench.records.record import workload_of
from exabench.records.tidy import load_records

CATALOGUE = REPO_ROOT / "studies"
SEEDS = CATALOGUE / "seeds"  # the seed documents (one .txt each) and their inventory
INVENTORY = SEEDS / "inventory.yaml"
# Sites where a study runs its `tiny` variant (unless the study has one named after the site).
TINY_SITES = ("local", "slurm-local")
ALL = "all"
# Layout keys a point may name; every other key of `at` / `baseline` is a benchmark parameter.
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
# Figures over another published figure: the other one's id is `of`.
OF_KINDS = ("over_figure", "figure_over")

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


# -- the catalogue -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Study:
    name: str
    path: str
    data: dict

    @property
    def figures(self) -> list[dict]:
        return self.data["published"]

    def machines(self) -> list[str]:
        return list(dict.fromkeys(f["machine"] for f in self.figures))


def load_study(path: str | Path) -> Study:
    """One study file, validated (schema, then the checks a schema cannot say), or ConfigError."""
    path = Path(path)
    where = str(path)
    data = load_and_validate(path, "study")
    if data["name"] != path.stem:
        raise ConfigError(where, "name", data["name"], f"the file's name, {path.stem!r}", "differs from the file name")
    # Every campaign, tiny included, measures the study's own workloads: another model's runs
    # reproduce none of its figures.
    reproduced = {f["reproduce"]["benchmark"] for f in data["published"]}
    for variant, camp in data["campaigns"].items():
        names = [b["name"] for b in camp["benchmarks"]]
        if not reproduced & set(names):
            raise ConfigError(
                where,
                f"campaigns.{variant}.benchmarks",
                names,
                f"at least one benchmark the study's figures reproduce ({', '.join(sorted(reproduced))})",
                "runs none of them",
            )
    ids = [f["id"] for f in data["published"]]
    for i, fig in enumerate(data["published"]):
        key = f"published[{i}]"
        if ids.count(fig["id"]) > 1:
            raise ConfigError(where, f"{key}.id", fig["id"], "an id given once per study", "is given twice")
        if fig["value"] is not None and "tolerance" not in fig:
            raise ConfigError(
                where, f"{key}.tolerance", None, "{relative: x} or {absolute: x} for a published value", "is missing"
            )
        rep = fig["reproduce"]
        if rep["kind"] in OF_KINDS:
            other = next((f for f in data["published"] if f["id"] == rep.get("of")), None)
            if other is None or other["value"] is None:
                raise ConfigError(
                    where,
                    f"{key}.reproduce.of",
                    rep.get("of"),
                    "the id of another figure of this study with a published value",
                    "names no such figure",
                )
        if rep["kind"] == "ratio" and "baseline" not in rep:
            raise ConfigError(where, f"{key}.reproduce.baseline", None, "the point divided by (a ratio)", "is missing")
        for part in ("at", "baseline"):
            for k in ("benchmark", "metric"):
                if part == "at" and k in rep.get(part, {}):
                    raise ConfigError(
                        where,
                        f"{key}.reproduce.at.{k}",
                        rep["at"][k],
                        f"reproduce.{k}, not inside `at`",
                        "is misplaced",
                    )
    return Study(data["name"], where, data)


def load_catalogue(directory: str | Path = CATALOGUE) -> dict[str, Study]:
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(
            str(directory), "(directory)", str(directory), "the study catalogue (studies/*.yaml)", "does not exist"
        )
    studies = [load_study(p) for p in sorted(directory.glob("*.yaml"))]
    return {s.name: s for s in studies}


def select(
    catalogue: dict[str, Study], wanted: str, where: str = "--config study", site: str | None = None
) -> list[Study]:
    """The studies `wanted` names: one name, several separated by commas, or `all` (those with a campaign
    for `site`)."""
    if wanted == ALL:  # every study that has a campaign for the site, when a site is given
        return [s for s in catalogue.values() if site is None or runs_on(s, site)]
    names = [w.strip() for w in str(wanted).split(",") if w.strip()]
    for name in names:
        if name not in catalogue:
            raise ConfigError(
                where,
                "study",
                name,
                f"{ALL!r} or one of {', '.join(sorted(catalogue))} (studies/*.yaml; docs/studies.md)",
                "is not a study of the catalogue",
            )
    return [catalogue[n] for n in dict.fromkeys(names)]


def runs_on(study: Study, site: str) -> bool:
    """Whether the study has a campaign for `site` (its own, `tiny` on local sites, or `default`)."""
    camps = study.data["campaigns"]
    return site in camps or site in TINY_SITES or "default" in camps


def variant_of(study: Study, site: str) -> str:
    """The campaign a study runs on `site`: the site's own, `tiny` on local and slurm-local, else `default`."""
    camps = study.data["campaigns"]
    if site in camps:
        return site
    if site in TINY_SITES:
        return "tiny"
    if "default" in camps:
        return "default"
    raise ConfigError(
        study.path,
        "campaigns",
        sorted(camps),
        f"a campaign named {site!r} or 'default' to run on site {site!r}",
        "has none for this site",
    )


def campaign_config(study: Study, variant: str, base: dict) -> dict:
    """The experiment config of one study on one site: the base config's settings with the study's
    campaign; validated as any config, errors naming the study file and variant."""
    camp = study.data["campaigns"][variant]
    # The study's campaign is exact: the base config's benchmarks and node scale do not apply.
    config = {k: v for k, v in base.items() if k not in ("benchmarks", "study", "scale")}
    config.update(
        campaign=f"study-{study.name}",
        benchmarks=[dict(b) for b in camp["benchmarks"]],
        preset=camp.get("preset", "tiny" if variant == "tiny" else "full"),
    )
    for key in ("repeats", "timeout_s"):
        if key in camp:
            config[key] = camp[key]
    return validate(config, "config", f"{study.path} (campaigns.{variant})")


def plan_studies(studies: list[Study], base: dict, site: Site) -> dict[str, list[Run]]:
    """Each study's runs on `site`. A run two studies share (same id) is planned once: both tables read
    it; two studies planning different runs under one id are refused."""
    out: dict[str, list[Run]] = {}
    seen: dict[str, tuple[str, dict]] = {}
    for study in studies:
        variant = variant_of(study, site.name)
        where = f"{study.path} (campaigns.{variant})"
        runs = expand_runs(campaign_config(study, variant, base), site, where)
        for run in runs:
            facts = {k: v for k, v in run.to_dict().items() if k != "campaign"}
            if run.run_id in seen and seen[run.run_id][1] != facts:
                raise ConfigError(
                    where,
                    "benchmarks",
                    run.benchmark,
                    f"the same run as {seen[run.run_id][0]} plans under that id, or a 'label' that tells them apart",
                    f"plans run '{run.run_id}' differently",
                )
            seen.setdefault(run.run_id, (study.path, facts))
        out[study.name] = runs
    return out


def horovod_runs(plans: dict[str, list[Run]]) -> list[str]:
    """The planned runs that train over Horovod (`backend: horovod`), each once."""
    return sorted({r.run_id for runs in plans.values() for r in runs if r.params.get("backend") == "horovod"})


def horovod_missing_message(plans: dict[str, list[Run]], site: str) -> str:
    """Where the studies run on this machine (local, slurm-local) and train over Horovod that this Python
    cannot import, the line to stop with before the campaign starts; "" otherwise. `make setup` does not
    build Horovod (a source build of several minutes); `make setup-horovod` does."""
    import importlib.util

    needing = horovod_runs(plans)
    if site not in TINY_SITES or not needing or importlib.util.find_spec("horovod") is not None:
        return ""
    studies = sorted(name for name, runs in plans.items() if any(r.run_id in needing for r in runs))
    return (f"{len(needing)} run(s) of {', '.join(studies)} train over Horovod, which this Python cannot import: "
            "needs `make setup-horovod` (builds it into .venv, several minutes; docs/studies.md), or name the "
            "other studies in --config study=")


def merged_runs(plans: dict[str, list[Run]], campaign: str) -> list[Run]:
    """One list of every study's runs, each id once, recorded under one campaign name."""
    import dataclasses

    runs: dict[str, Run] = {}
    for study_runs in plans.values():
        for run in study_runs:
            runs.setdefault(run.run_id, dataclasses.replace(run, campaign=campaign))
    return list(runs.values())


# -- reproducing a figure from records ---------------------------------------------------------


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
