"""`exabench` command line: thin wrappers over the package (no computing here)."""

from __future__ import annotations

import argparse
import math
import sys

from exabench.errors import ConfigError, ExabenchError


def _load(args):
    from exabench.config import load_and_validate
    from exabench.campaign.plan import expand
    from exabench.campaign.site import default_config_file, load_site
    args.config = args.config or default_config_file(args.site)  # the site's own campaign, as its profile runs
    config = load_and_validate(args.config, "config")
    site = load_site(args.site or config["site"])
    return config, site, expand(config, site, args.config)


def cmd_plan(args) -> int:
    from exabench.campaign.bundles import plan_bundles
    from exabench.campaign.plan import node_hours, plan_overview, queue_counts
    config, site, runs = _load(args)
    bundles = plan_bundles(runs, site, config["campaign"], args.config)
    bundle_hours = sum(b.node_hours for b in bundles)
    if not args.bundle:
        rows = plan_overview(runs, site)
        _print_table(rows, "run")
        hours = sum(node_hours(r, site) for r in runs)
        print(f"\n{len(runs)} runs of campaign {runs[0].campaign if runs else '-'} ({args.config}) on site "
              f"{site.name}: {hours:,.1f} node-hours requested ({bundle_hours:,.1f} as {len(bundles)} "
              f"bundle{'s' if len(bundles) != 1 else ''})")
        if site.queues:
            print("jobs in queue: " + ", ".join(f"{q} ({n})" for q, n in queue_counts(runs, site).items()))
        print()
    _print_bundles(bundles, site, config["campaign"], args.bundle)
    _print_budget(config, site, runs, bundles, args.config)
    if any(r.layout.nodes == 1 for r in runs):
        from exabench.campaign.node_sweep import sweep_nodes, sweep_plan_lines
        print("\n" + "\n".join(sweep_plan_lines(runs, site, sweep_nodes(site))))
    return 0


def _print_budget(config, site, runs, bundles, config_file: str) -> None:
    """The node-hour budget the campaign is judged against when Snakemake runs it."""
    from exabench.campaign.budget import budget_of, check_budget
    budget = budget_of(config, site)
    if not budget:
        return
    try:
        check_budget(config, site, runs, bundles, config_file)
        print(f"\nnode-hour budget: {budget:,.0f} (node_hours_budget): within it")
    except ConfigError as exc:
        print(f"\nnode-hour budget: Snakemake will refuse this campaign: {exc}")


def _print_table(rows: list[dict], first: str) -> None:
    import pandas as pd
    width = max((len(r[first]) for r in rows), default=3)
    print(pd.DataFrame(rows).to_string(index=False, formatters={first: lambda v: f"{v:<{width}}"}))


def _print_bundles(bundles, site, campaign: str, with_runs: bool) -> None:
    """Bundle mode's plan: one row per allocation, the totals, and (with_runs) each bundle's runs."""
    from exabench.campaign.bundles import bundle_overview, bundles_per_queue, over_user_limits, running_limits
    if not bundles:
        return
    from exabench.campaign.bundles import totals_line
    _print_table(bundle_overview(bundles, site), "bundle")
    print("\n" + totals_line(bundles, site, campaign))
    if site.queues:
        print("bundles in queue: " + ", ".join(f"{q} ({n})" for q, n in bundles_per_queue(bundles).items()))
        for queue, (n, limit) in over_user_limits(bundles, site).items():
            print(f"queue {queue}: {n} bundles, but one user may have only {limit} there at once "
                  f"(queues[].max_queued_per_user, {site.path or site.name}): submit the rest as earlier ones end")
        for queue, (n, limit) in running_limits(bundles, site).items():
            print(f"queue {queue}: {n} bundles, {limit} of one user's running at once (queues[].max_running_per_user)")
    if with_runs:
        for b in bundles:
            print(f"\n{b.name}:\n  " + "\n  ".join(r.run_id for r in b.runs))


def cmd_launch_lines(args) -> int:
    from pathlib import Path
    from exabench.campaign.render import RunPaths, render_script
    _, site, runs = _load(args)
    for run in runs:
        text, line = render_script(run, site, RunPaths(Path("results") / site.name, run.run_id))
        print(f"{run.run_id}:\n{text}" if args.script else f"{run.run_id}:\n  {line}")
    return 0


def cmd_execute(args) -> int:
    # A run's job in a campaign is this command (run.smk): it imports what one run needs, never the workflow.
    from exabench.execute import execute_logged
    from exabench.records.progress import read_run_ids, status_lines
    if args.render_site:  # the run's own files first, unless they were rendered from these very sources
        import json
        from exabench.rendered import is_current
        if not is_current(args.spec, json.loads(args.render_run), args.render_site):
            from exabench.campaign.render import render_own_files
            render_own_files(args.spec, args.render_site, args.render_run)
    rec = execute_logged(args.spec, args.log)
    import os
    planned = read_run_ids(args.planned) if args.planned and os.path.exists(args.planned) else None
    print("\n".join(status_lines(args.spec, rec, planned)), flush=True)
    return 0


def cmd_run(args) -> int:
    """Check every YAML file the snakemake command line names with exabench's loader, then become
    that snakemake (exec: its exit status, signals and output are Snakemake's own)."""
    import os
    from exabench.config import check_snakemake_config_files
    argv = list(args.snakemake_args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    check_snakemake_config_files(argv)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "snakemake", *argv])
    return 0  # not reached


def cmd_aggregate(args) -> int:
    from exabench.records.tidy import aggregate
    aggregate(args.records, args.csv, args.markdown, args.site_name)
    return 0



def cmd_compare(args) -> int:
    from exabench.analysis.compare import write_comparison
    print(write_comparison(args.records, args.plan, args.site_name, args.baseline, args.out))
    return 0


def _read_records(items) -> list[dict]:
    from exabench.records.record import record_paths
    from exabench.records.tidy import load_records
    return load_records(record_paths(items))


