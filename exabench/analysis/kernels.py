"""Micro-benchmark records -> per-kernel matrices like the Summit performance-model tables:
one row per kernel configuration, one column per precision (x algorithm), and the
speedup of each reduced precision over fp32.

Reads only the records (their params and `info` tables), so a results archive is
enough. Runs whose status is not `ok` are left out of the matrices (their cells
stay empty) and listed by `not_ok`.
"""

from __future__ import annotations

import pandas as pd

KERNELS = ("gemm", "conv", "rnn")
PRECISION_ORDER = ("fp32", "tf32", "fp16", "bf16")


def kernel_rows(records: list[dict]) -> pd.DataFrame:
    """Long form: kernel, config, direction, algorithm, precision, tflops, time_s, device, run_id."""
    rows = []
    for rec in records:
        bench = rec.get("benchmark")
        if bench not in KERNELS or rec.get("status") != "ok":
            continue
        params, info = rec.get("params", {}), rec.get("info", {})
        base = {"kernel": bench, "precision": params.get("precision"), "device": info.get("device"),
                "run_id": rec["run_id"]}
        if bench == "rnn":
            m = rec["metrics"]
            rows.append({**base, "config": info.get("shape"), "direction": "fwd+bwd",
                         "algorithm": info.get("algorithm"), "tflops": m["tflops"]["value"],
                         "time_s": m["time_fwd_bwd"]["value"]})
            continue
        algorithm = params.get("algorithm") if bench == "conv" else info.get("algorithm")
        for s in info.get("shapes", []):
            rows.append({**base, "config": s["shape"], "direction": s.get("direction", "-"), "algorithm": algorithm,
                         "tflops": s["tflops"], "time_s": s["time_s"]})
    cols = ["kernel", "config", "direction", "algorithm", "precision", "tflops", "time_s", "device", "run_id"]
    return pd.DataFrame(rows, columns=cols)


def precision_matrix(records: list[dict], kernel: str, by_algorithm: bool = False) -> pd.DataFrame:
    """TFLOP/s of one kernel: rows (config, direction[, algorithm]), columns precisions, plus
    `<p>_speedup` = p / fp32 for every reduced precision present. Repeated runs: median."""
    df = kernel_rows(records)
    df = df[df["kernel"] == kernel]
    index = ["config", "direction"] + (["algorithm"] if by_algorithm else [])
    if df.empty:
        return pd.DataFrame()
    mat = df.pivot_table(index=index, columns="precision", values="tflops", aggfunc="median", sort=False)
    mat = mat[[p for p in PRECISION_ORDER if p in mat.columns]]
    mat.columns.name = None
    if "fp32" in mat.columns:
        for p in mat.columns.tolist():
            if p != "fp32":
                mat[f"{p}_speedup"] = mat[p] / mat["fp32"]
    return mat


def algorithm_matrix(records: list[dict], precision_base: str = "fp32") -> pd.DataFrame:
    """Convolution TFLOP/s: rows (config, direction), columns (precision, algorithm), as the slides'
    Winograd-vs-implicit-GEMM by fp32/fp16 table; plus the speedup of each (p, algorithm) over
    (precision_base, same algorithm)."""
    df = kernel_rows(records)
    df = df[df["kernel"] == "conv"]
    if df.empty:
        return pd.DataFrame()
    mat = df.pivot_table(index=["config", "direction"], columns=["precision", "algorithm"], values="tflops",
                         aggfunc="median", sort=False)
    for p, alg in list(mat.columns):
        if p != precision_base and (precision_base, alg) in mat.columns:
            mat[(f"{p}_speedup", alg)] = mat[(p, alg)] / mat[(precision_base, alg)]
    return mat


def allreduce_matrix(records: list[dict], value: str = "busbw_GBps") -> pd.DataFrame:
    """Allreduce `value` (busbw_GBps, algbw_GBps or time_us): rows message bytes, columns backend
    (with `+hier` for the hierarchical variant) and ranks."""
    rows = []
    for rec in records:
        if rec.get("benchmark") != "allreduce" or rec.get("status") != "ok":
            continue
        info = rec["info"]
        label = info["backend"] + ("+hier" if info.get("hierarchical") else "")
        for s in info["sizes"]:
            rows.append({"bytes": s["bytes"], "backend": label, "ranks": info["ranks"], value: s[value]})
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    mat = df.pivot_table(index="bytes", columns=["backend", "ranks"], values=value, aggfunc="median")
    return mat.sort_index()


def not_ok(records: list[dict]) -> pd.DataFrame:
    """The micro-benchmark runs left out of the matrices, with why."""
    rows = [{"run_id": r["run_id"], "benchmark": r["benchmark"], "status": r["status"], "error": r.get("error")}
            for r in records if r.get("benchmark") in KERNELS + ("allreduce",) and r.get("status") != "ok"]
    return pd.DataFrame(rows, columns=["run_id", "benchmark", "status", "error"])


def matrices(records: list[dict]) -> dict[str, pd.DataFrame]:
    """Every matrix the records allow, by title (empty ones left out)."""
    out = {f"{k} TFLOP/s by precision": precision_matrix(records, k) for k in KERNELS}
    out["conv TFLOP/s by precision x algorithm"] = algorithm_matrix(records)
    out["allreduce busbw (GB/s) by backend"] = allreduce_matrix(records)
    out["allreduce time (us) by backend"] = allreduce_matrix(records, "time_us")
    out["runs left out (not ok)"] = not_ok(records)
    return {title: df for title, df in out.items() if not df.empty}


def markdown(records: list[dict]) -> str:
    parts = ["# exabench micro-benchmark matrices", ""]
    for title, df in matrices(records).items():
        flat = df.reset_index() if any(df.index.names) else df.copy()
        flat.columns = [" ".join(str(x) for x in c if x != "") if isinstance(c, tuple) else c for c in flat.columns]
        for col in flat.columns:  # integers (message bytes) printed as such, not in float format
            if pd.api.types.is_integer_dtype(flat[col]):
                flat[col] = flat[col].astype(str)
        parts += [f"## {title}", "", flat.to_markdown(index=False, floatfmt=".4g"), ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from exabench.records.tidy import load_records
    from exabench.io import atomic_write_text
    ap = argparse.ArgumentParser(prog="python -m exabench.analysis.kernels", description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", help="result records (results/<site>/records/*.json)")
    ap.add_argument("--out", help="write the Markdown here instead of printing it")
    args = ap.parse_args(argv)
    text = markdown(load_records(args.records))
    if args.out:
        atomic_write_text(args.out, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
