"""The stand-ins as commands: `python -m exabench.rehearsal.standins <tool> ARGS...`, and the folder
of small executables (bsub, qsub, jsrun, aprun, mpiexec, ibrun, singularity, apptainer, module) a
rehearsal puts first on PATH, so that a site's scripts run unchanged.

A refusal prints the centre's rule and its source on stderr and exits 1, as the real command would
refuse the job; every decision goes to the rehearsal's log.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from exabench.campaign import schedulers
from exabench.campaign.site import Site, load_site
from exabench.errors import ExabenchError
from exabench.rehearsal import batch, launch
from exabench.rehearsal.rules import ENV, Refused, book, log_event, refuse, setting

TOOLS = ("bsub", "qsub", "jsrun", "aprun", "mpiexec", "ibrun", "sbatch", "srun", "singularity", "apptainer",
         "shifter", "podman-hpc", "module")
CONTAINERS = ("singularity", "apptainer", "shifter", "podman-hpc")


def write_bin(folder: Path, python: str = sys.executable) -> Path:
    """The stand-ins as executables in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        path = folder / tool
        path.write_text(f'#!/bin/sh\nexec "{python}" -m exabench.rehearsal.standins {tool} "$@"\n')
        path.chmod(0o755)
    return folder


def environment(site_file: str, state: Path, bin_dir: Path, ranks: int) -> dict:
    """The variables a rehearsal runs its commands with: the stand-ins first on PATH."""
    state, bin_dir = Path(state).resolve(), Path(bin_dir).resolve()
    return {ENV + "SITE": str(Path(site_file).resolve()), ENV + "STATE": str(state),
            ENV + "LOG": str(state / "decisions.jsonl"), ENV + "BIN": str(bin_dir), ENV + "RANKS": str(ranks),
            "PATH": str(bin_dir) + os.pathsep + os.environ.get("PATH", "")}


def submit_book(tool: str, site: Site) -> str:
    """The rule book of the site's submit command: LSF's bsub, or qsub of Cobalt, Torque (Titan's
    `-l nodes=`) or PBS Pro, as the site's scheduler module names it (FACTS.rehearsal_book)."""
    return schedulers.rehearsal_book(site, tool)


def launcher_book(tool: str, site: Site) -> str:
    if tool == "mpiexec":   # HPE Cray MPICH is launched by PALS; another MPICH by Hydra
        return "mpiexec-pals" if site.mpi == "cray-mpich" else "mpiexec-hydra"
    return tool


def _stdin_origin() -> str | None:
    """The file a `bsub < job.sh` redirected to standard input, as the log names scripts (relative to
    the working directory), or None (a pipe)."""
    try:
        origin = os.readlink("/proc/self/fd/0")
    except OSError:
        return None
    return os.path.relpath(origin) if os.path.isfile(origin) else None


def submit(tool: str, argv: list[str], site: Site) -> int:
    name = submit_book(tool, site)
    words = list(argv)
    script_arg = words.pop() if words and not words[-1].startswith("-") and Path(words[-1]).is_file() else None
    if script_arg is None:   # `bsub < script`: the script on stdin, kept as a file to run
        if sys.stdin is None or sys.stdin.isatty():
            raise ExabenchError(f"no job script: give one as the last argument ({tool} job.sh) or on stdin "
                                f"({tool} < job.sh)")
        text = sys.stdin.read()
        script = batch.state_dir() / f"stdin-{os.getpid()}.sh"
        script.write_text(text)
        script_arg = _stdin_origin()
    else:
        script = Path(script_arg).resolve()
        text = script.read_text()
        if tool == "bsub" and book(name)["directive"] in text:
            raise refuse(name, "script_on_stdin", f"bsub {script_arg}: its #BSUB lines would be ignored; "
                                                  f"submit it as bsub < {script_arg}")
        if name == "cobalt-alcf" and not os.access(script, os.X_OK):
            raise refuse(name, "executable", f"{script_arg} is not executable")
    opts = batch.parse_options(name, batch.directives(text, book(name)["directive"]) + words)
    job = batch.job_of(name, opts, site)
    entry = batch.check_queue(name, job, site)
    job_id, rc = batch.run_job(name, job, entry, script)
    log_event(tool, "accepted", str(script_arg or "stdin"), book=name, job=job_id, nodes=job.nodes,
              minutes=job.minutes, queue=entry, exit=rc)
    print(f"Job <{job_id}> is submitted to queue <{entry}>." if tool == "bsub" else f"{job_id}.rehearsal")
    return 0


