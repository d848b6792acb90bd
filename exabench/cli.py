"""`exabench` command line: thin wrappers over the package (no computing here)."""

from __future__ import annotations

import argparse
import sys

from .errors import ExabenchError


def _load(args):
    from .config import load_and_validate
    from .plan import expand
    from .site import load_site
    config = load_and_validate(args.config, "config")
    site = load_site(args.site or config["site"])
    return config, site, expand(config, site, args.config)


def cmd_plan(args) -> int:
    from .plan import plan_table
    import pandas as pd
    _, site, runs = _load(args)
    print(pd.DataFrame(plan_table(runs)).to_string(index=False))
    print(f"\n{len(runs)} runs on site {site.name}")
    return 0


def cmd_launch_lines(args) -> int:
    from pathlib import Path
    from .launch import RunPaths, render_script
    _, site, runs = _load(args)
    for run in runs:
        text, line = render_script(run, site, RunPaths(Path("results") / site.name, run.run_id))
        print(f"{run.run_id}:\n{text}" if args.script else f"{run.run_id}:\n  {line}")
    return 0


def cmd_execute(args) -> int:
    from .execute import execute
    rec = execute(args.spec)
    print(f"{rec['run_id']}: {rec['status']}" + (f" ({rec['error']})" if rec.get("error") else ""))
    return 0


def cmd_aggregate(args) -> int:
    from .aggregate import aggregate
    aggregate(args.records, args.csv, args.markdown, args.site_name)
    return 0


def cmd_list(args) -> int:
    from .benchmarks import REGISTRY
    for name, cls in sorted(REGISTRY.items()):
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        print(f"{name:12s} {cls.suite:12s} {cls.framework:14s} {doc[0] if doc else ''}")
        if args.verbose:
            for fname, f in cls.param_fields().items():
                print(f"    {fname:14s} default {f.default!r:10s} {f.metadata.get('doc', '')}")
    return 0


def _pairs(items, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ExabenchError(f"{what} {item!r} is not NAME=VALUE")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def cmd_model_fit(args) -> int:
    from .perfmodel import DEFAULT_FACTORS, write_report
    factors = {**DEFAULT_FACTORS, **_pairs(args.factor, "--factor")}
    interactions = args.interactions
    if interactions not in ("auto", "none"):
        interactions = [tuple(p.split(":")) for p in interactions.split(",")]
    print(write_report(args.table, args.out_dir, factors, args.metric, interactions,
                       _pairs(args.baseline, "--baseline"), args.rows, args.cols))
    return 0


def cmd_comm_fit(args) -> int:
    from .projection import write_comm_fit
    print(write_comm_fit(args.sweep, args.markdown, args.split_bytes))
    return 0


def cmd_model_validate(args) -> int:
    from .projection import write_validation
    print(write_validation(args.reference, args.csv, args.markdown))
    return 0


def cmd_model_project(args) -> int:
    from .projection import write_projection
    print(write_projection(args.reference, args.csv, args.markdown, args.plot))
    return 0


def cmd_model_local_check(args) -> int:
    from .projection import write_local_check
    print(write_local_check(args.table, args.sweep, args.csv, args.markdown, args.split_bytes))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="exabench", description="Reproducible HPC deep-learning and analytics benchmarks")
    sub = ap.add_subparsers(dest="command", required=True)

    def with_config(p):
        p.add_argument("--config", default="config/config.yaml", help="experiment config (default %(default)s)")
        p.add_argument("--site", default=None, help="site.yaml (default: the config's `site`)")
        return p

    with_config(sub.add_parser("plan", help="print the runs a config expands to on a site")).set_defaults(fn=cmd_plan)
    p = with_config(sub.add_parser("launch-lines", help="print the launch line (or --script) of every planned run"))
    p.add_argument("--script", action="store_true", help="print each run's whole job script (header, setup, launch)")
    p.set_defaults(fn=cmd_launch_lines)
    p = sub.add_parser("execute", help="run one rendered job script and ensure its record exists")
    p.add_argument("--spec", required=True)
    p.set_defaults(fn=cmd_execute)
    p = sub.add_parser("aggregate", help="records -> tidy CSV table + Markdown summary")
    p.add_argument("--site-name", required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--markdown", required=True)
    p.add_argument("records", nargs="*")
    p.set_defaults(fn=cmd_aggregate)
    p = sub.add_parser("model-fit", help="log-linear performance model of a tidy results table (docs/models.md)")
    p.add_argument("--table", required=True, help="tidy table CSV (results/<site>/tables/results.csv)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--factor", action="append", metavar="NAME=SPEC",
                   help="factor spec: a column, param.<key>, layout or problem (repeatable; overrides defaults)")
    p.add_argument("--metric", default=None, help="metric to model (default: each benchmark's headline)")
    p.add_argument("--interactions", default="auto", help="auto, none, or pairs a:b,c:d")
    p.add_argument("--baseline", action="append", metavar="FACTOR=LEVEL", help="baseline level of a factor")
    p.add_argument("--rows", default=None, help="factor of the speedup matrix rows")
    p.add_argument("--cols", default=None, help="factor of the speedup matrix columns (default config)")
    p.set_defaults(fn=cmd_model_fit)
    def with_files(p, *names, split=False):
        for name in names:
            p.add_argument(f"--{name}", required=True)
        if split:
            p.add_argument("--split-bytes", type=int, default=65536, help="allreduce protocol regime boundary "
                                                                          "(default %(default)s)")
        return p

    with_files(sub.add_parser("comm-fit", help="fit allreduce latency and bandwidth to a sweep (n, bytes, time_s)"),
               "sweep", "markdown", split=True).set_defaults(fn=cmd_comm_fit)
    ref = "results/reference/published_scaling.yaml"
    p = with_files(sub.add_parser("model-validate", help="communication model vs published scaling figures"),
                   "csv", "markdown")
    p.add_argument("--reference", default=ref)
    p.set_defaults(fn=cmd_model_validate)
    p = with_files(sub.add_parser("model-project", help="PROJECTED scaling of the reference campaign to whole "
                                                        "machines"), "csv", "markdown", "plot")
    p.add_argument("--reference", default=ref)
    p.set_defaults(fn=cmd_model_project)
    with_files(sub.add_parser("model-local-check", help="measured 1 -> n rank K-Means scaling vs the model"),
               "table", "sweep", "csv", "markdown", split=True).set_defaults(fn=cmd_model_local_check)
    p = sub.add_parser("list", help="list the registered benchmarks")
    p.add_argument("-v", "--verbose", action="store_true", help="also list parameters")
    p.set_defaults(fn=cmd_list)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except ExabenchError as exc:
        print(f"exabench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