def cmd_accept(args) -> int:
    from exabench.analysis import acceptance as acc
    rows = acc.write_verdicts(args.records, args.references, args.plan, args.site_name, args.markdown, args.csv,
                              args.junit)
    c = acc.counts(rows)
    print(f"acceptance of {args.site_name}: " + ", ".join(f"{n} {v}" for v, n in c.items())
          + f" -> {args.markdown}, {args.junit}")
    return 1 if args.strict and acc.failing_runs(rows) else 0


def cmd_accept_check(args) -> int:
    from exabench.analysis.acceptance import check_verdicts
    try:
        passed, text = check_verdicts(args.verdicts)
    except (KeyError, ValueError) as exc:  # a missing column, not CSV, not UTF-8 (pandas' errors are ValueErrors)
        raise ExabenchError(f"--verdicts {args.verdicts}: not a verdicts table ({type(exc).__name__}: {exc}); "
                            "valid: the verdicts CSV `exabench accept` wrote (columns run_id, metric, verdict, "
                            "detail)") from None
    print(text, file=sys.stdout if passed else sys.stderr)
    return 0 if passed else 1


def cmd_references(args) -> int:
    from exabench.analysis.acceptance import (TOLERANCES, derive_references, efficiency_references,
                                              stored_records)
    tol = dict(TOLERANCES)
    if args.tolerance:
        lo, hi = (float(x) for x in args.tolerance.split(","))
        tol = {True: (lo, hi), False: (lo, hi)}
    if args.from_history:
        from exabench.analysis.history import history_references, parse_band
        if args.source:
            raise ExabenchError("give either --from (records) or --from-history (the results store), not both")
        band = parse_band(args.band)
        refs, ids = history_references(args.store, args.site_name, args.select, args.last, band,
                                       same_system=not args.any_system)
        command = (f"exabench references --from-history --store {args.store} --site-name {args.site_name} "
                   f"--last {args.last} --band {args.band} --out {args.out}")
        command += (f" --select {args.select}" if args.select else "") + (" --any-system" if args.any_system else "")
        refs += efficiency_references(stored_records(args.store, ids), band)
        return _write_references(args, refs, command, f"from {len(ids)} stored campaign(s)")
    if not args.source:
        raise ExabenchError("give --from RECORDS... or --from-history")
    records = _read_records(args.source)
    refs = derive_references(records, tolerances=tol) + efficiency_references(records)
    command = "exabench references --from " + " ".join(args.source) + f" --site-name {args.site_name} --out {args.out}"
    command += f" --tolerance {args.tolerance}" if args.tolerance else ""
    return _write_references(args, refs, command, "")


def _write_references(args, refs: list[dict], command: str, where: str) -> int:
    """Write the derived references, or (--merge) the published file with those it lists as
    `from_history` added."""
    from exabench.analysis.acceptance import merge_references, merged_yaml, references_yaml
    from exabench.io import atomic_write_text
    where = f" {where}" if where else ""
    if args.merge:
        command += f" --merge {args.merge}"
        data, added = merge_references(args.merge, refs, args.site_name)
        atomic_write_text(args.out, merged_yaml(data, args.merge, command))
        print(f"{len(data['references']) - len(added)} published + {len(added)} derived references{where} "
              f"-> {args.out}")
        return 0
    atomic_write_text(args.out, references_yaml(refs, args.site_name, command))
    print(f"{len(refs)} references{where} -> {args.out}")
    return 0


def cmd_nodes(args) -> int:
    from exabench.analysis import acceptance as acc
    rows = acc.write_node_check(args.records, args.references, args.site_name, args.markdown, args.z)
    print(acc.node_check_line(rows, args.markdown))
    return 0 if args.report_only else acc.node_exit_code(rows)  # 0 all pass, 1 a node to drain, 2 undecided


def cmd_plots(args) -> int:
    from exabench.analysis.plots import write_plots
    print(write_plots(args.records, args.nodes, args.plan, args.site_name, args.out))
    return 0


def cmd_archive(args) -> int:
    from exabench.analysis.archive import archive_campaign
    from exabench.records.attempts import campaign_results
    campaign_results(args.results)  # an empty or mistyped folder has nothing to pack
    print(archive_campaign(args.results, args.out, args.site_name, args.logs, args.config, args.site, args.references,
                           args.lock, args.baseline, args.baseline_records))
    return 0


def cmd_reproduce(args) -> int:
    import tempfile
    from exabench.analysis.archive import check_report, reproduce
    dest = args.out or tempfile.mkdtemp(prefix="exabench-reproduce-")
    check = reproduce(args.archive, dest, args.image)
    print(check_report(check, args.archive))
    print(f"unpacked and rebuilt under {dest}")
    return 0 if check.ok else 1


def _hold_results(results: str):
    """Claim the results directory while records move (execute.ResultsClaim): refused while a campaign runs."""
    from pathlib import Path
    from exabench.execute import ResultsClaim, ResultsClaimedError
    claim = ResultsClaim(results, Path(__file__).resolve().parents[1])
    if not claim.acquire(lambda line: print(line, file=sys.stderr)):
        raise ResultsClaimedError(f"the results directory {results} is in use by a running campaign (claim "
                                  f"{claim.path}); wait for it to end, then run again")
    return claim


def cmd_retry(args) -> int:
    from exabench.records.attempts import campaign_results, retry
    campaign_results(args.results)  # before the claim, which would make the folder of a mistyped path
    claim = None if args.dry_run else _hold_results(args.results)
    try:
        moved = retry(args.results, dry_run=args.dry_run)
    finally:
        if claim:
            claim.release()
    verb = "would be set aside" if args.dry_run else "set aside"
    for m in moved:
        print(f"{m.run_id}: {m.status}; record {verb} -> {m.to}")
    if not moved:
        print(f"{args.results}: no failed, timed-out or corrupt record; nothing to retry")
    elif not args.dry_run:
        print(f"{len(moved)} run(s) {verb} (kept in {args.results}/attempts/). Run the campaign's snakemake "
              "command again: it runs exactly these runs.")
    return 0


