"""MLPerf-HPC scores from MLLOG files alone: Time To Solution and Throughput.

- Time To Solution (strong scaling): the runs of one benchmark at one configuration are copied
  into the submission layout the package's result summarizer reads
  (<org>/results/<system>/strong/<benchmark>/result_N.txt); its own code computes each run's
  minutes (run_start to run_stop, runs failing the compliance checker dropped) and the olympic
  average (best and worst dropped, more when runs were dropped), and its RCP checker judges
  the convergence against the reference convergence points it ships for that global batch.
  The rules ask for REQUIRED_RUNS runs; fewer are scored and marked partial.
- Throughput (weak scaling): M instances of S accelerators trained at once in one allocation,
  one log each. TTTa = latest run_stop - earliest run_start over the instances counted; an
  instance that fails the checker (did not converge) is not counted, instances that share a
  seed are all left out (the rules: "runs with identical seeds must be pruned"), and the `prune`
  slowest stragglers may be left out (the rules allow pruning to M', never extrapolating to M).
  Reported as (T, S, M', TTTa) with models per minute = M' / TTTa, and only when M' is at least
  the benchmark's required count (the rules' table, which mlperf-logging's weak-scaling scorer
  enforces: 5 for OC20 and DeepCAM, 10 for CosmoFlow and OpenFold); with fewer, the row shows
  the span of the instances counted and says it is no score. S is nodes x accelerators per node
  as the log states them (at least 1 per node, as the summarizer counts CPU-only nodes);
  T = M x S, the accelerators the instances held together.
- Staging: rulesets before HPC 3.0 count data staging in the time to train (their checker wants
  staging inside run_start..run_stop; a log that staged before run_start is timed from
  staging_start); from 3.0 on it is not counted. MLLOG lines carry no ruleset version: it comes
  with the log (the run record's `mlperf_ruleset`, or the caller), and every row says which
  rule applied.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from exabench import markdown
from exabench.benchmarks.mlperf.harness import HPC_RULESET, REQUIRED_RUNS, staging_timed
from exabench.errors import ExabenchError
from exabench.io import atomic_write_text


class LogError(ExabenchError, ValueError):
    """A file that is not a readable MLLOG of one run, or logs that cannot be scored together."""


@dataclass
class LogRun:
    path: str
    benchmark: str
    ruleset: str
    run_start_ms: float
    run_stop_ms: float
    status: str
    global_batch_size: int | None
    nodes: int
    accelerators_per_node: int
    seed: int | None
    staging_ms: tuple[float, float] | None = None
    compliant: bool | None = None       # None: no checker for this ruleset in mlperf-logging
    checker: str = ""
    energy_j: float | None = None       # run_start..run_stop, from the run's record (docs/energy.md)

    @property
    def staging(self) -> str:
        rule = "timed" if staging_timed(self.ruleset) else "untimed"
        return f"{rule} (hpc {self.ruleset})" if self.staging_ms else f"none ({rule} under hpc {self.ruleset})"

    @property
    def start_ms(self) -> float:
        """Where the clock starts: run_start, or staging_start when staging counts and came first."""
        if self.staging_ms and staging_timed(self.ruleset):
            return min(self.run_start_ms, self.staging_ms[0])
        return self.run_start_ms

    @property
    def minutes(self) -> float:
        return (self.run_stop_ms - self.start_ms) / 60000.0

    @property
    def scale(self) -> int:
        return self.nodes * max(self.accelerators_per_node, 1)


def read_log(path, ruleset: str = HPC_RULESET) -> LogRun:
    """The facts of one MLLOG file; LogError naming the file when it is not one run's log."""
    path = Path(path)
    first: dict[str, dict] = {}
    try:
        lines = path.read_text(encoding="latin-1").splitlines()
    except OSError as exc:
        raise LogError(f"{path}: cannot read ({exc.strerror})") from None
    for number, line in enumerate(lines, 1):
        if ":::MLLOG" not in line:
            continue
        try:
            entry = json.loads(line.split(":::MLLOG", 1)[1])
        except ValueError:
            raise LogError(f"{path}:{number}: not a JSON MLLOG line") from None
        first.setdefault(entry.get("key"), entry)
    missing = [k for k in ("submission_benchmark", "run_start", "run_stop") if k not in first]
    if missing:
        raise LogError(f"{path}: no {', '.join(missing)} line (not a complete MLPerf run log)")

    def value(key, default=None):
        return first[key]["value"] if key in first else default

    staging = None
    if "staging_start" in first and "staging_stop" in first:
        staging = (float(first["staging_start"]["time_ms"]), float(first["staging_stop"]["time_ms"]))
    return LogRun(str(path), str(value("submission_benchmark")), ruleset, float(first["run_start"]["time_ms"]),
                  float(first["run_stop"]["time_ms"]), str((first["run_stop"].get("metadata") or {}).get("status")),
                  value("global_batch_size"), int(value("number_of_nodes", 1)), int(value("accelerators_per_node", 0)),
                  value("seed"), staging)


