"""Log-linear performance model fitted on result records (the Summit slides' model).

    log P = mu + site effect + workload effect + size effect + configuration effect + precision effect
            [+ two-factor interactions where every cell of the pair was measured]

P is a performance (a throughput, or 1 / time for a time metric: so every effect reads as a speedup
factor exp(effect), > 1 is faster). Factors are categorical with treatment coding against a baseline
level; the fit is ordinary least squares (numpy), the uncertainty the textbook one:
    var(mean at x0) = s^2 x0' (X'X)^-1 x0,  var(new observation) = s^2 (1 + x0' (X'X)^-1 x0),
with a Student-t interval on n - p degrees of freedom (none when the model is saturated).

Factors are read from the tidy table (exabench.records.tidy.tidy_table) by a spec per factor:
a column name (`site`, `benchmark`, `preset`, `precision`, ...), `param.<key>` for a resolved
benchmark parameter, `layout` (nodes x ranks per node x threads per rank, e.g. n1r2t1), or
`problem` (the preset plus every swept parameter other than layout and precision, e.g.
`tiny,rows_per_rank=10000`: the problem size as the campaign varied it).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from exabench.errors import ExabenchError
from exabench.records.record import LAYOUT
from exabench.lazy import lazy_import

np = lazy_import("numpy")
pd = lazy_import("pandas")

DEFAULT_FACTORS = {"site": "site", "workload": "benchmark", "size": "problem", "config": "layout",
                   "precision": "precision"}
# Swept keys that are not the problem size: the layout (its own factor) and the precision (its own).
NOT_SIZE_KEYS = (*LAYOUT, "precision", "dtype")


def _factor_value(row: pd.Series, spec: str) -> str:
    if spec == "layout":
        return f"n{int(row['nodes'])}r{int(row['ranks_per_node'])}t{int(row['threads_per_rank'])}"
    if spec == "problem":
        swept = json.loads(row["swept"]) if isinstance(row["swept"], str) else (row["swept"] or {})
        extra = [f"{k}={v}" for k, v in sorted(swept.items()) if k not in NOT_SIZE_KEYS]
        return ",".join([str(row["preset"])] + extra)
    if spec.startswith("param."):
        key = spec[len("param."):]
        params = json.loads(row["params"]) if isinstance(row["params"], str) else (row["params"] or {})
        if key not in params:
            raise ExabenchError(f"run {row['run_id']}: factor spec {spec!r}: params have no key {key!r}; valid: "
                                f"{', '.join(sorted(params))}")
        return str(params[key])
    if spec not in row.index:
        raise ExabenchError(f"factor spec {spec!r} is not a column of the tidy table; valid: layout, param.<key>, "
                            f"{', '.join(row.index)}")
    return str(row[spec])


def model_frame(df: pd.DataFrame, factors: dict[str, str] | None = None, metric: str | None = None) -> pd.DataFrame:
    """Tidy table -> one row per ok run: run_id, one column per factor, value, unit, log_perf.

    The metric is `metric` if given, else the benchmark's headline (the table's `headline` column, from
    its records), else `throughput`. Time metrics (higher_is_better False) enter as log(1 / value)."""
    factors = factors or DEFAULT_FACTORS
    rows = []
    ok = df[df["status"] == "ok"]
    for bench, g in ok.groupby("benchmark", sort=True):
        named = g["headline"].dropna() if "headline" in g else pd.Series(dtype=object)
        want = metric or (str(named.iloc[0]) if len(named) else "throughput")
        sel = g[g["metric"] == want]
        if sel.empty:
            raise ExabenchError(f"benchmark {bench}: no metric {want!r} in its records; valid: "
                                f"{', '.join(sorted(set(g['metric'].dropna())))}")
        for _, r in sel.iterrows():
            v = float(r["value"])
            if not v > 0:
                continue  # log undefined: such a run cannot inform a multiplicative model
            higher = r["higher_is_better"]
            higher = True if higher is None or (isinstance(higher, float) and np.isnan(higher)) else bool(higher)
            rows.append({"run_id": r["run_id"], **{f: _factor_value(r, s) for f, s in factors.items()},
                         "metric": want, "value": v, "unit": r["unit"], "higher_is_better": higher,
                         "log_perf": float(np.log(v) if higher else -np.log(v))})
    if not rows:
        raise ExabenchError("model_frame: no ok run with a positive value of the chosen metric")
    return pd.DataFrame(rows)


@dataclass
class LogLinearModel:
    factors: list[str]               # factors in the model (those with more than one level)
    constant: dict[str, str]         # factors with one level only (absorbed in the intercept)
    levels: dict[str, list[str]]     # baseline first
    terms: list[tuple]               # ("intercept",), (factor, level), (f1, l1, f2, l2)
    coef: np.ndarray
    cov_unscaled: np.ndarray         # (X'X)^-1 on the kept columns
    sigma2: float                    # residual variance (nan when saturated)
    dof: int
    n: int
    interactions: list[tuple[str, str]]
    dropped_terms: list[tuple]       # aliased columns (not estimable from these data)

    def design(self, frame: pd.DataFrame) -> np.ndarray:
        for f in self.factors:
            bad = set(frame[f]) - set(self.levels[f])
            if bad:
                raise ExabenchError(f"factor {f}: level(s) {sorted(bad)} were never measured; valid: "
                                    f"{', '.join(self.levels[f])}")
        return _design(frame, self.terms)

    def effects(self) -> pd.DataFrame:
        se = np.sqrt(np.diag(self.cov_unscaled) * self.sigma2)
        rows = [{"term": _term_name(t), "estimate": b, "se": s, "factor_ratio": float(np.exp(b))}
                for t, b, s in zip(self.terms, self.coef, se)]
        return pd.DataFrame(rows)

    def predict(self, frame: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
        """Predicted log performance with the standard error of the mean and of a new observation,
        and the prediction interval; `perf` and the interval back in linear scale."""
        from scipy.stats import t as student_t
        x = self.design(frame)
        mean = x @ self.coef
        h = np.einsum("ij,jk,ik->i", x, self.cov_unscaled, x)
        se_mean = np.sqrt(h * self.sigma2)
        se_pred = np.sqrt((1.0 + h) * self.sigma2)
        q = student_t.ppf(0.5 + level / 2, self.dof) if self.dof > 0 else np.nan
        out = frame[self.factors].copy().reset_index(drop=True)
        out["log_perf"], out["se_mean"], out["se_pred"] = mean, se_mean, se_pred
        out["perf"] = np.exp(mean)
        out["perf_lo"], out["perf_hi"] = np.exp(mean - q * se_pred), np.exp(mean + q * se_pred)
        return out

    def grid(self) -> pd.DataFrame:
        """Every combination of the model's factor levels."""
        combos = list(itertools.product(*(self.levels[f] for f in self.factors)))
        return pd.DataFrame(combos, columns=self.factors)