def cmd_restore(args) -> int:
    from exabench.records.attempts import choose_kept, kept_records, restore
    kept = kept_records(args.results, args.run_id)
    if args.list:
        for p in kept:
            print(p)
        print(f"{len(kept)} kept record(s) of {args.run_id}")
        return 0
    if args.archive:
        from exabench.analysis.archive import record_from_archive
        source, text = f"{args.archive}:records/{args.run_id}.json", record_from_archive(args.archive, args.run_id)
    else:
        chosen = choose_kept(args.results, args.run_id, args.version)
        source, text = str(chosen), chosen.read_text()
    claim = _hold_results(args.results)
    try:
        moved = restore(args.results, args.run_id, text, source)
    finally:
        claim.release()
    if moved:
        print(f"{args.run_id}: the {moved.status} record it replaces is kept -> {moved.to}")
    print(f"{args.run_id}: restored from {source}")
    return 0


def cmd_ingest(args) -> int:
    from exabench.records.store import StoreError, ingest
    done = ingest(args.sources, args.store)
    if done.all_rejected:  # exit 0 would say the records went in
        raise StoreError("nothing ingested: every record was rejected: " + "; ".join(done.corrupt))
    print(done.line())
    return 0


def cmd_history(args) -> int:
    from exabench.analysis import history
    table = history.campaigns(args.store)
    if args.select:
        table = table[table["campaign_id"].isin(history.select(table, args.select))]
    shown = history.campaign_table(table)
    print(history.write_table(shown, f"Campaigns in {args.store}", args.csv, args.markdown), end="")
    print(f"\n{len(shown)} campaign(s)")
    return 0


def cmd_history_compare(args) -> int:
    from exabench.analysis import history
    df = history.compare_selections(args.store, args.a, args.b, args.metric, history.parse_aggregates(args.aggregate))
    title = f"A = {args.a} ({', '.join(df.attrs['A_ids'])}) vs B = {args.b} ({', '.join(df.attrs['B_ids'])})"
    print(history.write_table(df, title, args.csv, args.markdown), end="")
    return 0


def cmd_history_regress(args) -> int:
    from exabench.analysis import history
    df = history.regressions(args.store, args.current, args.against, args.last, not args.any_system, args.metric,
                             args.alpha, args.min_change, args.correction, detect=args.detect,
                             campaign_spread=args.campaign_spread)
    print(history.write_regressions(df, args.csv, args.markdown))
    return 1 if args.strict and (df["verdict"] == "regressed").any() else 0


def cmd_node_run(args) -> int:
    from exabench.campaign.node_sweep import node_run_files
    group = tuple(args.group_nodes.split(",")) if args.group_nodes else None
    print(node_run_files(args.spec, args.node, group, args.index))
    return 0


def _node_list(command: str, nodes_file: str) -> list[str]:
    import sys
    from exabench.errors import ExabenchError
    try:
        source = sys.stdin if nodes_file == "-" else open(nodes_file)
        with source:
            return [line.strip() for line in source if line.strip()]
    except OSError as exc:
        raise ExabenchError(f"{command}: --nodes-file {nodes_file}: cannot be read ({exc.strerror}); valid: "
                            "a file of node names, one a line, or '-' (standard input)") from None


def cmd_node_prepare(args) -> int:
    import time
    from exabench.campaign.node_sweep import prepare_nodes
    nodes = _node_list("node-prepare", args.nodes_file)
    t0 = time.monotonic()
    written = prepare_nodes(args.spec, nodes)
    print(f"node-prepare: {written} node spec(s) ({len(nodes)} node(s) x {len(args.spec)} run(s)) in "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    return 0


def cmd_node_agent(args) -> int:
    from exabench.campaign.node_agent import node_spec_path, run_here, this_node
    if args.here:
        return run_here(args.spec, args.here)
    # this node's spec, run as `exabench execute` runs a spec: 0 once its record exists, whatever its status
    from exabench.execute import execute_logged
    from exabench.records.progress import status_lines
    path = node_spec_path(args.spec, this_node())
    rec = execute_logged(path, path.parent / "agent.log")
    print("\n".join(status_lines(path, rec)), flush=True)
    return 0


def cmd_node_collect(args) -> int:
    from collections import Counter
    from exabench.execute import collect_node_world as collect
    status = collect(args.spec, _node_list("node-collect", args.nodes_file), args.exit, args.elapsed)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(Counter(status.values()).items()))
    print(f"node-collect: {args.spec}: launch exit {args.exit}; {len(status)} node record(s): {counts}", flush=True)
    return 0 if all(s == "ok" for s in status.values()) else 1


def cmd_node_sweep(args) -> int:
    from pathlib import Path
    from exabench.campaign.node_sweep import node_sweep_files, sweep_nodes
    from exabench.io import atomic_write_many
    config, site, runs = _load(args)
    results = Path("results") / site.name
    files = node_sweep_files(runs, site, results, args.nodes or sweep_nodes(site), Path(args.out))
    atomic_write_many(files)
    for path, _, _ in files:
        print(f"every-node job script -> {path}")
    print("(render the runs first: snakemake --profile profiles/<site> --until render)")
    return 0


def cmd_list(args) -> int:
    from exabench.benchmarks import load_all
    for name, cls in sorted(load_all().items()):
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
    from exabench.perf.loglinear import DEFAULT_FACTORS, write_report
    factors = {**DEFAULT_FACTORS, **_pairs(args.factor, "--factor")}
    interactions = args.interactions
    if interactions not in ("auto", "none"):
        interactions = [tuple(p.split(":")) for p in interactions.split(",")]
    print(write_report(args.table, args.out_dir, factors, args.metric, interactions,
                       _pairs(args.baseline, "--baseline"), args.rows, args.cols))
    return 0


def cmd_comm_fit(args) -> int:
    from exabench.perf.comm_fit import write_comm_fit
    print(write_comm_fit(args.sweep, args.markdown, args.split_bytes))
    return 0