def start(tool: str, argv: list[str], site: Site) -> int:
    name = launcher_book(tool, site)
    line = launch.parse(name, argv)
    ranks = launch.CHECKS[name](site, line, launch.job_nodes(name))
    cmd, here = launch.ranks_argv(ranks, line)
    scaled = launch.threads_here(here)
    env = {**os.environ, **line.env, **scaled}
    if os.geteuid() == 0:   # Open MPI refuses root unless told (this container runs as root)
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    rc = subprocess.call(cmd, env=env)
    under_slurm = Path(cmd[0]).name == "srun"   # a Slurm rehearsal: a step of the real job (launch.ranks_argv)
    log_event(tool, "accepted", " ".join([tool, *argv])[:300], book=name, ranks=ranks, ranks_here=here,
              threads=line.env.get("OMP_NUM_THREADS", ""), threads_here=scaled["OMP_NUM_THREADS"],
              job=setting("JOB") or os.environ.get("SLURM_JOB_ID", ""), exit=rc,
              **({"note": "ranks started by the real srun --mpi=pmix within the job"} if under_slurm else {}))
    return rc


# A runtime's subcommand, and whether an image word comes before the program (Shifter's is --image=).
RUNTIME_FORM = {"singularity": ("exec", True), "apptainer": ("exec", True), "podman-hpc": ("run", True),
                "shifter": (None, False)}


def container(tool: str, argv: list[str]) -> int:
    """`singularity|apptainer exec [options] IMAGE CMD...`, `podman-hpc run [options] IMAGE CMD...`,
    `shifter [options] CMD...`: no image is built or pulled here, so the command runs on this machine's
    own Python, with the --env variables the line sets."""
    sub, has_image = RUNTIME_FORM[tool]
    if sub and (not argv or argv[0] != sub):
        raise ExabenchError(f"{tool} {' '.join(argv[:2])}: the rehearsal's {tool} runs `{tool} {sub}` only")
    env, i = dict(os.environ), 1 if sub else 0
    image = ""
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        if word.startswith(("--env=", "-e=")):
            key, _, val = word.split("=", 1)[1].partition("=")
            # the threads the launch stand-in scaled to this machine stay scaled
            env[key] = os.environ.get("EXABENCH_MAX_THREADS", val) if key == "OMP_NUM_THREADS" else val
        elif word.startswith("--image="):
            image = word[8:]
        elif word in ("--bind", "-B", "--env", "--pwd", "--home", "--volume", "-v", "-e"):
            i += 1
        i += 1
    if has_image:
        image, i = argv[i], i + 1
    program = argv[i:]
    if program and program[0] in ("python", "python3"):   # the image's Python: here, the rehearsal's own
        program = [sys.executable, *program[1:]]
    log_event(tool, "ran natively", image, note="no image here: the program ran on this machine's Python")
    return subprocess.call(program, env=env)


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    if tool == "module":
        log_event(tool, "skipped", " ".join(args), note="no environment modules here")
        return 0
    try:
        if tool in CONTAINERS:
            return container(tool, args)
        if not setting("SITE"):
            raise ExabenchError(f"exabench's rehearsal stand-in for {tool} runs under `exabench rehearse`; valid: "
                                f"{ENV}SITE naming the site file whose rules it checks")
        site = load_site(setting("SITE"))
        if tool in ("sbatch", "srun"):
            from exabench.rehearsal import slurm
            return slurm.sbatch(args, site) if tool == "sbatch" else slurm.srun(args, site)
        return submit(tool, args, site) if tool in ("bsub", "qsub") else start(tool, args, site)
    except Refused as exc:
        log_event(tool, "refused", " ".join(args)[:300], rule=exc.rule.name, source=exc.rule.source, why=str(exc))
        print(exc, file=sys.stderr)
        return 1
    except ExabenchError as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def check_rendered(site: Site, results: Path) -> tuple[int, list[str]]:
    """Every bundle script's directives and every run's launch line under `results` checked as the
    stand-ins would at submission and launch, nothing run: (lines checked, refusals)."""
    if site.scheduler == "slurm":  # the real loopback Slurm's stand-ins (exabench.rehearsal.slurm)
        from exabench.rehearsal import slurm
        return slurm.check_rendered(site, results)
    submit_name = schedulers.rehearsal_book(site)
    launch_name, prefix = launcher_book(site.launcher, site), book(submit_name)["directive"]
    checked, refused = 0, []
    for script in [*sorted((results / "bundles").glob("*.sh")), *sorted((results / "runs").glob("*/job.sh"))]:
        text = script.read_text()
        try:
            checked += 1
            job = batch.job_of(submit_name, batch.parse_options(submit_name, batch.directives(text, prefix)), site)
            batch.check_queue(submit_name, job, site)
            for line in (x for x in text.splitlines() if x.startswith(site.launcher + " ")):
                checked += 1
                launch.CHECKS[launch_name](site, launch.parse(launch_name, shlex.split(line)[1:]), job.nodes)
        except Refused as exc:
            refused.append(f"{script.relative_to(results)}: {exc}")
    return checked, refused