def _term_name(t: tuple) -> str:
    if t == ("intercept",):
        return "intercept"
    if len(t) == 2:
        return f"{t[0]}={t[1]}"
    return f"{t[0]}={t[1]}:{t[2]}={t[3]}"


def _design(frame: pd.DataFrame, terms: list[tuple]) -> np.ndarray:
    cols = []
    for t in terms:
        if t == ("intercept",):
            cols.append(np.ones(len(frame)))
        elif len(t) == 2:
            cols.append((frame[t[0]] == t[1]).to_numpy(float))
        else:
            cols.append(((frame[t[0]] == t[1]) & (frame[t[2]] == t[3])).to_numpy(float))
    return np.column_stack(cols) if cols else np.zeros((len(frame), 0))


def _baseline_level(values: pd.Series, chosen: str | None) -> str:
    levels = sorted(set(values))
    if chosen is not None:
        if chosen not in levels:
            raise ExabenchError(f"baseline level {chosen!r} was not measured; valid: {', '.join(levels)}")
        return chosen
    counts = values.value_counts()
    return sorted(levels, key=lambda lv: (-counts[lv], lv))[0]  # the most measured level, then by name


def supported_interactions(frame: pd.DataFrame, factors: list[str]) -> list[tuple[str, str]]:
    """Pairs of factors whose every cell (level x level) has at least one observation."""
    out = []
    for a, b in itertools.combinations(factors, 2):
        cells = set(zip(frame[a], frame[b]))
        if len(cells) == frame[a].nunique() * frame[b].nunique():
            out.append((a, b))
    return out