def cmd_model_validate(args) -> int:
    from exabench.perf.validation import write_validation
    print(write_validation(args.reference, args.csv, args.markdown))
    return 0


def cmd_model_project(args) -> int:
    from exabench.perf.projection import write_projection
    print(write_projection(args.reference, args.csv, args.markdown, args.plot))
    return 0


def cmd_model_local_check(args) -> int:
    from pathlib import Path
    from exabench.perf.local_report import write_local_check
    records = args.records or sorted((Path(args.table).resolve().parents[1] / "records").glob("*.json"))
    print(write_local_check(args.table, args.sweep, records, args.csv, args.markdown, args.split_bytes,
                            site=args.site))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="exabench", description="Reproducible HPC deep-learning and analytics benchmarks")
    sub = ap.add_subparsers(dest="command", required=True)
    for add in (
        _add_plan, _add_launch_lines, _add_run, _add_execute, _add_aggregate, _add_model_fit, _add_comm_fit,
        _add_model_validate, _add_model_project, _add_model_local_check, _add_compare, _add_accept,
        _add_accept_check, _add_references, _add_nodes, _add_plots, _add_archive, _add_reproduce, _add_node_run,
        _add_node_sweep, _add_node_prepare, _add_node_agent, _add_node_collect, _add_ingest, _add_history, _add_retry, _add_restore,
        _add_rehearse, _add_list,
    ):
        add(sub)  # in this order: the order of `exabench --help`
    _inherit_shadowed_options(ap)
    return ap


def _with_config(p):
    p.add_argument("--config", default=None, help="experiment config (default: the campaign the site's profile "
                   "loads, profiles/<site>/config.yaml `configfile`; config/config.yaml without --site)")
    p.add_argument("--site", default=None, help="site.yaml (default: the config's `site`)")
    return p


def _with_files(p, *names, split=False):
    for name in names:
        p.add_argument(f"--{name}", required=True)
    if split:
        p.add_argument("--split-bytes", type=int, default=65536, help="allreduce protocol regime boundary "
                                                                      "(default %(default)s)")
    return p


def _over_records(p, plan_help: str):
    """The inputs of a command that reads a campaign's records: the records (files or folders), and the
    plan whose runs without a record it shows."""
    p.add_argument("--plan", default=None, help=plan_help)
    p.add_argument("records", nargs="+", help="record files or directories of records")
    return p


def _with_store(p):
    p.add_argument("--store", default="results/history.duckdb", help="the results store (default %(default)s)")
    return p


def _also_written(p):
    """The history tables' optional copies in files, beside what is printed."""
    p.add_argument("--csv", default=None, help="also write the table as CSV here")
    p.add_argument("--markdown", default=None, help="also write the table as Markdown here")
    return p


def _with_results(p):
    p.add_argument("--results", required=True, help="the campaign's results folder (results/<site>)")
    return p


PUBLISHED_SCALING = "results/reference/published_scaling.yaml"


def _add_plan(sub) -> None:
    p = _with_config(sub.add_parser("plan", help="print the runs a config expands to on a site"))
    p.add_argument("--bundle", action="store_true", help="show bundle mode's allocations and the runs of each "
                   "(without it: one row per run, then the bundles)")
    p.set_defaults(fn=cmd_plan)


def _add_launch_lines(sub) -> None:
    p = _with_config(sub.add_parser("launch-lines", help="print the launch line (or --script) of every planned run"))
    p.add_argument("--script", action="store_true", help="print each run's whole job script (header, setup, launch)")
    p.set_defaults(fn=cmd_launch_lines)


def _add_run(sub) -> None:
    p = sub.add_parser("run", prefix_chars="+", add_help=False, help="check the config and profile files a snakemake command line names (size, "
                       "UTF-8, duplicate keys, syntax with its line), then run that snakemake",
                       description="exabench run [snakemake arguments]: e.g. exabench run --profile profiles/local "
                       "--configfile config/micro.yaml -n")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="arguments for snakemake, as given to it")
    p.set_defaults(fn=cmd_run)


def _add_execute(sub) -> None:
    p = sub.add_parser("execute", help="run one rendered job script and ensure its record exists")
    p.add_argument("--spec", required=True)
    p.add_argument("--log", help="write the job's output here (the run rule's log)")
    p.add_argument("--planned", help="the campaign's run ids, one a line, for the progress line (runs/run_ids.txt)")
    p.add_argument("--render-site", metavar="SITE_YAML",
                   help="first render the run's job.sh and spec.json (files that changed only) for this site")
    p.add_argument("--render-run", metavar="JSON", help="the run to render: its plan entry (Run.to_dict) as JSON")
    p.set_defaults(fn=cmd_execute)


