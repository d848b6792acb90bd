"""A study's published figures against their reproduction, as one picture (plots/study-<name>.png):
per figure with both numbers, the reproduced value as a ratio of the published one, inside its
tolerance band where the catalogue gives one, coloured by its verdict. Drawn only where the study's
table (exabench.analysis.studies.study_table) has such a figure; its index says why not otherwise."""

from __future__ import annotations

import math
from pathlib import Path

from exabench.analysis import studies
from exabench.analysis.figures import NothingToDraw, figure, finish
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

BAND = "#8fd48f"  # a light green the points (C2 within, C3 outside, C0 not judged) stand out on
VERDICT_COLOURS = {studies.WITHIN: "C2", studies.OUTSIDE: "C3"}  # the rest (shown, not judged): C0


def tolerance_band(tolerance: str, published: float) -> tuple[float, float] | None:
    """The band as ratios to the published value from the table's tolerance text (±10%, ±0.05)."""
    if not tolerance.startswith("±") or not published:
        return None
    text = tolerance[1:]
    half = float(text[:-1]) / 100 if text.endswith("%") else float(text) / abs(published)
    return 1 - half, 1 + half


def study_points(df: pd.DataFrame) -> list[dict]:
    """The figures the picture shows: a published and a reproduced value, and comparable (a tiny
    variant's runs are laptop scale: no figure of theirs is)."""
    points = []
    for _, r in df.iterrows():
        pub, rep = float(r["published"]), float(r["reproduced"])
        if math.isnan(pub) or math.isnan(rep) or pub == 0 or r["verdict"] == studies.TINY:
            continue
        points.append({"figure": r["figure"], "published": pub, "reproduced": rep, "unit": r["unit"],
                       "ratio": rep / pub, "band": tolerance_band(str(r["tolerance"] or ""), pub),
                       "verdict": r["verdict"]})
    return points


def why_not(df: pd.DataFrame) -> str:
    if df.empty:
        return "the study has no published figure"
    if (df["verdict"] == studies.TINY).all():
        return "the tiny variant's runs are laptop scale, not comparable with the published figures"
    return "no figure has both a published and a reproduced value"


def plot_study(df: pd.DataFrame, path) -> Path:
    """Reproduced / published per figure (1 = the published value), the tolerance band shaded, the
    point green within it, red outside, blue where the figure is not judged (the verdict says why)."""
    points = study_points(df)
    if not points:
        raise NothingToDraw(why_not(df))
    fig = figure((8.0, 1.4 + 0.45 * len(points)))
    ax = fig.subplots()
    ys = list(range(len(points)))[::-1]  # the table's first figure on top
    for y, p in zip(ys, points):
        if p["band"]:
            ax.barh(y, p["band"][1] - p["band"][0], left=p["band"][0], height=0.6, color=BAND, edgecolor="C2")
        colour = VERDICT_COLOURS.get(p["verdict"], "C0")
        ax.plot([1.0, p["ratio"]], [y, y], color=colour, lw=2)  # how far from the published value
        ax.plot(p["ratio"], y, "o", ms=9, color=colour, mec="black")
        unit = f" {p['unit']}" if p["unit"] not in ("", "1") else ""
        ax.annotate(f"{p['reproduced']:.3g} vs {p['published']:.3g}{unit}: {p['verdict']}", (p["ratio"], y),
                    fontsize=7, textcoords="offset points", xytext=(7, 4))
    ax.axvline(1.0, color="black", lw=1)
    ax.margins(x=0.3)  # room for the labels right of the points
    ratios = [p["ratio"] for p in points] + [b for p in points if p["band"] for b in p["band"]]
    if min(ratios) > 0 and max(ratios) / min(ratios) > 20:
        ax.set_xscale("log")  # one figure 50x off would squash every band into a line
    ax.set_yticks(ys, [p["figure"] for p in points], fontsize=7)
    ax.set_ylim(-0.8, len(points) - 0.2)
    ax.set_xlabel("reproduced / published (shaded: the tolerance band)")
    name = df["study"].iloc[0]
    left = len(df) - len(points)
    ax.set_title(f"Study {name}: {len(points)} of {len(df)} published figures reproduced"
                 + (f"\n({left} without both values or not comparable: tables/study-{name}.md)" if left else ""),
                 fontsize=9)
    return finish(fig, path)


def write_study_picture(csv: str | Path, index: str | Path) -> str:
    """The study table (tables/study-<name>.csv) -> its picture beside `index` (study-<name>.png) and
    the index (plots.draw's entry, JSON) saying it was drawn or why not; returns a one-line summary."""
    from exabench.analysis.plots import draw, write_index

    df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    index = Path(index)
    png = index.with_suffix(".png")
    png.unlink(missing_ok=True)  # an earlier campaign's, which this one may not support
    name = index.stem.removeprefix("study-")
    entry = draw(index.stem, f"Study {name}: published against reproduced", lambda p: plot_study(df, p), png)
    write_index([entry], index)
    return f"study picture -> {png}" if entry["file"] else f"study picture of {name} not drawn: {entry['why']}"