def fit(frame: pd.DataFrame, factors: list[str] | None = None, interactions="auto",
        baseline: dict[str, str] | None = None) -> LogLinearModel:
    """Least-squares fit of log_perf on the factors.

    interactions: "none", "auto" (every pair whose cells are all measured, added in order while
    residual degrees of freedom remain), or a list of pairs (each still checked for full cells)."""
    baseline = baseline or {}
    factors = factors or [c for c in DEFAULT_FACTORS if c in frame.columns]
    missing = [f for f in factors if f not in frame.columns]
    if missing:
        raise ExabenchError(f"fit: factors {missing} are not columns of the model frame; valid: {list(frame.columns)}")
    varying = [f for f in factors if frame[f].nunique() > 1]
    constant = {f: str(frame[f].iloc[0]) for f in factors if f not in varying}
    levels = {}
    for f in varying:
        base = _baseline_level(frame[f], baseline.get(f))
        levels[f] = [base] + sorted(set(frame[f]) - {base})
    terms: list[tuple] = [("intercept",)] + [(f, lv) for f in varying for lv in levels[f][1:]]
    if interactions == "none":
        pairs = []
    else:
        ok_pairs = supported_interactions(frame, varying)
        pairs = ok_pairs if interactions == "auto" else [tuple(p) for p in interactions if tuple(p) in ok_pairs]
    chosen_pairs = []
    for a, b in pairs:
        extra = [(a, la, b, lb) for la in levels[a][1:] for lb in levels[b][1:]]
        if len(terms) + len(extra) < len(frame):  # keep at least one residual degree of freedom
            terms += extra
            chosen_pairs.append((a, b))
    x = _design(frame, terms)
    kept, dropped = _independent_columns(x)
    terms_kept = [terms[i] for i in kept]
    x = x[:, kept]
    y = frame["log_perf"].to_numpy(float)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    dof = len(y) - x.shape[1]
    sigma2 = float(resid @ resid / dof) if dof > 0 else float("nan")
    cov = np.linalg.inv(x.T @ x)
    return LogLinearModel(varying, constant, levels, terms_kept, coef, cov, sigma2, dof, len(y), chosen_pairs,
                          [terms[i] for i in dropped])


def _independent_columns(x: np.ndarray, tol: float = 1e-9) -> tuple[list[int], list[int]]:
    """Greedy Gram-Schmidt: keep a column only if it adds a direction (a level combination never seen
    apart from others is aliased with them)."""
    kept, dropped, basis = [], [], []
    for j in range(x.shape[1]):
        r = x[:, j].astype(float).copy()
        norm = np.linalg.norm(r)
        for _ in range(2):  # twice is enough for numerical orthogonality
            for q in basis:
                r -= (q @ r) * q
        if norm > 0 and np.linalg.norm(r) > tol * max(1.0, norm) * 1e3:
            basis.append(r / np.linalg.norm(r))
            kept.append(j)
        else:
            dropped.append(j)
    return kept, dropped


def speedup_matrix(model: LogLinearModel, rows: str | None, cols: str, baseline: str | None = None,
                   fixed: dict[str, str] | None = None) -> pd.DataFrame:
    """The seeds' form: for each level of `rows`, each level of `cols` over the baseline level of `cols`
    (predicted, other factors at `fixed` or their baseline levels). rows None: one row."""
    if rows is None or rows == cols:
        rows = None
    for f in [f for f in (rows, cols) if f is not None]:
        if f not in model.factors:
            raise ExabenchError(f"speedup_matrix: factor {f!r} does not vary in the data; valid: "
                                f"{', '.join(model.factors)}")
    base = baseline or model.levels[cols][0]
    fixed = {f: (fixed or {}).get(f, model.levels[f][0]) for f in model.factors}
    row_levels = model.levels[rows] if rows else ["all"]
    grid = [{**fixed, **({rows: r} if rows else {}), cols: c} for r in row_levels for c in model.levels[cols]]
    pred = model.predict(pd.DataFrame(grid))
    lp = dict(zip(zip(pred[rows] if rows else ["all"] * len(pred), pred[cols]), pred["log_perf"]))
    return pd.DataFrame({c: [np.exp(lp[(r, c)] - lp[(r, base)]) for r in row_levels] for c in model.levels[cols]},
                        index=pd.Index(row_levels, name=rows or ""))