def _add_aggregate(sub) -> None:
    p = sub.add_parser("aggregate", help="records -> tidy CSV table + Markdown summary")
    p.add_argument("--site-name", required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--markdown", required=True)
    p.add_argument("records", nargs="*")
    p.set_defaults(fn=cmd_aggregate)


def _add_model_fit(sub) -> None:
    p = sub.add_parser("model-fit", help="log-linear performance model of a tidy results table (docs/perf.md)")
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


def _add_comm_fit(sub) -> None:
    _with_files(sub.add_parser("comm-fit", help="fit allreduce latency and bandwidth to a sweep (n, bytes, time_s)"),
               "sweep", "markdown", split=True).set_defaults(fn=cmd_comm_fit)


def _add_model_validate(sub) -> None:
    p = _with_files(sub.add_parser("model-validate", help="communication model vs published scaling figures"),
                   "csv", "markdown")
    p.add_argument("--reference", default=PUBLISHED_SCALING)
    p.set_defaults(fn=cmd_model_validate)


def _add_model_project(sub) -> None:
    p = _with_files(sub.add_parser("model-project", help="PROJECTED scaling of the reference campaign to whole "
                                                        "machines"), "csv", "markdown", "plot")
    p.add_argument("--reference", default=PUBLISHED_SCALING)
    p.set_defaults(fn=cmd_model_project)


def _add_model_local_check(sub) -> None:
    p = _with_files(sub.add_parser("model-local-check", help="measured 1 -> n rank (node) K-Means and ResNet-50 "
                                                            "scaling vs the model"),
                   "table", "sweep", "csv", "markdown", split=True)
    p.add_argument("--site", default=None, help="site.yaml: usable cores per node, network figures where no fit")
    p.add_argument("--records", nargs="+", default=None, metavar="RECORD",
                   help="the runs' records (parameter counts, load averages); default: the records/ folder beside "
                        "the table's folder")
    p.set_defaults(fn=cmd_model_local_check)


def _add_compare(sub) -> None:
    p = _over_records(sub.add_parser("compare", help="records -> comparison tables (Markdown, CSV, Parquet)"),
                      "plan.json of the campaign: planned runs without a record show as missing")
    p.add_argument("--out", required=True, help="directory of the tables")
    p.add_argument("--site-name", default=None, help="site of the planned runs (default: each plan entry's)")
    p.add_argument("--baseline", default=None, help="site the cross-site table compares against")
    p.set_defaults(fn=cmd_compare)


def _add_accept(sub) -> None:
    p = _over_records(sub.add_parser("accept", help="records x references -> verdicts (Markdown, CSV, JUnit XML)"),
                      "plan.json: planned runs without a record fail")
    p.add_argument("--references", required=True, help="the site's references.yaml")
    _with_files(p, "site-name", "markdown", "csv", "junit")
    p.add_argument("--strict", action="store_true", help="exit 1 when any run fails")
    p.set_defaults(fn=cmd_accept)


def _add_accept_check(sub) -> None:
    p = sub.add_parser("accept-check", help="exit 1, naming the runs, when a verdicts table has a failing run")
    p.add_argument("--verdicts", required=True, help="verdicts CSV written by `exabench accept`")
    p.set_defaults(fn=cmd_accept_check)


def _add_references(sub) -> None:
    p = sub.add_parser("references", help="derive a site's references.yaml from measured runs")
    p.add_argument("--from", dest="source", nargs="+", default=None, help="record files or directories")
    p.add_argument("--from-history", action="store_true",
                   help="derive from the stored campaigns of --site-name instead (docs/history.md)")
    p.add_argument("--store", default="results/history.duckdb", help="with --from-history: the results store")
    p.add_argument("--select", default=None, help="with --from-history: only these campaigns (a selection)")
    p.add_argument("--last", type=int, default=10, help="with --from-history: the last N campaigns (default 10)")
    p.add_argument("--band", default="5,95", help="with --from-history: percentiles of the tolerance band "
                                                  "(default %(default)s)")
    p.add_argument("--any-system", action="store_true",
                   help="with --from-history: also campaigns on other hardware (default: the newest one's)")
    p.add_argument("--site-name", required=True)
    p.add_argument("--out", required=True, help="references.yaml to write")
    p.add_argument("--tolerance", default=None,
                   help="LOWER,UPPER fractions for every entry (default: 0.8,1.0 for rates, 0.5,4.0 for times)")
    p.add_argument("--merge", default=None, metavar="REFERENCES_YAML",
                   help="keep this file's published entries and add the derived ones its from_history list asks for")
    p.set_defaults(fn=cmd_references)


def _add_nodes(sub) -> None:
    p = sub.add_parser("nodes", help="flag nodes outside tolerance or outliers among peers (every-node records)")
    p.add_argument("--references", default=None)
    _with_files(p, "site-name", "markdown")
    p.add_argument("--z", type=float, default=3.5, help="robust z-score above which a node is an outlier")
    p.add_argument("--report-only", action="store_true", help="exit 0 even when nodes are flagged")
    p.add_argument("records", nargs="*", help="record files or directories of per-node records")
    p.set_defaults(fn=cmd_nodes)


def _add_plots(sub) -> None:
    p = _over_records(sub.add_parser("plots", help="records -> the PNG plots they support, and index.md"),
                      "plan.json: missing runs are marked on the plots")
    p.add_argument("--out", required=True, help="directory of the plots")
    p.add_argument("--site-name", default=None)
    p.add_argument("--nodes", nargs="*", default=[], help="per-node records (cluster-wide acceptance)")
    p.set_defaults(fn=cmd_plots)


def _add_archive(sub) -> None:
    p = sub.add_parser("archive", help="pack a campaign (records, scripts, logs, config, site, locks, tables) "
                                       "with a sha256 inventory into one .tar.gz")
    p.add_argument("--results", required=True, help="results/<site> of the campaign")
    p.add_argument("--out", required=True, help="archive to write (.tar.gz)")
    p.add_argument("--site-name", default=None, help="default: the name of --results")
    p.add_argument("--logs", default=None, help="logs/<site> of the campaign")
    p.add_argument("--config", nargs="*", default=[], help="the campaign's config file(s)")
    p.add_argument("--site", default=None, help="the site.yaml (its profile config.yaml beside it is packed too)")
    p.add_argument("--references", default=None, help="the references.yaml the verdicts were made with")
    p.add_argument("--lock", nargs="*", default=["requirements.lock", "requirements.txt"], help="lock files")
    p.add_argument("--baseline", default=None, help="baseline site of the cross-site table")
    p.add_argument("--baseline-records", nargs="*", default=[], help="the baseline's records (files or dirs)")
    p.set_defaults(fn=cmd_archive)


def _add_reproduce(sub) -> None:
    p = sub.add_parser("reproduce", help="check an archive's hashes and rebuild every table and plot from it")
    p.add_argument("archive")
    p.add_argument("--out", default=None, help="directory to unpack and rebuild in (default: a new temp dir)")
    p.add_argument("--image", default=None, help="an image (.sif, OCI image layout, directory) whose digest every "
                                                 "containerised record must carry (the image you would rerun with)")
    p.set_defaults(fn=cmd_reproduce)


def _add_node_run(sub) -> None:
    p = sub.add_parser("node-run", help="derive one node's spec and job script from a single-node run's spec "
                                        "(called by the every-node job script); prints the node's spec path")
    p.add_argument("--spec", required=True)
    p.add_argument("--node", required=True, help="the node, or the node group's name")
    p.add_argument("--group-nodes", default="", help="the group's nodes, comma-separated (a job pinned to them)")
    p.add_argument("--index", type=int, default=None, help="the node's place in the allocation's node list, 0 "
                   "first (jsrun and ibrun place runs by it)")
    p.set_defaults(fn=cmd_node_run)


def _add_node_prepare(sub) -> None:
    p = sub.add_parser("node-prepare", help="write every node's spec and job script of every single-node run, in "
                                            "one pass (the every-node job calls it once, before its runs)")
    p.add_argument("--spec", action="append", required=True, help="a single-node run's spec (repeat per run)")
    p.add_argument("--nodes-file", required=True, help="the allocation's compute nodes, one a line, in its order "
                   "('-': standard input)")
    p.set_defaults(fn=cmd_node_prepare)


def _add_node_agent(sub) -> None:
    p = sub.add_parser("node-agent", help="run this node's prepared spec of a run (one task per node of the "
                                          "every-node job's launch step)")
    p.add_argument("--spec", required=True, help="the single-node run's own spec")
    p.add_argument("--here", nargs="+", default=None, help="without a scheduler: run these prepared nodes' specs "
                   "here, all at once")
    p.set_defaults(fn=cmd_node_agent)


def _add_node_collect(sub) -> None:
    p = sub.add_parser("node-collect", help="after a run's one MPI launch across every node: a record for every "
                                            "node left without one (failed, timeout, or not run)")
    p.add_argument("--spec", required=True, help="the single-node run's own spec")
    p.add_argument("--nodes-file", required=True, help="the allocation's compute nodes, one a line")
    p.add_argument("--exit", type=int, required=True, help="the launch's exit status")
    p.add_argument("--elapsed", type=float, default=None, help="the launch's seconds (timeout's exit 137 and a "
                   "killed rank's look alike)")
    p.set_defaults(fn=cmd_node_collect)


def _add_node_sweep(sub) -> None:
    p = _with_config(sub.add_parser("node-sweep", help="render the every-node acceptance job script"))
    p.add_argument("--nodes", type=int, default=0, help="nodes to allocate (default: the most one job may have, "
                   "the largest queue's)")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_node_sweep)