def check_compliance(run: LogRun) -> LogRun:
    """The package's compliance checker (in process, as its result summarizer runs it) on the log."""
    from mlperf_logging.compliance_checker import mlp_compliance
    if run.ruleset not in mlp_compliance.rule_choices():
        run.compliant, run.checker = None, f"no hpc {run.ruleset} checker in mlperf-logging"
        return run
    checker = mlp_compliance.make_checker("hpc", run.ruleset, True, False)
    run.compliant = bool(checker.check_file(run.path, f"hpc_{run.ruleset}/common.yaml"))
    run.checker = "SUCCESS" if run.compliant else "FAILED"
    return run


# ---- the submission layout -------------------------------------------------------------------
def write_layout(runs: list[LogRun], root: Path, kind: str, org: str = "exabench", system: str = "system") -> Path:
    """Copy the logs to <root>/<org>/results/<system>/<kind>/<benchmark>/result_N.txt; the folder."""
    benchmarks = {r.benchmark for r in runs}
    if len(benchmarks) != 1:
        raise LogError(f"one benchmark per result folder, got {sorted(benchmarks)}")
    folder = Path(root) / org / "results" / system / kind / benchmarks.pop()
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for i, r in enumerate(runs):
        shutil.copyfile(r.path, folder / f"result_{i}.txt")
    return folder


# ---- Time To Solution ------------------------------------------------------------------------
@dataclass
class TimeToSolution:
    benchmark: str
    ruleset: str
    global_batch_size: int | None
    scale: int
    required: int
    runs: list[dict] = field(default_factory=list)
    olympic_minutes: float | None = None
    complete: bool = False
    rcp: str = ""
    olympic_energy_j: float | None = None  # the summarizer's Energy: averaged over the runs the time score keeps
    energy_note: str = ""


def rcp_verdict(folder: Path, ruleset: str, batch: int | None) -> str:
    """The package's RCP checker on a result folder, where it ships points for that batch size."""
    from mlperf_logging.rcp_checker import rcp_checker
    try:
        checker = rcp_checker.RCP_Checker("hpc", ruleset, Path(folder).name, False)
    except Exception as exc:  # the package raises a bare Exception for rulesets without RCPs
        return f"no RCPs for hpc {ruleset} ({exc})"
    sizes = sorted(int(r["BS"]) for r in checker._get_rcp_data("pruned_rcps").values())
    if batch is None or not sizes or not sizes[0] <= batch <= sizes[-1]:
        return f"no RCP for global batch {batch} (RCPs at {', '.join(map(str, sizes)) or 'none'})"
    ok, message, _ = rcp_checker.check_directory(str(folder), "hpc", ruleset, False, False, rcp_pass="pruned_rcps")
    return f"{'pass' if ok else 'fail'}: {message}"