def measured_speedup_matrix(frame: pd.DataFrame, factors: list[str], rows: str, cols: str,
                            baseline: str) -> pd.DataFrame:
    """Measured counterpart: geometric mean, over runs matched on every other factor, of P(col) / P(base)."""
    others = [f for f in factors if f not in (rows, cols)]
    g = frame.groupby(others + [rows, cols], dropna=False)["log_perf"].mean().reset_index()
    base = g[g[cols] == baseline].drop(columns=cols).rename(columns={"log_perf": "base"})
    joined = g.merge(base, on=others + [rows])
    joined["log_ratio"] = joined["log_perf"] - joined["base"]
    m = joined.groupby([rows, cols])["log_ratio"].mean().unstack(cols)
    return np.exp(m)


def leave_one_out(frame: pd.DataFrame, factors: list[str] | None = None, interactions="auto",
                  baseline: dict[str, str] | None = None) -> pd.DataFrame:
    """Predict each run from all the others, with the terms of the full model (the usual closed form:
    held-out error e_i / (1 - h_ii)). A run with leverage 1 is the only one informing some term: it is
    refitted without it, and when its level is measured nowhere else it is kept with `predicted` empty
    and the reason."""
    m = fit(frame, factors, interactions, baseline)
    x = m.design(frame)
    y = frame["log_perf"].to_numpy(float)
    h = np.einsum("ij,jk,ik->i", x, m.cov_unscaled, x)
    resid = y - x @ m.coef
    rss = float(resid @ resid)
    rows = []
    for i in range(len(frame)):
        row = {"run_id": frame["run_id"].iloc[i], "observed": float(np.exp(y[i]))}
        if h[i] < 1 - 1e-9:
            err = resid[i] / (1 - h[i])
            dof = m.dof - 1
            s2 = (rss - resid[i] ** 2 / (1 - h[i])) / dof if dof > 0 else float("nan")
            row.update({"predicted": float(np.exp(y[i] - err)), "log_error": float(err),
                        "rel_error": float(np.exp(-err) - 1.0), "se_pred": float(np.sqrt(s2 / (1 - h[i]))),
                        "reason": ""})
        else:
            row.update(_refit_predict(frame, i, factors, interactions, baseline))
        rows.append(row)
    return pd.DataFrame(rows)


def _refit_predict(frame, i, factors, interactions, baseline) -> dict:
    held, rest = frame.iloc[[i]], frame.drop(frame.index[i])
    try:
        m = fit(rest, factors, interactions, baseline)
        for f, lv in m.constant.items():
            if held[f].iloc[0] != lv:
                raise ExabenchError(f"factor {f}: level {held[f].iloc[0]!r} measured nowhere else")
        p = m.predict(held).iloc[0]
        err = float(held["log_perf"].iloc[0] - p["log_perf"])
        return {"predicted": float(p["perf"]), "log_error": err, "rel_error": float(np.exp(-err) - 1.0),
                "se_pred": float(p["se_pred"]), "reason": ""}
    except ExabenchError as exc:
        return {"predicted": np.nan, "log_error": np.nan, "rel_error": np.nan, "se_pred": np.nan,
                "reason": str(exc)}


def loo_summary(loo: pd.DataFrame) -> dict:
    done = loo.dropna(subset=["log_error"])
    return {"n": len(loo), "predicted": len(done), "not_predictable": len(loo) - len(done),
            "rmse_log": float(np.sqrt((done["log_error"] ** 2).mean())) if len(done) else float("nan"),
            "median_abs_rel_error": float(done["rel_error"].abs().median()) if len(done) else float("nan"),
            "max_abs_rel_error": float(done["rel_error"].abs().max()) if len(done) else float("nan")}