def _add_ingest(sub) -> None:
    p = sub.add_parser("ingest", help="add result folders, record files or campaign archives to the results store")
    _with_store(p)
    p.add_argument("sources", nargs="+", help="results/<site>, results/, records, or .tar.gz from exabench archive")
    p.set_defaults(fn=cmd_ingest)


def _add_history(sub) -> None:
    # `history` and its subcommands: `exabench compare` is already the comparison-tables command of
    # one campaign's records, so comparing stored selections is `exabench history compare`.
    p = sub.add_parser("history", help="the campaigns in the results store; `history compare` and "
                                       "`history regress` query it (docs/history.md)")
    _with_store(p)
    p.add_argument("--select", default=None, help="only the campaigns of this selection (docs/history.md)")
    _also_written(p)
    p.set_defaults(fn=cmd_history)
    hsub = p.add_subparsers(dest="history_command")
    for name, fn, text in (("list", cmd_history, "the campaigns (the same as plain `exabench history`)"),
                           ("compare", cmd_history_compare, "two selections side by side per benchmark, parameter "
                                                            "set and metric, with aggregations"),
                           ("regress", cmd_history_regress, "regression verdicts of a campaign against its history "
                                                            "(runs as the unit, noise floor, repeats needed)")):
        q = hsub.add_parser(name, help=text)
        q.add_argument("--store", help="the results store (default: `history --store`, results/history.duckdb)")
        _also_written(q)
        q.set_defaults(fn=fn)
        if name == "list":
            q.add_argument("--select", help="only the campaigns of this selection")
        if name == "compare":
            q.add_argument("a", help="selection A, the baseline (e.g. latest~1, a campaign id, since:2025-06-01)")
            q.add_argument("b", help="selection B, compared with A (e.g. latest)")
            q.add_argument("--aggregate", default=None,
                           help="comma-separated: count, median, mean, std, min, max, pN (default "
                                "count,median,mean,p5,p95)")
        if name in ("compare", "regress"):
            q.add_argument("--metric", default="headline", help="headline (default), all, or a metric name")
        if name == "regress":
            q.add_argument("--current", default="latest", help="the campaign(s) judged (default %(default)s)")
            q.add_argument("--against", default=None,
                           help="the history (default: every campaign that started before the current one)")
            q.add_argument("--last", type=int, default=None, help="only the last N campaigns of the history")
            q.add_argument("--any-system", action="store_true",
                           help="also history from other system fingerprints (default: the same hardware only)")
            q.add_argument("--alpha", type=float, default=0.01, help="significance level (default %(default)s)")
            q.add_argument("--min-change", type=float, default=0.05,
                           help="smallest relative change that counts, whatever the noise floor "
                                "(default %(default)s)")
            q.add_argument("--campaign-spread", type=float, default=0.05,
                           help="with one history campaign, how much campaigns are assumed to differ "
                                "(it cannot be measured from one; default %(default)s)")
            q.add_argument("--detect", type=float, default=0.10,
                           help="the change the `repeats for` column is sized for (default %(default)s)")
            q.add_argument("--correction", default="bh", choices=("bh", "holm", "none"),
                           help="multiple-comparison correction across the campaign (default %(default)s)")
            q.add_argument("--strict", action="store_true", help="exit 1 when any metric regressed")


def _add_retry(sub) -> None:
    p = sub.add_parser("retry", help="set aside the records of failed, timed-out and corrupt runs (into "
                       "attempts/), so that the campaign's next snakemake runs exactly those")
    _with_results(p)
    p.add_argument("-n", "--dry-run", action="store_true", help="only list the runs that would run again")
    p.set_defaults(fn=cmd_retry)