def time_to_solution(runs: list[LogRun], root: Path) -> TimeToSolution:
    """Olympic score of the runs of one benchmark at one configuration, through the summarizer."""
    from mlperf_logging.result_summarizer import result_summarizer as rs
    first = runs[0]
    tts = TimeToSolution(first.benchmark, first.ruleset, first.global_batch_size, first.scale,
                         REQUIRED_RUNS.get(first.benchmark, 3))
    for r in runs:
        check_compliance(r)
    folder = write_layout(runs, root, "strong")
    counted = [r for r in runs if r.compliant is not False]
    if not staging_timed(first.ruleset) and first.compliant is not None:
        by_file, _, score, _, _ = rs._compute_strong_score_standalone(
            first.benchmark, "system", False, str(folder), "hpc", first.ruleset, return_full_scores=True)
        minutes = {Path(f).name: m for f, m in by_file.items()}
    else:  # the summarizer times run_start..run_stop only: timed staging is added here
        minutes = {f"result_{i}.txt": r.minutes for i, r in enumerate(runs) if r.compliant is not False}
        dropped = len(runs) - len(minutes)
        score = rs._compute_olympic_average(list(minutes.values()), dropped, 1) if dropped <= 1 else None
    for i, r in enumerate(runs):
        tts.runs.append({"log": r.path, "seed": r.seed, "minutes": r.minutes, "energy_j": r.energy_j,
                         "status": r.status, "checker": r.checker, "counted": f"result_{i}.txt" in minutes, "staging": r.staging})
    tts.olympic_minutes = score
    tts.olympic_energy_j, tts.energy_note = olympic_energy(
        [(minutes[f"result_{i}.txt"], r.energy_j) for i, r in enumerate(runs) if f"result_{i}.txt" in minutes],
        len(runs) - len(minutes))
    tts.complete = len(runs) >= tts.required and score is not None
    tts.rcp = rcp_verdict(folder, first.ruleset, first.global_batch_size) if counted else "no converged run"
    return tts


def olympic_energy(counted: list[tuple[float, float | None]], dropped: int) -> tuple[float | None, str]:
    """(minutes, joules) of the counted runs -> the summarizer's energy score: the joules averaged
    over the runs its time score keeps (sorted by time, best and worst dropped), with its own code;
    None and why where a counted run has no measured energy (never an estimate)."""
    from mlperf_logging.result_summarizer import result_summarizer as rs
    missing = sum(j is None for _, j in counted)
    if not counted or missing:
        return None, f"no measured energy for {missing or 'any'} of the counted runs (docs/energy.md)"
    if dropped > 1:
        return None, "too few counted runs"
    order = [i for i, _ in sorted(enumerate(m for m, _ in counted), key=lambda x: x[1])]
    return rs._index_olympic_average([j for _, j in counted], order, dropped, 1), ""


# ---- Throughput ------------------------------------------------------------------------------
def required_instances(benchmark: str) -> int:
    """M' the rules ask for: the count mlperf-logging's weak-scaling scorer checks a folder against."""
    from mlperf_logging.benchmark_meta import get_result_file_counts
    return int(get_result_file_counts("hpc").get(benchmark, REQUIRED_RUNS.get(benchmark, 3)))


@dataclass
class Throughput:
    benchmark: str
    ruleset: str
    T: int
    S: int
    M: int
    M_counted: int
    required: int
    pruned: list[str]
    rejected: list[dict]            # {"log", "why"}: instances the rules leave out (identical seeds)
    span_minutes: float | None      # latest run_stop - earliest start of the M' counted; a score only if complete
    TTTa_minutes: float | None      # the score: span_minutes when M' >= required, else None
    models_per_minute: float | None
    complete: bool
    verdict: str
    staging: str
    instances: list[dict] = field(default_factory=list)


def shared_seeds(runs: list[LogRun]) -> dict[str, str]:
    """Instances whose seed another instance also used, each with why (every one of them is left out)."""
    by_seed: dict = {}
    for r in runs:
        if r.seed is not None:
            by_seed.setdefault(r.seed, []).append(r)
    return {r.path: f"seed {seed} also used by {', '.join(Path(o.path).name for o in group if o is not r)}"
            for seed, group in by_seed.items() if len(group) > 1 for r in group}