# --- synthetic records with known effects (for tests and for checking a design before running it) ----------

def synthetic_records(effects: dict[str, dict[str, float]], intercept: float = 0.0,
                      interactions: dict[tuple, float] | None = None, sigma: float = 0.0, repeats: int = 1,
                      seed: int = 0, skip=None) -> list[dict]:
    """Result records (schema exabench.result/1) on the full factorial of `effects`, with
    log throughput = intercept + sum of effects (+ interactions keyed (f1, l1, f2, l2)) + N(0, sigma).

    Factors map onto record fields the default factor specs read: site -> site, workload -> benchmark,
    size -> preset, config -> layout "n<N>r<R>t<T>", precision -> the metric's precision.
    `skip(cell) -> bool` leaves cells unmeasured."""
    from exabench.records.record import SCHEMA
    rng = np.random.default_rng(seed)
    names = list(effects)
    recs = []
    for combo in itertools.product(*(effects[f].items() for f in names)):
        cell = {f: lv for f, (lv, _) in zip(names, combo)}
        if skip and skip(cell):
            continue
        mean = intercept + sum(e for _, e in combo)
        for (f1, l1, f2, l2), e in (interactions or {}).items():
            if cell.get(f1) == l1 and cell.get(f2) == l2:
                mean += e
        for rep in range(repeats):
            value = float(np.exp(mean + sigma * rng.standard_normal()))
            cfg = cell.get("config", "n1r1t1")
            nodes, rest = cfg[1:].split("r")
            rpn, tpr = rest.split("t")
            run_id = ".".join([cell.get("workload", "synthetic"), *(cell[f] for f in names if f != "workload"),
                               f"rep{rep}"])
            recs.append({"schema": SCHEMA, "run_id": run_id, "benchmark": cell.get("workload", "synthetic"),
                         "suite": "synthetic", "framework": "none", "preset": cell.get("size", "tiny"),
                         "repeat": rep + 1, "params": {}, "swept": {}, "site": cell.get("site", "local"),
                         "layout": {"nodes": int(nodes), "ranks_per_node": int(rpn), "threads_per_rank": int(tpr),
                                    "gpus_per_rank": 0, "ranks": int(nodes) * int(rpn)},
                         "status": "ok", "error": None,
                         "metrics": {"throughput": {"value": value, "unit": "samples/s", "higher_is_better": True,
                                                    "precision": cell.get("precision", "fp32"),
                                                    "stats": {"median": value, "n": 1}}}})
    return recs


def report(df: pd.DataFrame, factors: dict[str, str] | None = None, metric: str | None = None,
           interactions="auto", baseline: dict[str, str] | None = None, rows: str | None = None,
           cols: str | None = None) -> dict:
    """Everything the model says about a tidy table: effects, speedup matrices (predicted and measured),
    predictions for every combination (unmeasured ones marked), leave-one-out errors, and a Markdown text."""
    factors = factors or DEFAULT_FACTORS
    frame = model_frame(df, factors, metric)
    names = list(factors)
    model = fit(frame, names, interactions, baseline)
    loo = leave_one_out(frame, names, interactions, baseline)
    summary = loo_summary(loo)
    grid = model.grid()
    measured = set(map(tuple, frame[model.factors].drop_duplicates().to_numpy().tolist()))
    preds = model.predict(grid)
    preds["measured"] = [tuple(r) in measured for r in grid.to_numpy().tolist()]
    out = {"frame": frame, "model": model, "effects": model.effects(), "loo": loo, "loo_summary": summary,
           "predictions": preds, "speedups": None, "measured_speedups": None}
    if model.factors:
        cols = cols or ("config" if "config" in model.factors else model.factors[-1])
        rows = rows or next((f for f in model.factors if f != cols), cols)
        out["speedups"] = speedup_matrix(model, rows, cols)
        out["measured_speedups"] = measured_speedup_matrix(frame, model.factors, rows, cols,
                                                           model.levels[cols][0]) if rows != cols else None
        rows = rows if rows != cols else "all runs"
    out["markdown"] = _report_markdown(out, factors, frame, rows, cols)
    return out


