"""Render a run's job script: a batch header for the site's scheduler and a launch
line for its launcher. The arithmetic (ranks, mapping, threads) is here, tested;
the Jinja templates in workflow/templates/ only format."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .config import REPO_ROOT
from .plan import Run
from .site import Layout, Site

TEMPLATE_DIR = REPO_ROOT / "workflow" / "templates"
# Thread-count variables every BLAS/OpenMP runtime reads, set so ranks never oversubscribe cores.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
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


def run_environment(site: Site, layout: Layout, run_id: str) -> dict[str, str]:
    env = {k: str(layout.threads_per_rank) for k in THREAD_VARS}
    env.update({k: str(v) for k, v in site.env.items()})
    env["EXABENCH_RUN_ID"] = run_id
    return env


def program_argv(site: Site, spec_path: Path) -> list[str]:
    return [site.python_executable, "-m", "exabench.runner", "--spec", str(Path(spec_path).resolve())]


def launch_argv(site: Site, layout: Layout, program: list[str], env: dict[str, str]) -> list[str]:
    """The launcher's command line for `program` on `layout` (one list of arguments)."""
    template = _env().get_template(f"launch/{site.launcher}.j2")
    if site.launcher == "local" and layout.ranks != 1:
        from .errors import LayoutError
        raise LayoutError(site.name, "ranks", layout.ranks, "1 with launcher 'local' (use mpirun or torchrun)")
    if site.launcher == "torchrun":
        # torchrun execs its own interpreter for the workers: run it as a module of ours.
        program = [program[0], "-m", "torch.distributed.run", *_torchrun_args(layout), "-m", *program[2:]]
    text = template.render(layout=layout, program=program, exports=sorted(env))
    return shlex.split(text)


def _torchrun_args(layout: Layout) -> list[str]:
    if layout.nodes == 1:
        return ["--standalone", "--nnodes", "1", "--nproc-per-node", str(layout.ranks_per_node)]
    raise NotImplementedError("multi-node torchrun needs a rendezvous host (site launcher srun/jsrun instead)")


def render_script(run: Run, site: Site, paths: RunPaths) -> tuple[str, str]:
    """(job script text, launch line) for one run."""
    env = run_environment(site, run.layout, run.run_id)
    argv = launch_argv(site, run.layout, program_argv(site, paths.spec), env)
    line = shlex.join(argv)
    text = _env().get_template(f"batch/{site.scheduler}.sh.j2").render(
        run=run, site=site, env=env, workdir=str(paths.run_dir.resolve()), launch_line=line)
    return text, line


def run_spec(run: Run, site: Site, paths: RunPaths, launch_line: str) -> dict:
    """Everything the runner needs, resolved: it reads no config or site file itself."""
    env = run_environment(site, run.layout, run.run_id)
    return {"spec_version": 1, **run.to_dict(), "site": site.name, "launch_line": launch_line, "env": env,
            "paths": {"run_dir": str(paths.run_dir.resolve()), "record": str(paths.record.resolve()),
                      "archive_dir": str(paths.archive_dir.resolve())}}


def write_run_files(run: Run, site: Site, paths: RunPaths) -> None:
    from .results import atomic_write_text
    text, line = render_script(run, site, paths)
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(paths.spec, json.dumps(run_spec(run, site, paths, line), indent=2, sort_keys=True) + "\n")
    atomic_write_text(paths.script, text, mode=0o755)