def throughput(runs: list[LogRun], root: Path | None = None, prune: int = 0) -> Throughput:
    """The (T, S, M', TTTa) row of M concurrent instances; the `prune` latest finishers left out.
    A score only when M' reaches the rules' count for the benchmark (required_instances)."""
    scales = {r.scale for r in runs}
    if len(scales) != 1:
        raise LogError(f"throughput instances of {runs[0].benchmark} must share one scale S (nodes x accelerators "
                       f"per node), got {sorted(scales)}: plan one layout per throughput campaign")
    if prune < 0 or prune >= len(runs):
        raise LogError(f"score_mlperf_prune = {prune}: must be between 0 and {len(runs) - 1} "
                       f"(the {len(runs)} instances less one)")
    for r in runs:
        check_compliance(r)
    if root is not None:
        write_layout(runs, root, "weak")
    rejected = shared_seeds(runs)
    converged = sorted((r for r in runs if r.compliant is not False and r.path not in rejected),
                       key=lambda r: r.run_stop_ms)
    kept = converged[:len(converged) - prune] if prune else converged
    span = (max(r.run_stop_ms for r in kept) - min(r.start_ms for r in kept)) / 60000.0 if kept else None
    first, s = runs[0], scales.pop()
    required = required_instances(first.benchmark)
    complete = len(kept) >= required and bool(span)
    verdict = (f"score: M' = {len(kept)} of at least {required}" if complete else
               f"no score: {len(kept)} instance(s) counted, the rules need M' >= {required} for {first.benchmark}")
    return Throughput(first.benchmark, first.ruleset, s * len(runs), s, len(runs), len(kept), required,
                      [r.path for r in converged[len(kept):]],
                      [{"log": path, "why": why} for path, why in rejected.items()], span,
                      span if complete else None, len(kept) / span if complete else None, complete, verdict,
                      first.staging,
                      [{"log": r.path, "seed": r.seed, "run_start_ms": r.run_start_ms, "run_stop_ms": r.run_stop_ms,
                        "checker": r.checker, "counted": r in kept} for r in runs])


# ---- the tables ------------------------------------------------------------------------------
def logs_of_records(records: list[dict]) -> list[LogRun]:
    """The MLPerf logs the records point to (rank 0 wrote them), with each record's ruleset."""
    out = []
    for rec in records:
        info = rec.get("info") or {}
        log = info.get("mlperf_log")
        if log and Path(log).exists():
            try:
                run = read_log(log, info.get("mlperf_ruleset", HPC_RULESET))
            except LogError as exc:  # a seed that crashed half-way: say which one, and how it ended
                seed = (rec.get("params") or {}).get("seed")
                ended = f", {rec.get('status')}" + (f": {rec['error']}" if rec.get("error") else "")
                raise LogError(f"run {rec.get('run_id')} (seed {seed}{ended}): {exc}") from None
            run.energy_j = ((rec.get("metrics") or {}).get("energy") or {}).get("value")
            out.append(run)
    return out


def group_for_tts(runs: list[LogRun]) -> list[list[LogRun]]:
    groups: dict[tuple, list[LogRun]] = {}
    for r in runs:
        groups.setdefault((r.benchmark, r.ruleset, r.global_batch_size, r.scale), []).append(r)
    return [groups[k] for k in sorted(groups, key=str)]


def _fmt(x, spec=".3f") -> str:
    return "" if x is None else format(x, spec)


def _section(title: str, intro: str, header: list[str], rows: list[list]) -> list[str]:
    """A scores section: its title, what it shows, its table."""
    return [f"## {title}", "", intro, ""] + markdown.table(header, rows)