def _add_restore(sub) -> None:
    p = sub.add_parser("restore", help="make a kept record a run's record again: from archive/ or attempts/ (the "
                       "latest, or --version), or from a campaign archive (--archive); the replaced one is kept")
    _with_results(p)
    p.add_argument("run_id")
    p.add_argument("--version", help="file name of the kept record to restore (see --list)")
    p.add_argument("--archive", help="a campaign archive (results/archives/<site>.tar.gz) holding the record")
    p.add_argument("--list", action="store_true", help="list the kept records of the run")
    p.set_defaults(fn=cmd_restore)


def _add_rehearse(sub) -> None:
    p = sub.add_parser("rehearse", help="run a site's documented path here, its submit commands and launchers "
                       "replaced by stand-ins that check the centre's rules (a Slurm site's then run on the "
                       "loopback Slurm SLURM_CONF names; docs/clusters.md)")
    p.add_argument("--profile", required=True, help="the site profile, e.g. profiles/summit")
    p.add_argument("--configfile", default=None, help="a campaign of your own instead of the site's campaign.yaml")
    p.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides after scale=rack preset=tiny, as snakemake --config takes them")
    p.add_argument("--work", default=None, help="scratch folder, emptied first (default: results/rehearsal/<site>)")
    p.add_argument("--ranks", type=int, default=2, help="most ranks a launch starts here (default %(default)s)")
    p.set_defaults(fn=cmd_rehearse)


def cmd_rehearse(args) -> int:
    from pathlib import Path
    from exabench.rehearsal.rehearse import rehearse
    from exabench.rehearsal.report import shown
    if args.ranks < 1:
        raise ExabenchError(f"--ranks {args.ranks}: not valid; valid: a count of ranks >= 1")
    bad = [kv for kv in args.config if "=" not in kv]
    if bad:
        raise ExabenchError(f"--config {bad[0]}: not valid; valid: KEY=VALUE, e.g. scale=node")
    sites = [kv for kv in args.config if kv.split("=", 1)[0].strip() == "site"]
    if sites:  # the stand-ins and the report follow --profile's site file
        raise ExabenchError(f"--config {sites[0]}: not valid here; valid: other keys (the site is --profile's "
                            "site.yaml: give a profile folder holding your site file)")
    work = Path(args.work or f"results/rehearsal/{Path(args.profile).name}")
    r = rehearse(args.profile, work.resolve(), Path.cwd(), args.configfile, args.config, args.ranks)
    s = r.summary
    print(f"exabench rehearse {r.site.name}: {'rehearsed' if s.ok else 'NOT rehearsed'}: {len(r.submitted)} "
          f"script(s) submitted, {len(s.refused)} refused, {len(s.planned) - len(s.missing)} of {len(s.planned)} "
          f"planned run(s) with a record, {s.node_hours:,.1f} node-hours on the real machine, "
          f"{sum(step.seconds for step in r.steps):,.0f} s here; "
          f"report {work / 'rehearsal.md'}")
    for d in s.refused:
        print(f"  {d['why']}")
    for step in r.steps:   # a step that failed (acceptance verdicts aside): its command and last line
        if step.returncode and step not in r.verdicts:
            last = (step.output.strip().splitlines() or ["(no output)"])[-1]
            print(f"  failed (exit {step.returncode}): {shown(step.command)}: {last}")
    return 0 if s.ok else 1


def _add_list(sub) -> None:
    p = sub.add_parser("list", help="list the registered benchmarks")
    p.add_argument("-v", "--verbose", action="store_true", help="also list parameters")
    p.set_defaults(fn=cmd_list)


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [child for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for child in dict.fromkeys(action.choices.values())]


def _inherit_shadowed_options(parser: argparse.ArgumentParser) -> None:
    """An option a subcommand repeats from its parent (`history --store X list`, `history list
    --store X`) must not have its own default: argparse applies the subcommand's defaults after the
    parent's values, so `--store X` before the subcommand was silently replaced by the default.
    Such options default to nothing at the subcommand (argparse.SUPPRESS): the parent's value,
    given or default, stands unless the option is given after the subcommand."""
    mine = {a.dest for a in parser._actions if a.option_strings}
    for child in _subparsers(parser):
        for action in child._actions:
            if action.option_strings and action.dest in mine and action.dest != "help":
                action.default = argparse.SUPPRESS
        _inherit_shadowed_options(child)


# Options naming record files or folders that must exist: a path that does not would be read as a
# `corrupt` record (a table of one CORRUPT row, exit 0) instead of being named.
RECORD_ARGS = ("records", "source", "nodes", "baseline_records")


# What each command's --out names: a file it writes or a folder it fills (the other would end in a
# traceback from the write, after the work was done).
OUT_KINDS = {"references": ("file", "a references.yaml to write"), "archive": ("file", "a .tar.gz to write"),
             "node-sweep": ("file", "the job script to write"), "compare": ("folder", "a folder for the tables"),
             "plots": ("folder", "a folder for the plots"), "reproduce": ("folder", "a folder to rebuild in")}
TOLERANCE_VALID = ("LOWER,UPPER: the fractions a figure may fall below and rise above its reference, "
                   "0 <= LOWER <= 1 and UPPER >= 0 (0.2,0.1: 20% below to 10% above; not multipliers such as 0.8,1.2)")