def _fmt_df(df: pd.DataFrame) -> str:
    return df.to_markdown(floatfmt=".4g")  # tabulate comes with snakemake


def _report_markdown(out: dict, factors: dict, frame: pd.DataFrame, rows, cols) -> str:
    m: LogLinearModel = out["model"]
    s = out["loo_summary"]
    lines = ["# Log-linear performance model", "",
             f"Response: log of `{frame['metric'].iloc[0]}`"
             + ("" if frame["higher_is_better"].all() else " taken as 1/time (so every factor reads as a speedup)")
             + f"; {m.n} runs, {len(m.terms)} estimated terms, {m.dof} residual degrees of freedom, "
             f"residual sd {np.sqrt(m.sigma2):.3g} (log scale). Least squares (numpy).",
             "Factors (spec): " + ", ".join(f"{f} ({sp})" for f, sp in factors.items()) + ".",
             "Constant in these data (absorbed in the intercept): " +
             (", ".join(f"{f}={v}" for f, v in m.constant.items()) or "none") + ".",
             "Baseline levels: " + (", ".join(f"{f}={lv[0]}" for f, lv in m.levels.items()) or "none") + ".",
             "Interactions (fitted only where every cell was measured): " +
             (", ".join(f"{a}:{b}" for a, b in m.interactions) or "none") + ".",
             "Not estimable from these data: " + (", ".join(map(_term_name, m.dropped_terms)) or "none") + ".",
             "", "## Effects (factor_ratio = exp(estimate): speedup over the baseline level)", "",
             _fmt_df(out["effects"].set_index("term")), "",
             f"## Leave-one-out error ({s['predicted']} of {s['n']} runs predictable)", "",
             f"RMSE (log) {s['rmse_log']:.3g}; median |relative error| {s['median_abs_rel_error']:.1%}; "
             f"max {s['max_abs_rel_error']:.1%}.", ""]
    if out["speedups"] is not None:
        lines += [f"## Speedup matrix (predicted): {cols} over {cols}={m.levels[cols][0]}, per {rows}", "",
                  _fmt_df(out["speedups"]), ""]
    if out["measured_speedups"] is not None:
        lines += ["## Speedup matrix (measured, geometric mean over matched runs)", "",
                  _fmt_df(out["measured_speedups"]), ""]
    un = out["predictions"][~out["predictions"]["measured"]]
    lines += [f"## Predictions for unmeasured combinations ({len(un)}), 95% prediction interval", ""]
    lines += [_fmt_df(un.drop(columns="measured")) if len(un) else "every combination was measured", ""]
    return "\n".join(lines)


def write_report(table_csv: str | Path, out_dir: str | Path, factors: dict[str, str] | None = None,
                 metric: str | None = None, interactions="auto", baseline: dict[str, str] | None = None,
                 rows: str | None = None, cols: str | None = None, log: str | None = None) -> str:
    """Tidy table CSV -> loglinear.md, effects.csv, speedups.csv, measured_speedups.csv, predictions.csv,
    loo.csv in out_dir; returns the Markdown text. `log`: a rule's log (the traceback goes there)."""
    from exabench.io import logged
    with logged(log):
        return _write_report(table_csv, out_dir, factors, metric, interactions, baseline, rows, cols)


def _write_report(table_csv, out_dir, factors, metric, interactions, baseline, rows, cols) -> str:
    from exabench.io import atomic_write_text
    out = report(pd.read_csv(table_csv), factors, metric, interactions, baseline, rows, cols)
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "loglinear.md", out["markdown"])
    atomic_write_text(out_dir / "effects.csv", out["effects"].to_csv(index=False))
    atomic_write_text(out_dir / "predictions.csv", out["predictions"].to_csv(index=False))
    atomic_write_text(out_dir / "loo.csv", out["loo"].to_csv(index=False))
    for name in ("speedups", "measured_speedups"):
        df = out[name] if out[name] is not None else pd.DataFrame()
        atomic_write_text(out_dir / f"{name}.csv", df.to_csv())
    return out["markdown"]