def tts_markdown(scores: list[TimeToSolution]) -> list[str]:
    rows = []
    for s in scores:
        for r in s.runs:
            rows.append([s.benchmark, s.global_batch_size, s.scale, r["seed"], _fmt(r["minutes"], ".4f"),
                         _fmt(r.get("energy_j"), ".4g"), r["status"], r["checker"], "yes" if r["counted"] else "no",
                         r["staging"], "", "", ""])
        runs = f"{len(s.runs)} of {s.required}" + ("" if len(s.runs) >= s.required else " (partial)")
        olympic = _fmt(s.olympic_minutes, ".4f") or "n/a (too few counted runs)"
        energy = _fmt(s.olympic_energy_j, ".4g") or f"n/a ({s.energy_note})"
        rows.append([s.benchmark, s.global_batch_size, s.scale, "**olympic**", olympic, energy, "",
                     "", "", "", runs, s.rcp, s.ruleset])
    return _section("Time To Solution",
                    "Olympic average of the runs' minutes (run_start to run_stop; best and worst dropped) "
                    "by mlperf-logging's result summarizer; RCP by its RCP checker; checker = its compliance "
                    "checker on each log. Energy: joules over run_start..run_stop from the run's record, averaged "
                    "over the same runs as the time (the summarizer's Energy column; docs/energy.md).",
                    ["benchmark", "global batch", "S", "seed", "minutes", "energy (J)", "run_stop", "checker",
                     "counted", "staging", "runs", "RCP", "ruleset"], rows)


def throughput_markdown(rows_: list[Throughput]) -> list[str]:
    rows = [[t.benchmark, t.T, t.S, t.M, f"{t.M_counted} of >= {t.required}", _fmt(t.span_minutes, ".4f"),
             _fmt(t.TTTa_minutes, ".4f") or "n/a", _fmt(t.models_per_minute) or "n/a", len(t.pruned),
             len(t.rejected), t.verdict, t.staging, t.ruleset] for t in rows_]
    lines = _section("Throughput",
                     "M instances of S accelerators at once; TTTa = latest run_stop - earliest run_start of the M' "
                     "instances counted (converged, distinct seeds, stragglers pruned as stated); models/min = "
                     "M' / TTTa. A score needs M' at least the rules' count for the benchmark; with fewer, the "
                     "span of the instances counted is shown and TTTa is n/a.",
                     ["benchmark", "T", "S", "M", "M'", "span (min)", "TTTa (min)", "models/min", "pruned",
                      "same seed", "verdict", "staging", "ruleset"], rows)
    for t in rows_:
        lines += [f"- {Path(r['log']).name}: left out, {r['why']}" for r in t.rejected]
    return lines


def write_scores(records: list[dict], out_dir, mode: str = "time_to_solution", prune: int = 0) -> dict:
    """tables/mlperf.md and mlperf.json (every figure and the logs behind it) from the records'
    MLPerf logs; the submission layout the package read is left under <out_dir>/mlperf_submission."""
    out_dir = Path(out_dir)
    runs = logs_of_records(records)
    root = out_dir / "mlperf_submission"
    lines = ["# MLPerf-HPC scores", ""]
    result: dict = {"mode": mode, "logs": len(runs)}
    if mode == "throughput":
        by_benchmark: dict[str, list[LogRun]] = {}
        for r in runs:
            by_benchmark.setdefault(r.benchmark, []).append(r)
        rows = [throughput(by_benchmark[b], root, prune) for b in sorted(by_benchmark)]
        result["throughput"] = [asdict(t) for t in rows]
        lines += throughput_markdown(rows)
    else:
        scores = [time_to_solution(g, root) for g in group_for_tts(runs)]
        result["time_to_solution"] = [asdict(s) for s in scores]
        lines += tts_markdown(scores)
    if not runs:
        lines += ["", "No MLPerf log found in the records."]
    atomic_write_text(out_dir / "mlperf.json", json.dumps(result, indent=1, default=str) + "\n")
    atomic_write_text(out_dir / "mlperf.md", "\n".join(lines) + "\n")
    return result
