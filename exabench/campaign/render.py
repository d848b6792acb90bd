"""Render a run's job script: a batch header for the site's scheduler, the site's modules
and environment, an optional timed stage-in, and the launch line for its launcher.

The arithmetic (ranks, resource sets, binding, threads) is Python (exabench.campaign.site,
exabench.campaign.launchers); the Jinja templates in workflow/templates/batch/ only format.
Every value that reaches a script is either checked here against a strict pattern
(`safe_token`, `safe_path`: full-string matches, so a trailing newline cannot slip
through a `$` anchor) or shell-quoted (`shlex.quote`); a hostile value is rejected
with an error naming site, field and value, never executed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from exabench import containers, rendered
from exabench.campaign import allocation, schedulers
from exabench.campaign.allocation import AllocationRequest, JobAllocation
from exabench.errors import ConfigError, LayoutError
from exabench.campaign import launchers
from exabench.campaign.launchers import launch_argv, thread_env
from exabench.campaign.bundles import Bundle
from exabench.campaign.plan import Run
from exabench.campaign.site import Layout, Site

TEMPLATE_DIR = rendered.TEMPLATE_DIR
# Thread-count variables every BLAS/OpenMP runtime reads, set so ranks never oversubscribe cores.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# Minutes added to a run's own time limit for the allocation (start-up, stage-in, record writing).

TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")
MODULE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+/-]{0,127}")
FLAG = re.compile(r"--?[A-Za-z][A-Za-z0-9_-]*(=[A-Za-z0-9_.,:/=+@%-]+)?")
ATTRS = re.compile(r"([a-z_]+=[A-Za-z0-9_.-]+(:[a-z_]+=[A-Za-z0-9_.-]+)*)?")
CONSTRAINT = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.&|,:-]{0,63})?")
# A path: / or $VAR first, then plain characters and $VAR references (expanded inside "...").
PATH = re.compile(r"(/|\$[A-Za-z_][A-Za-z0-9_]*)([A-Za-z0-9_.+/-]|\$[A-Za-z_][A-Za-z0-9_]*)*")
LITERAL_PATH = re.compile(r"/[A-Za-z0-9_.+/-]*")
VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check(site: Site, field: str, value, pattern: re.Pattern, valid: str, allow_empty: bool = False) -> str:
    text = str(value)
    if (allow_empty and text == "") or pattern.fullmatch(text):
        return text
    raise ConfigError(site.path or site.name, field, value, valid, "is not safe to put in a job script")


def safe_token(site: Site, field: str, value, allow_empty: bool = True) -> str:
    return _check(site, field, value, TOKEN, "letters, digits and _ . + - (not first), up to 128", allow_empty)


def safe_path(site: Site, field: str, value, allow_vars: bool = True) -> str:
    pattern, valid = ((PATH, "an absolute path (or one starting with $VAR) of letters, digits, _ . + - / and $VAR")
                      if allow_vars else (LITERAL_PATH, "an absolute path of letters, digits and _ . + - /"))
    return _check(site, field, value, pattern, valid)


@functools.cache
def _env() -> jinja2.Environment:
    """One environment per process: each template is compiled once (auto_reload still sees an edit)."""
    # A scheduler's header is its file batch/<scheduler>.sh.j2, or the HEADER its module carries.
    loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                                  jinja2.FunctionLoader(schedulers.header_template)])
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["shquote"] = lambda v: shlex.quote(str(v))
    return env


@dataclass(frozen=True)
class RunPaths:
    """Where one run's files live; all under results/<site>/."""

    root: Path
    run_id: str

    @property
    def run_dir(self) -> Path:
        return self.root / "runs" / self.run_id

    @property
    def script(self) -> Path:
        return self.run_dir / "job.sh"

    @property
    def spec(self) -> Path:
        return self.run_dir / "spec.json"

    @property
    def record(self) -> Path:
        return self.root / "records" / f"{self.run_id}.json"

    @property
    def archive_dir(self) -> Path:
        return self.root / "archive" / self.run_id


@dataclass(frozen=True)
class RealPaths:
    """A run's paths with symlinks followed (the form scripts and specs name them in)."""

    root: Path
    run_dir: Path
    record: Path
    archive_dir: Path

    @property
    def spec(self) -> Path:
        return self.run_dir / "spec.json"


def real_folders(root: Path) -> dict[str, Path]:
    """The results root and its runs/, records/ and archive/ folders, resolved once for a batch."""
    return {name: (Path(root) / name).resolve() for name in ("", "runs", "records", "archive")}


