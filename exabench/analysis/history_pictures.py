"""The history trend pictures (results/<site>/history/history-<benchmark>.png): per benchmark, the
headline figure each stored campaign of the site reported for each series (the median over its
repeats), and on the current campaign its regression verdict with the interval of its change
(exabench.analysis.history.regressions), the history's median and the noise floor around it. A
series one campaign ran is no trend and is not drawn; a benchmark with no trend is named in the
index with why."""

from __future__ import annotations

import math
import re
from pathlib import Path

from exabench.analysis.figures import NothingToDraw, finish, grid
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

MAX_PANELS = 12  # the series of a benchmark beyond these are named in its figure, not drawn
VERDICT_COLOURS = {"regressed": "C3", "improved": "C2", "unchanged": "C1", "insufficient data": "C7"}
NO_STORED_CAMPAIGN = "no stored campaign has an ok run of this site yet"
ONE_CAMPAIGN = "no series was run by two or more stored campaigns of this site yet (`make rerun`)"


def _number(value) -> float:
    return float(value) if value is not None and not pd.isna(value) else math.nan


def history_panels(history: pd.DataFrame, verdicts: pd.DataFrame | None, current: list[str]) -> list[dict]:
    """One panel per benchmark, series and metric that two or more stored campaigns ran: the
    campaigns in order (their start and median value), which of them are current, and the
    series' regression verdict (`verdicts`: history.regressions rows) with the interval of the
    current level it implies (the history's median times 1 + the change's interval) and the noise
    floor's band around that median. `history`: history.samples() rows."""
    if history.empty:
        return []
    judged = {}
    if verdicts is not None:
        judged = {(r["series"], r["metric"]): r for _, r in verdicts.iterrows()}
    panels = []
    for (bench, series, metric, unit), g in history.groupby(["benchmark", "series", "metric", "unit"], sort=True):
        per = g.groupby("campaign_id", sort=False).agg(started=("started", "min"), value=("value", "median"))
        per = per.sort_values("started").reset_index()
        if len(per) < 2:
            continue
        row = judged.get((series, metric))
        nan = math.nan
        panel = {"benchmark": bench, "series": series, "metric": metric, "unit": unit,
                 "campaigns": list(per["campaign_id"]), "started": list(per["started"]),
                 "values": [float(v) for v in per["value"]],
                 "current": [i for i, cid in enumerate(per["campaign_id"]) if cid in current],
                 "verdict": None, "change": nan, "change_ci": (nan, nan), "interval": (nan, nan), "floor_band": None,
                 "history_median": nan}
        if row is not None:
            base = _number(row["median_history"])
            lo, hi, floor = _number(row["ci_low"]), _number(row["ci_high"]), _number(row["floor"])
            panel.update(verdict=row["verdict"], change=_number(row["change"]), change_ci=(lo, hi),
                         history_median=base, interval=(base * (1 + lo), base * (1 + hi)),
                         floor_band=(base * (1 - floor), base * (1 + floor)) if floor == floor else None)
        panels.append(panel)
    return panels


def _title(p: dict) -> str:
    if p["verdict"] is None:
        return f"{p['series']}\nnot judged (no verdict for this campaign)"
    change = f", change {p['change']:+.0%}" if p["change"] == p["change"] else ""
    lo, hi = p["interval"]
    interval = f" in [{p['change_ci'][0]:+.0%}, {p['change_ci'][1]:+.0%}]" if lo == lo and hi == hi else ""
    return f"{p['series']}\n{p['verdict']}{change}{interval}"


def plot_benchmark_history(panels: list[dict], path) -> Path:
    """One benchmark's panels (history_panels): the campaigns' line, the history's median dotted with
    the noise floor shaded around it, and on the current campaign a ring and the interval of the
    verdict, both in the verdict's colour (red regressed, green improved, orange unchanged, grey
    insufficient data)."""
    drawn = panels[:MAX_PANELS]
    fig, axes = grid(len(drawn), 5.0, 3.2)
    for ax, p in zip(axes, drawn):
        xs = list(range(len(p["values"])))
        ax.plot(xs, p["values"], marker="o", ms=3, color="C0", label="campaign median")
        colour = VERDICT_COLOURS.get(p["verdict"], "C7")
        if p["history_median"] == p["history_median"]:
            ax.axhline(p["history_median"], ls=":", color="grey", lw=1, label="history median")
        if p["floor_band"]:
            ax.axhspan(*p["floor_band"], color="grey", alpha=0.15, label="noise floor")
        now = p["current"][-1:] or []
        for x in now:
            lo, hi = p["interval"]
            if lo == lo and hi == hi:
                ax.plot([x + 0.08] * 2, [lo, hi], color=colour, lw=3, label="interval of the change")  # a line: legend avoids it
            ax.plot(x, p["values"][x], "o", ms=10, mfc="none", mew=2, color=colour,
                    label=f"current: {p['verdict'] or 'not judged'}")
        ax.set_xticks(xs, [pd.Timestamp(s).strftime("%m-%d %H:%M") if not pd.isna(s) else "?" for s in p["started"]],
                      rotation=45, fontsize=6)
        ax.set_ylabel(f"{p['metric']} ({p['unit']})", fontsize=8)
        ax.set_title(_title(p), fontsize=8, color=colour if p["verdict"] in ("regressed", "improved") else "black")
        ax.legend(fontsize=6)
    if len(panels) > len(drawn):
        fig.text(0.5, 0.005, f"and {len(panels) - len(drawn)} more series (exabench history compare)",
                 ha="center", fontsize=8)
    return finish(fig, path, f"History of {panels[0]['benchmark']}: headline figure per campaign")


def file_name(benchmark: str) -> str:
    return "history-" + re.sub(r"[^A-Za-z0-9_.-]", "_", benchmark) + ".png"


def no_history(why: str, out_dir: str | Path) -> list[dict]:
    """The index's one line when there is no trend to draw (and no earlier campaign's picture left)."""
    for old in [*Path(out_dir).glob("history-*.png"), Path(out_dir) / "history.png"]:
        old.unlink(missing_ok=True)
    return [{"name": "history", "title": "History of each series", "file": None, "why": why}]


def history_pictures(history: pd.DataFrame, verdicts: pd.DataFrame | None, current: list[str],
                     out_dir: str | Path) -> list[dict]:
    """Index entries (plots.draw's): one picture per benchmark with a trend, or one line per benchmark
    without one and why; a single line when no benchmark has any. Removes the pictures an earlier
    campaign left in `out_dir` first."""
    from exabench.analysis.plots import draw

    out_dir = Path(out_dir)
    panels = history_panels(history, verdicts, current)
    if not panels:
        return no_history(NO_STORED_CAMPAIGN if history.empty else ONE_CAMPAIGN, out_dir)
    no_history("", out_dir)  # an earlier campaign's pictures: this one draws its own
    entries = []
    for bench in sorted(set(history["benchmark"])):
        mine = [p for p in panels if p["benchmark"] == bench]

        def draw_to(path, mine=mine):
            if not mine:
                raise NothingToDraw("one stored campaign ran it: no trend yet")
            return plot_benchmark_history(mine, path)

        entries.append(draw(f"history-{bench}", f"History of {bench}", draw_to, out_dir / file_name(bench)))
    return entries