# Number options: (dest, the commands whose option it is, ("[" or "(", lowest), (highest, "]" or ")") or
# None, what is valid). Each is also refused when not finite.
NUMBER_OPTIONS = (
    ("alpha", ("history",), ("(", 0.0), (1.0, ")"), "a significance level between 0 and 1, e.g. 0.01"),
    ("min_change", ("history",), ("[", 0.0), None, "a fraction >= 0, e.g. 0.05"),
    ("detect", ("history",), ("(", 0.0), None, "a fraction > 0, e.g. 0.10"),
    ("last", ("history", "references"), ("[", 1), None, "a count of campaigns >= 1"),
    ("z", ("nodes",), ("(", 0.0), None, "a robust z-score > 0, e.g. 3.5"),
    ("split_bytes", ("comm-fit", "model-local-check"), ("[", 1), None, "a message size in bytes >= 1, e.g. 65536"),
    ("index", ("node-run",), ("[", 0), None, "the node's place in the allocation's node list, 0 or more"),
    ("nodes", ("node-sweep",), ("[", 0), None, "a count of nodes >= 1, or 0: the largest queue's"),
)
# Files a command writes, besides --out: a folder there, or a file where a folder belongs, is refused
# before anything is written (accept's --junit a folder would leave its --markdown and --csv written).
OUT_FILES = {"markdown": "a Markdown file to write", "csv": "a CSV file to write", "junit": "a JUnit XML file to write",
             "plot": "a PNG file to write", "out_dir": None}


def _check_out(command: str, out: str | None, option: str = "out") -> None:
    from pathlib import Path
    kind, what = OUT_KINDS.get(command, (None, "")) if option == "out" else \
        ("folder", "a folder to write in") if OUT_FILES[option] is None else ("file", OUT_FILES[option])
    if not kind or not out:
        return
    path, flag = Path(out), f"--{option.replace('_', '-')}"
    if kind == "file" and path.is_dir():
        raise ExabenchError(f"{flag} {out}: is a folder; valid: {what}")
    for folder in ([path] if kind == "folder" else []) + list(path.parents):
        if folder.exists() and not folder.is_dir():
            raise ExabenchError(f"{flag} {out}: {folder} is a file, not a folder; valid: {what}")


# Files and folders a command reads: (dest, the commands whose option it is, what is valid). One that is
# missing, of the wrong kind or unreadable is named here, not in a traceback of the library that opens it.
INPUT_PATHS = (
    ("verdicts", ("accept-check",), "file", "the verdicts CSV `exabench accept` wrote "
                                            "(results/<site>/tables/verdicts.csv)"),
    ("table", ("model-fit", "model-local-check"), "file", "a tidy results CSV (results/<site>/tables/results.csv)"),
    ("sweep", ("comm-fit", "model-local-check"), "file", "an allreduce sweep CSV (n, bytes, time_s)"),
    ("reference", ("model-validate", "model-project"), "file", "a published scaling YAML "
                                                               "(results/reference/published_scaling.yaml)"),
    ("spec", ("node-run", "node-agent", "node-collect", "execute"), "file", "a run's spec.json (results/<site>/runs/<run>/spec.json)"),
    ("results", ("archive", "restore"), "folder", "a campaign's results folder (results/<site>)"),
)


def _check_input_path(option: str, path: str, kind: str, what: str) -> None:
    import os
    from pathlib import Path
    p, flag = Path(path), f"--{option.replace('_', '-')}"
    if not p.exists():
        raise ExabenchError(f"{flag} {path}: does not exist; valid: {what}")
    if (kind == "file") == p.is_dir():
        raise ExabenchError(f"{flag} {path}: is {'a folder' if kind == 'file' else 'not a folder'}; valid: {what}")
    if not os.access(p, os.R_OK):
        raise ExabenchError(f"{flag} {path}: cannot be read by this user; valid: {what}")


def _check_tolerance(text: str | None) -> None:
    import math
    if text is None:
        return
    try:
        lower, upper = (float(x) for x in text.split(","))
    except ValueError:
        raise ExabenchError(f"--tolerance {text}: not valid; valid: {TOLERANCE_VALID}") from None
    if not (math.isfinite(lower) and math.isfinite(upper) and 0 <= lower <= 1 and upper >= 0):
        raise ExabenchError(f"--tolerance {text}: not valid; valid: {TOLERANCE_VALID}")


def _check_inputs(args) -> None:
    """Refuse what a command would misread: record paths that do not exist, history's numbers
    outside their range (--alpha 5, --last -1), an --out of the wrong kind and a reversed band."""
    from pathlib import Path
    _check_out(args.command, getattr(args, "out", None))
    for option in OUT_FILES:
        if isinstance(getattr(args, option, None), str):
            _check_out(args.command, getattr(args, option), option)
    if args.command == "references":
        _check_tolerance(args.tolerance)
    for name in RECORD_ARGS:
        items = getattr(args, name, None)
        if isinstance(items, list):
            missing = [i for i in items if isinstance(i, str) and not Path(i).exists()]
            if missing:
                flag = "records" if name == "records" else f"--{name.replace('_', '-')}"
                raise ExabenchError(f"{', '.join(missing)}: no such file or folder ({flag}: record files or "
                                    "folders of records, e.g. results/<site>/records)")
    for name, commands, low, high, what in NUMBER_OPTIONS:
        value = getattr(args, name, None)
        if value is None or args.command not in commands:
            continue
        # NaN compares false with every bound: finite first (--z nan would flag no node, --alpha nan pass)
        if not math.isfinite(value) or not (value > low[1] if low[0] == "(" else value >= low[1]) \
                or (high is not None and not (value < high[0] if high[1] == ")" else value <= high[0])):
            raise ExabenchError(f"--{name.replace('_', '-')} {value}: not valid; valid: {what}")
    for option, commands, kind, what in INPUT_PATHS:
        value = getattr(args, option, None)
        # execute --render-site writes the spec it runs: it need not exist yet
        if args.command in commands and isinstance(value, str) and not getattr(args, "render_site", None):
            _check_input_path(option, value, kind, what)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_inputs(args)
        if getattr(args, "store", None):  # a command on the results store: its library errors name the store
            from exabench.records.store import store_errors
            with store_errors(args.store):
                return args.fn(args)
        return args.fn(args)
    except ExabenchError as exc:
        print(f"exabench: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader left (`exabench list | head`): not an error of ours. Point stdout at devnull so
        # the interpreter's final flush does not raise again (the Python docs' recipe).
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