def real_paths(paths: RunPaths, folders: dict[str, Path] | None = None) -> RealPaths:
    """`paths` resolved: each path on its own, or (a batch) joined to folders resolved once by
    `real_folders`, which follows every symlink but one made by hand at a run's own folder."""
    if folders is None:
        return RealPaths(paths.root.resolve(), paths.run_dir.resolve(), paths.record.resolve(),
                         paths.archive_dir.resolve())
    return RealPaths(folders[""], folders["runs"] / paths.run_id, folders["records"] / f"{paths.run_id}.json",
                     folders["archive"] / paths.run_id)


def run_environment(site: Site, layout: Layout, run_id: str) -> dict[str, str]:
    env = {k: str(layout.threads_per_rank) for k in THREAD_VARS}
    env.update(thread_env(layout))
    env.update({k: str(v) for k, v in site.env.items()})
    env["EXABENCH_RUN_ID"] = run_id
    if site.storage.get("stage_in_from"):
        # Named here so the record's provenance lists them; the script sets the real values.
        env["EXABENCH_DATA_DIR"] = ""
        env["EXABENCH_STAGE_IN_S"] = ""
    return env


def program_argv(site: Site, spec_path: Path, run: Run | None = None, env: dict | None = None) -> list[str]:
    """What the launcher starts on every rank: the runner, natively or inside the site's image
    (exabench.containers: exec line, binds, env, digest checked against the site's pin)."""
    if containers.uses_container(site):
        # spec_path is <results root>/runs/<run_id>/spec.json (RunPaths): the root is bound in.
        root = Path(spec_path).resolve().parents[2]
        return containers.wrap_program(site, spec_path, run.framework if run else None, env, root)
    return [site.python_executable, "-m", "exabench.runner", "--spec", str(Path(spec_path).resolve())]


def walltime_min(site: Site, timeout_s: int, nodes: int | None = None) -> int:
    """The allocation's time limit in minutes for a run limited to timeout_s on `nodes` nodes
    (allocation.asked_minutes); checked against the site (and its queues, given `nodes`)."""
    return allocation.asked_minutes(site, nodes, [timeout_s])


def hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def hhmmss(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def batch_request(site: Site, layout: Layout, job_name: str, minutes: int, log_dir: Path,
                  alloc: AllocationRequest | None = None, job: JobAllocation | None = None) -> dict:
    """Everything a batch header says, checked; the templates only format these values. They come
    from `job`, the job's allocation (a run's own: allocation.run_job, which the executor's resources
    read too), else from allocation.job of `layout` for `minutes` with `alloc` (a bundle's common
    request) or the layout's own."""
    # `minutes` is allocation.asked_minutes' (the queue's shortest walltime applied), which the plan counts
    job = job or allocation.job(site, layout, minutes, alloc)
    alloc = job.request
    req = {
        "job_name": safe_token(site, "job name", job_name, allow_empty=False)[:64],
        "nodes": job.nodes, "ranks": job.tasks, "ranks_per_node": job.tasks_per_node,
        "minutes": minutes, "hhmm": hhmm(minutes), "hhmmss": hhmmss(minutes),
        "account": safe_token(site, "account", alloc.account),
        "partition": safe_token(site, "partition", alloc.queue),
        "qos": safe_token(site, "qos", alloc.qos),
        "constraint": _check(site, "constraint", alloc.constraint, CONSTRAINT, "a Slurm constraint expression",
                             allow_empty=True),
        "log_dir": safe_path(site, "results directory", str(log_dir), allow_vars=False),
        "extra": [_check(site, "scheduler_options.extra", f, FLAG, "one --flag or --flag=value without spaces")
                  for f in alloc.extra],
        "cpus_per_task": job.cpus_per_task,
        "threads_per_core": alloc.smt,  # Slurm's --threads-per-core (LSF says it in alloc_flags)
        "gpus_per_node": job.gpus_per_node,
        "mem_mb": job.mem_mb,
        "alloc_flags": [safe_token(site, "scheduler_options.alloc_flags", w, allow_empty=False)
                        for w in alloc.alloc_flags],
        "core_spec": alloc.core_spec,
        "cpu_freq": safe_token(site, "scheduler_options.cpu_freq", alloc.cpu_freq),
        "exclusive": alloc.exclusive,
        "burst_buffer_gb": alloc.burst_buffer_gb,
        "pbs_select": site.scheduler_options.get("pbs_select", "select"),
        "pbs_select_extra": _check(site, "scheduler_options.pbs_select_extra",
                                   site.scheduler_options.get("pbs_select_extra", ""), ATTRS, "key=value[:key=value]",
                                   allow_empty=True),
        "pbs_resources": [_check(site, "scheduler_options.pbs_resources", r, re.compile(r"[a-z_]+=[A-Za-z0-9_:.-]+"),
                                 "key=value") for r in site.scheduler_options.get("pbs_resources", [])],
        "cobalt_attrs": _check(site, "scheduler_options.cobalt_attrs", site.scheduler_options.get("cobalt_attrs", ""),
                               ATTRS, "key=value[:key=value]", allow_empty=True),
    }
    if job.queue:  # the queue picked by size, as --partition or (NERSC) --qos
        req[job.queue_key] = safe_token(site, job.queue_key, job.queue)
    return req


def _setup_lines(site: Site) -> list[str]:
    lines = []
    for m in site.modules:
        lines.append(f"module load {_check(site, 'modules', m, MODULE, 'a module name (letters, digits, _ . + / -)')}")
    return lines


def _per_node_prefix(site: Site, nodes: int) -> list[str]:
    """Launcher argv that runs one process on each node (for the stage-in copy)."""
    if nodes == 1 and site.scheduler == "none":
        return []
    if not launchers.facts(site.launcher).per_node:
        raise ConfigError(site.path or site.name, "storage.stage_in_from", site.storage.get("stage_in_from"),
                          "a site whose launcher can start one process per node ("
                          + ", ".join(launchers.names(per_node=True)) + ")",
                          f"cannot be staged with launcher {site.launcher}")
    one = Layout(nodes=nodes, ranks_per_node=1, threads_per_rank=1)
    return launch_argv(site, one, [])


def stage_in_lines(site: Site, layout: Layout, run_dir: Path) -> list[str]:
    """Shell lines copying storage.stage_in_from to node-local storage on every node, timed."""
    src = site.storage.get("stage_in_from", "")
    if not src:
        return []
    local = site.storage.get("node_local", "")
    if not local:
        raise ConfigError(site.path or site.name, "storage.node_local", local,
                          "a node-local path when storage.stage_in_from is set", "is missing")
    src = safe_path(site, "storage.stage_in_from", src)
    local = safe_path(site, "storage.node_local", local)
    prefix = shlex.join(_per_node_prefix(site, layout.nodes))
    # Fixed program text; the two paths reach it as arguments, never as code.
    copy = "bash -c 'mkdir -p \"$2\" && cp -r \"$1\"/. \"$2\"/' stage-in \"$EXABENCH_STAGE_SRC\" \"$EXABENCH_DATA_DIR\""
    stamp = shlex.quote(str(run_dir / "stage_in.json"))
    return [
        "# Stage-in: copy the data set to node-local storage on every node, timed.",
        f'export EXABENCH_STAGE_SRC="{src}"',
        f'export EXABENCH_DATA_DIR="{local}/exabench-data"',
        "stage_t0=$(date +%s.%N)",
        (prefix + " " if prefix else "") + copy,
        "stage_t1=$(date +%s.%N)",
        'export EXABENCH_STAGE_IN_S=$(awk -v a="$stage_t0" -v b="$stage_t1" \'BEGIN { printf "%.3f", b - a }\')',
        f'printf \'{{"stage_in_s": %s, "from": "%s", "to": "%s"}}\\n\' "$EXABENCH_STAGE_IN_S" '
        f'"$EXABENCH_STAGE_SRC" "$EXABENCH_DATA_DIR" > {stamp}',
    ]


def _launch_line(site: Site, layout: Layout, program: list[str], env: dict[str, str]) -> str:
    # A launcher that forwards the environment by name (Open MPI's -x) gets every exported variable.
    return shlex.join(launch_argv(site, layout, program, exports=tuple(sorted(env))))


def render_script(run: Run, site: Site, paths: RunPaths, real: RealPaths | None = None) -> tuple[str, str]:
    """(job script text, launch line) for one run."""
    real = real or real_paths(paths)
    env = run_environment(site, run.layout, run.run_id)
    for key in env:
        if not VAR_NAME.fullmatch(key):
            raise ConfigError(site.path or site.name, "env", key, "a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    program = (program_argv(site, real.spec, run, env) if containers.uses_container(site)
               else [site.python_executable, "-m", "exabench.runner", "--spec", str(real.spec)])
    line = _launch_line(site, run.layout, program, env)
    run_dir = real.run_dir
    job = allocation.run_job(site, run)  # the executor plugin's resources read this one too
    request = batch_request(site, run.layout, run.run_id, job.minutes, run_dir, job=job)
    text = _env().get_template(f"batch/{site.scheduler}.sh.j2").render(
        run=run, site=site, env=env, req=request, setup=_setup_lines(site),
        stage_in=stage_in_lines(site, run.layout, run_dir), workdir=str(run_dir), launch_line=line)
    return text, line


def run_spec(run: Run, site: Site, paths: RunPaths, launch_line: str, real: RealPaths | None = None) -> dict:
    """Everything the runner needs, resolved: it reads no config or site file itself."""
    real = real or real_paths(paths)
    env = run_environment(site, run.layout, run.run_id)
    pin = containers.pin_for_run(site, run.framework, real.root)
    entry = run.to_dict()
    return {"spec_version": 1, **entry, "site": site.name, "launch_line": launch_line, "env": env,
            "container": pin, "paths": {"run_dir": str(real.run_dir), "record": str(real.record),
                                        "archive_dir": str(real.archive_dir)},
            # placing the run on named nodes later (every-node acceptance) may number cores per socket
            "usable_node": launchers.usable_node(site.node),
            # what a run job checks before it renders its files again (exabench.rendered)
            "rendered_from": rendered.source_digest(entry, site.path, real.spec, spec_resolved=True)}


def run_files(run: Run, site: Site, paths: RunPaths, folders: dict[str, Path] | None = None
              ) -> list[tuple[Path, str, int]]:
    """(path, text, mode) of one run's spec.json and job.sh, rendered, not written."""
    real = real_paths(paths, folders)
    text, line = render_script(run, site, paths, real)
    # A key a line, made by the C encoder: indent= takes the pure-Python one (1.5 s of 10,000 specs).
    spec = json.dumps(run_spec(run, site, paths, line, real), sort_keys=True, separators=(",\n", ": ")) + "\n"
    return [(paths.spec, spec, 0o644), (paths.script, text, 0o755)]


def write_run_files(run: Run, site: Site, paths: RunPaths) -> None:
    from exabench.io import atomic_write_many
    atomic_write_many(run_files(run, site, paths))


def write_runs_files(runs: list[Run], site: Site, root: Path, workers: int | None = None) -> int:
    """Render every run of `runs` under `root`, then write all their files atomically in one batch
    (every file synced before any is renamed into place; see io.atomic_write_many). A file that
    already holds what it would be written with is left alone: a campaign rendered again after one
    run changed writes (and syncs) that run's files only. Returns how many files were written.
    A large campaign is shared among `workers` processes (default: render_workers.worker_count),
    each share one such batch."""
    from exabench.campaign import render_workers
    from exabench.io import atomic_write_many
    workers = render_workers.worker_count(len(runs)) if workers is None else workers
    if workers > 1:
        return render_workers.write_shares(runs, site, root, workers, write_runs_files_here, helper=__spec__.name)
    root = Path(root)
    folders = real_folders(root)
    files = []
    for run in runs:
        files += [f for f in run_files(run, site, RunPaths(root, run.run_id), folders) if not _holds(*f)]
    atomic_write_many(files)
    return len(files)


def write_runs_files_here(runs: list[Run], site: Site, root: Path) -> int:
    """write_runs_files in this process alone (a render helper's share)."""
    return write_runs_files(runs, site, root, workers=1)


def render_own_files(spec_path: str | Path, site_path: str | Path, run_json: str) -> int:
    """A run job's first step (run.smk): its own job.sh and spec.json, rendered from its plan entry
    for the site, written where they changed. The run job renders its own files, not a campaign-wide
    job upstream of it: Snakemake does not re-evaluate the jobs below a job that must run (a changed
    or forced run below a re-rendered campaign would keep its old record), so nothing that can need
    to run sits above the run jobs but the images they run in."""
    from exabench.campaign.site import load_site
    spec_path = Path(spec_path)
    return write_runs_files([Run.from_dict(json.loads(run_json))], load_site(site_path), spec_path.parents[2])


def _holds(path: Path, text: str, mode: int) -> bool:
    """The file exists with this text and mode."""
    try:
        return (path.stat().st_mode & 0o777) == mode and path.read_text() == text
    except (OSError, UnicodeDecodeError):
        return False


# --- bundle mode: one allocation runs a whole sweep -------------------------------------------

def bundle_layout(runs: list[Run]) -> Layout:
    """The allocation a bundle needs: the most nodes any of its runs uses."""
    widest = max(runs, key=lambda r: (r.layout.nodes, r.layout.ranks_per_node))
    return widest.layout


def render_bundle(runs: list[Run], site: Site, root: Path, name: str, concurrent: bool = False) -> str:
    """One batch script that runs every run of `runs` in turn inside one allocation, or all at
    once with `concurrent` (MLPerf-HPC throughput: M instances side by side; the allocation then
    holds the nodes of all of them, and each launch line takes its own share).

    Each run goes through `exabench execute` (the same path as a Snakemake job), so each
    writes its own record under results/<site>/records/, which the aggregate rule reads.
    """
    if not runs:
        raise ConfigError(site.path or site.name, "bundle", name, "at least one planned run", "is empty")
    minutes = runs_walltime_min(site, runs, "bundle", concurrent)
    root = Path(root).resolve()
    bundle_dir = root / "bundles"
    layout = bundle_layout(runs)
    if concurrent:
        layout = dataclasses.replace(layout, nodes=sum(r.layout.nodes for r in runs))
    job = f"exabench-{name}"
    if len(job) > 64:  # batch_request keeps 64 characters: keep the end too, which tells split bundles apart
        job = job[:52] + job[-12:]
    alloc = allocation.common_request(site, [r.layout for r in runs], f"bundle {name}")
    request = batch_request(site, layout, job, minutes, bundle_dir, alloc)
    specs = [str(RunPaths(root, r.run_id).spec.resolve()) for r in runs]
    return batch_script(site, request, name, len(runs), bundle_dir, _bundle_body(site, specs, concurrent))


def runs_walltime_min(site: Site, runs: list[Run], what: str, concurrent: bool = False) -> int:
    """The time limit of one allocation running `runs` in turn (their limits summed) or side by side
    (`concurrent`: the longest, on all their nodes), plus the margin; checked against the site's
    limit and its queues."""
    if concurrent:
        nodes, how = sum(r.layout.nodes for r in runs), "longest timeout_s"
    else:
        nodes, how = bundle_layout(runs).nodes, "timeout_s summed"
    try:
        return allocation.asked_minutes(site, nodes, [r.timeout_s for r in runs], side_by_side=concurrent)
    except LayoutError as exc:
        raise LayoutError(site.name, f"{what} walltime_min ({len(runs)} runs' {how})", exc.value,
                          exc.limit + "; split the campaign or lower timeout_s") from None


def batch_script(site: Site, request: dict, name: str, count: int, workdir: Path, body: str) -> str:
    """A batch script running `body` (several runs, each through `exabench execute`) in one
    allocation: the site's header for `request` and its modules; each run sets its own environment."""
    return _env().get_template(f"batch/{site.scheduler}.sh.j2").render(
        run=None, bundle={"name": name, "count": count}, site=site, env={}, req=request,
        setup=_setup_lines(site), stage_in=[], workdir=str(workdir), launch_line=body)


def write_bundle(runs: list[Run], site: Site, root: Path, name: str, out: Path, concurrent: bool = False) -> None:
    from exabench.io import atomic_write_text
    atomic_write_text(out, render_bundle(runs, site, root, name, concurrent), mode=0o755)


def bundle_path(root: Path, bundle: Bundle) -> Path:
    """Where a bundle's script goes: <results>/bundles/<bundle name>.sh."""
    return Path(root) / "bundles" / f"{bundle.name}.sh"


def write_bundles(bundles: list[Bundle], site: Site, root: Path, campaign: str = "") -> list[Path]:
    """Render the script of every bundle of a plan (exabench.campaign.bundles), then write them all
    in one batch, none if one fails to render. With `campaign`, the campaign's scripts of an earlier
    plan that this one no longer has (<campaign>.sh, <campaign>-NN-of-NN.sh) are removed, so that
    submitting every script in the folder submits this plan."""
    from exabench.io import atomic_write_many
    files = [(bundle_path(root, b), render_bundle(list(b.runs), site, root, b.name), 0o755) for b in bundles]
    atomic_write_many(files)
    paths = [f[0] for f in files]
    if campaign:
        mine = re.compile(rf"{re.escape(campaign)}(-\d+-of-\d+)?\.sh")
        for old in (Path(root) / "bundles").glob(f"{campaign}*.sh"):
            if mine.fullmatch(old.name) and old not in paths:
                old.unlink()
    return paths


def _bundle_body(site: Site, specs: list[str], concurrent: bool = False) -> str:
    py = shlex.quote(site.python_executable)
    lines = ["failed=0"]
    if concurrent:  # start every run, then wait for each
        lines.append("pids=()")
        lines += [f"{py} -m exabench execute --spec {shlex.quote(spec)} & pids+=($!)" for spec in specs]
        lines.append('for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done')
    else:
        lines += [f"{py} -m exabench execute --spec {shlex.quote(spec)} || failed=$((failed + 1))" for spec in specs]
    lines.append('echo "exabench bundle: $failed run(s) failed to execute"')
    return "\n".join(lines)


if __name__ == "__main__":  # a render helper (render_workers): its share of a large campaign
    import sys

    from exabench.campaign import render_workers

    sys.exit(render_workers.serve(write_runs_files_here))
