"""The Slurm stand-ins (sbatch, srun) of a rehearsal through a real Slurm on this machine (the
loopback cluster of scripts/slurm-local.sh): each checks a site's #SBATCH directives or srun line
against the Slurm rule book (rules/sbatch-slurm.yaml, rules/srun-slurm.yaml: sbatch(1), srun(1) and
the centres' pages) and the site file (its queues, its node shape), refuses what the centre would
refuse, then changes what the loopback cluster cannot give (the books' `loopback` sections: the
site's partitions, QOS, accounts, node features, GPUs and SPANK options go; nodes, tasks, CPUs,
memory and walltime are scaled to what it has) and hands the job or step to the real sbatch or srun.

The counts the site asked for travel with the job (EXABENCH_REHEARSAL_NODES, _TASKS), so that the
launch lines inside it are checked against the job the centre would have given.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from exabench.campaign.allocation import queue_key
from exabench.campaign.site import Site
from exabench.errors import ExabenchError
from exabench.rehearsal import batch, launch
from exabench.rehearsal.rules import ENV, Refused, Rule, book, log_event, real_command, setting
from exabench.rehearsal.rules import refuse as launch_refuse

SBATCH, SRUN = "sbatch-slurm", "srun-slurm"
# The loopback cluster, as sinfo gives it (rehearse writes it for the stand-ins):
# nodes, CPUs per node, memory per node (MB), partition, its MaxTime in minutes.
HERE_FIELDS = ("nodes", "cpus", "memory_mb", "partition", "minutes")


@dataclass(frozen=True)
class Here:
    nodes: int
    cpus: int
    memory_mb: int
    partition: str
    minutes: int


def site_rule(book_name: str, name: str, site: Site) -> Rule:
    """The site's own rule (`name@site`) where its book has one, else the general one."""
    rules = book(book_name)["rules"]
    key = f"{name}@{site.name}" if f"{name}@{site.name}" in rules else name
    return Rule(key, rules[key]["says"], rules[key]["source"])


def site_rule_entry(book_name: str, name: str, site: Site) -> dict:
    rules = book(book_name)["rules"]
    return rules.get(f"{name}@{site.name}", rules[name])


def refuse(book_name: str, name: str, site: Site, detail: str) -> Refused:
    return Refused(book(book_name)["tool"], site_rule(book_name, name, site), detail)


LOOPBACK_HINT = ("valid: the loopback Slurm started with `bash scripts/slurm-local.sh start` and "
                 "`source /tmp/exabench-slurm/env.sh`")


def probe(env: dict) -> Here:
    """The cluster SLURM_CONF names: its default partition's nodes, CPUs, memory and time limit."""
    conf = env.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):  # else sinfo retries the missing file for 60 s before it says so
        raise ExabenchError(f"no Slurm cluster answers (SLURM_CONF={conf}): no such file; " + LOOPBACK_HINT)
    try:
        out = subprocess.run([shutil.which("sinfo", path=env.get("PATH")) or "sinfo", "-h", "-o", "%D %c %m %P %l"],
                             env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        out = subprocess.CompletedProcess([], 1, "", str(exc))
    lines = out.stdout.split("\n")
    default = next((line for line in lines if "*" in line), lines[0]).split()
    if out.returncode or len(default) < 5:
        said = " ".join((out.stderr or out.stdout).split())[:200]   # sinfo's words, on the one line
        raise ExabenchError(f"no Slurm cluster answers (SLURM_CONF={env.get('SLURM_CONF', 'unset')}): {said}; "
                            + LOOPBACK_HINT)
    return Here(int(default[0]), int(default[1].rstrip("+")), int(default[2].rstrip("+")), default[3].rstrip("*"),
                _minutes(default[4]) or 60)


def here_setting(h: Here) -> str:
    return ",".join(str(getattr(h, f)) for f in HERE_FIELDS)


def here() -> Here:
    parts = setting("HERE").split(",")
    if len(parts) != len(HERE_FIELDS):
        raise ExabenchError(f"{ENV}HERE is not set: the Slurm stand-ins run under `exabench rehearse`")
    return Here(int(parts[0]), int(parts[1]), int(parts[2]), parts[3], int(parts[4]))


def _minutes(text: str) -> int | None:
    """sbatch's --time forms (and sinfo's limit): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; None if none."""
    days, _, rest = text.rpartition("-") if "-" in text else ("0", "", text)
    parts = rest.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    nums = [int(p) for p in parts]
    if "-" in text:   # D-H[:M[:S]]
        nums += [0] * (3 - len(nums))
        return int(days) * 1440 + nums[0] * 60 + nums[1] + (nums[2] > 0)
    if len(nums) == 3:
        return nums[0] * 60 + nums[1] + (nums[2] > 0)
    return nums[0] + (len(nums) == 2 and nums[1] > 0)


def _megabytes(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", text.upper())
    if not match:
        return None
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[match.group(2)]
    return int(int(match.group(1)) * scale)


# --- options --------------------------------------------------------------------------------------

@dataclass
class Options:
    values: dict = field(default_factory=dict)   # long option -> its last value ("yes" for a flag)
    order: list = field(default_factory=list)    # (long option, value) as given
    program: list = field(default_factory=list)  # what follows the options (srun)

    def int(self, option: str, default: int = 0) -> int:
        return int(self.values[option]) if option in self.values else default


def _kinds(book_name: str) -> tuple[dict, dict]:
    """(long option -> kind, spelling -> long option) of a book."""
    spec = book(book_name)
    kinds, spellings = {}, {}
    for name, entry in spec["options"].items():
        kinds[name] = entry["kind"] if isinstance(entry, dict) else entry
        spellings[name] = name
        if isinstance(entry, dict) and entry.get("short"):
            spellings[entry["short"]] = name
    for short, name in spec.get("short", {}).items():
        spellings[short] = name
    return kinds, spellings


def _known_here(book_name: str, option: str, site: Site) -> bool:
    """Whether this site's Slurm knows `option`: a SPANK plugin's only where the site loads it (the
    sbatch book lists the sites; an srun option names its plugin, the site's container runtime)."""
    spec = book(book_name)
    sites = spec.get("spank", {}).get(option)
    if sites is not None:
        return site.name in sites
    entry = spec["options"][option]
    plugin = entry.get("spank") if isinstance(entry, dict) else None
    return plugin is None or (site.container or {}).get("runtime") == plugin


def parse(book_name: str, words: list[str], site: Site, program: bool = False) -> Options:
    """Options in each form (--nodes=2, --nodes 2, -N 2, -N2); with `program`, the first word that is
    not an option starts the program (srun's), else a stray word is refused."""
    kinds, spellings = _kinds(book_name)
    out = Options()
    i = 0
    while i < len(words):
        word, value = words[i], None
        if not word.startswith("-"):
            if program:
                out.program = words[i:]
                break
            raise refuse(book_name, "known_option", site, f"'{word}'")
        if word.startswith("--") and "=" in word:
            word, value = word.split("=", 1)
        elif not word.startswith("--") and len(word) > 2 and word[:2] in spellings:
            word, value = word[:2], word[2:]   # -N2
        name = spellings.get(word)
        if name is None:
            raise refuse(book_name, "known_option", site, f"'{words[i]}'")
        if not _known_here(book_name, name, site):
            raise refuse(book_name, "spank", site, f"'{words[i]}' on {site.name}")
        kind = kinds[name]
        if kind == "flag":
            value = "yes"
        elif value is None:
            i += 1
            if i >= len(words):
                raise refuse(book_name, "value_form", site, f"{word} without a value")
            value = words[i]
        if (kind == "int" and not value.isdigit()) or (kind == "time" and _minutes(value) is None) or \
                (kind == "size" and _megabytes(value) is None):
            raise refuse(book_name, "value_form", site, f"{word} {value}")
        allowed = book(book_name).get("choices", {}).get(name)
        if allowed and not all(item in allowed or any(c.endswith(":") and item.startswith(c) for c in allowed)
                               for item in value.split(",")):
            raise refuse(book_name, "value_form", site, f"{word} {value}")
        out.values[name] = value
        out.order.append((name, value))
        i += 1
    return out


def _check_shape(book_name: str, opts: Options, site: Site, nodes: int) -> int:
    """The node-shape rules both sbatch and srun apply; the tasks asked for."""
    n = site.node
    per_node = opts.int("--ntasks-per-node")
    tasks = opts.int("--ntasks", per_node * nodes if per_node else nodes)
    # The CPUs Slurm gives a job on one node: the usable cores (Frontier's low-noise mode keeps 8), as
    # many a core as the site's Slurm counts, or as --threads-per-core asks.
    cpus = n.usable_cores * max(n.scheduler_cpus_per_core, opts.int("--threads-per-core", 1))
    if (per_node or -(-tasks // max(nodes, 1))) * opts.int("--cpus-per-task", 1) > cpus:
        raise refuse(book_name, "node_fits", site, f"{per_node or -(-tasks // max(nodes, 1))} task(s) x "
                     f"--cpus-per-task {opts.int('--cpus-per-task', 1)} on a {site.name} node of {cpus} CPUs")
    if per_node and tasks > per_node * nodes:
        raise refuse(book_name, "tasks_fit_nodes", site, f"--ntasks {tasks} at --ntasks-per-node {per_node} on "
                     f"{nodes} node(s)")
    per_task = opts.int("--gpus-per-task")
    gpus = max(opts.int("--gpus-per-node"), per_task * (per_node or -(-tasks // max(nodes, 1))),
               -(-opts.int("--gpus") // max(nodes, 1)))
    if gpus > n.gpus:
        raise refuse(book_name, "gpus_fit", site, f"{gpus} GPU(s) a node on a {site.name} node of {n.gpus}")
    return tasks


# --- sbatch ---------------------------------------------------------------------------------------

@dataclass
class Mapped:
    options: list        # (long option, value) for the loopback cluster
    changes: list        # "option: site value -> here value (why)"
    nodes: int
    tasks: int


def check_job(opts: Options, site: Site) -> batch.Job:
    """The job an #SBATCH header asks for, checked against the book and the site file."""
    v = opts.values
    missing = [o for o in site_rule_entry(SBATCH, "required", site)["options"] if o not in v]
    if missing:
        raise refuse(SBATCH, "required", site, "missing " + ", ".join(missing))
    nodes = opts.int("--nodes", 1)
    _check_shape(SBATCH, opts, site, nodes)
    if "--mem" in v:
        if f"memory@{site.name}" in book(SBATCH)["rules"]:
            raise refuse(SBATCH, "memory", site, f"--mem {v['--mem']} on {site.name}")
        if site.node.memory_gb and _megabytes(v["--mem"]) > site.node.memory_gb * 1024:
            raise refuse(SBATCH, "memory_fits", site, f"--mem {v['--mem']} on a {site.name} node of "
                         f"{site.node.memory_gb:g} GB")
    if "--constraint" in v:
        known = book(SBATCH)["constraints"].get(site.name)
        wrong = [f for f in re.split(r"[,&|]", v["--constraint"]) if known is not None and f not in known]
        if wrong:
            raise refuse(SBATCH, "constraint", site, f"--constraint {v['--constraint']} ({', '.join(wrong)})")
    queue = v.get("--qos" if queue_key(site) == "qos" else "--partition", "")
    return batch.Job(nodes, _minutes(v.get("--time", "")) or 0, queue, v.get("--account", ""),
                     v.get("--job-name", "job"), {})


def check_queue(job: batch.Job, site: Site) -> str:
    """The site queue that admits the job (batch.check_queue, with this book's words)."""
    try:
        return batch.check_queue(SBATCH, job, site)
    except Refused as exc:
        raise Refused("sbatch", exc.rule, exc.detail) from None


def _scaled(option: str, value: str, opts: Options, h: Here, ranks: int) -> str | None:
    """`option`'s value on the loopback cluster (None: left out)."""
    nodes = min(opts.int("--nodes", 1), h.nodes)
    per_node = max(1, min(ranks // nodes, opts.int("--ntasks-per-node", ranks), h.cpus))
    if option == "--nodes":
        return str(nodes)
    if option == "--ntasks":
        return str(min(int(value), nodes * per_node))
    if option == "--ntasks-per-node":
        return str(per_node)
    if option == "--cpus-per-task":
        return value if int(value) * per_node <= h.cpus else str(max(1, h.cpus // per_node))
    if option == "--mem":   # the share of a node's memory a job asks (allocation.MEMORY_SHARE)
        return value if _megabytes(value) <= h.memory_mb * 0.9 else f"{int(h.memory_mb * 0.9)}M"
    if option == "--time":
        return value if _minutes(value) <= h.minutes else str(h.minutes)
    if option == "--partition":
        return h.partition
    return None


def map_job(opts: Options, h: Here, ranks: int) -> Mapped:
    rules = book(SBATCH)["loopback"]
    out, changes = [], []
    for option, value in opts.order:
        action, why = rules.get(option, ("keep", ""))
        new = value if action == "keep" else _scaled(option, value, opts, h, ranks) if action == "scale" else None
        if new is not None:
            out.append((option, new))
        if new != value:
            changes.append(f"{option} {value} -> {new if new is not None else '(removed)'} ({why})")
    if not any(o == "--partition" for o, _ in out):
        out.append(("--partition", h.partition))
    values = dict(out)
    nodes = int(values.get("--nodes", 1))
    tasks = int(values.get("--ntasks", nodes * int(values.get("--ntasks-per-node", 1))))
    return Mapped(out, changes, nodes, tasks)


def _body(text: str) -> list[str]:
    """The script without its #SBATCH lines (the first line, the shebang, kept apart)."""
    lines = text.splitlines()
    return [line for line in lines[1:] if not line.strip().startswith(book(SBATCH)["directive"])]


# A job's states past which it does not run again (squeue(1), JOB STATE CODES).
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
         "OUT_OF_MEMORY"}


def wait_for_job(job_id: str, every_s: float = 1.0) -> int:
    """The job's exit code once it has ended, asked of the controller every second. Not `sbatch --wait`,
    which asks after 2 s, 8 s more, then every 32 s (Slurm's src/sbatch/sbatch.c, _job_wait): each of a
    rehearsal's jobs, which last seconds here, was held up to 32 s past its end (Frontier's 39 bundles
    took 10, 42, 74, 106 or 138 s, each)."""
    while True:
        shown = subprocess.run([real_command("scontrol"), "show", "job", "-o", job_id], capture_output=True, text=True)
        if "Invalid job id" in shown.stderr:   # ended and purged (MinJobAge) between two questions: unknown end
            sys.stderr.write(f"sbatch: job {job_id} ended and left the controller's records: {shown.stderr.strip()}\n")
            return 1
        fields = dict(w.split("=", 1) for w in shown.stdout.split() if "=" in w)
        state = fields.get("JobState", "").split("+")[0]   # CANCELLED+: by a user
        if state in ENDED:
            code, _, signal = fields.get("ExitCode", "0:0").partition(":")
            if int(signal or 0):   # killed by a signal: 1, as sbatch --wait says it
                return 1
            return int(code or 0) or (0 if state == "COMPLETED" else 1)   # a cancelled job is no success here
        time.sleep(every_s)   # running, pending, completing; or the controller did not answer: asked again


def sbatch(argv: list[str], site: Site) -> int:
    """`sbatch [options] script`: checked, mapped to the loopback cluster, run there to its end."""
    words = [w for w in argv if w not in ("--wait", "-W", "--parsable")]
    script_arg = words.pop() if words and Path(words[-1]).is_file() else None
    if script_arg is None:
        raise ExabenchError("no job script: give one as the last argument (sbatch job.sh)")
    script = Path(script_arg).resolve()
    text = script.read_text()
    opts = parse(SBATCH, batch.directives(text, book(SBATCH)["directive"]) + words, site)
    job = check_job(opts, site)
    entry = check_queue(job, site)
    h, ranks = here(), int(setting("RANKS", "2"))
    mapped = map_job(opts, h, ranks)
    state = batch.state_dir() / "slurm"
    state.mkdir(parents=True, exist_ok=True)
    copy = state / f"{len(list(state.glob('*.sh'))) + 1:03d}-{script.name}"
    kinds, directive = _kinds(SBATCH)[0], book(SBATCH)["directive"]
    header = [f"{directive} {o}" if kinds[o] == "flag" else f"{directive} {o}={v}" for o, v in mapped.options]
    copy.write_text("\n".join([text.splitlines()[0], *header, *_body(text)]) + "\n")
    asked_tasks = opts.int("--ntasks", opts.int("--ntasks-per-node", 1) * job.nodes)
    env = {**os.environ, ENV + "NODES": str(job.nodes), ENV + "TASKS": str(asked_tasks)}
    proc = subprocess.run([real_command("sbatch"), "--parsable", str(copy)], env=env, capture_output=True, text=True)
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id:   # the site's rules let it through, the loopback controller did not: this machine's limit
        log_event("sbatch", "not run here", script_arg, book=SBATCH, exit=proc.returncode,
                  note=f"the loopback cluster's sbatch: {proc.stderr.strip()[-200:]}")
        sys.stderr.write(proc.stderr)
        return proc.returncode or 1
    proc.returncode = wait_for_job(job_id)
    log_event("sbatch", "accepted", script_arg, book=SBATCH, job=job_id, nodes=job.nodes, minutes=job.minutes,
              queue=entry, tasks=asked_tasks, nodes_here=mapped.nodes, tasks_here=mapped.tasks,
              mapped=mapped.changes, exit=proc.returncode,
              note=f"asked {job.nodes} node(s) x {asked_tasks} task(s), rehearsed on {mapped.nodes} x {mapped.tasks}")
    sys.stderr.write(proc.stderr)
    print(f"Submitted batch job {job_id}")
    return proc.returncode


# --- srun -----------------------------------------------------------------------------------------

def srun(argv: list[str], site: Site) -> int:
    """`srun [options] program`: checked against the job the site's header asked for, then run through
    the real srun within the loopback job, scaled to it."""
    inside = book(SRUN)["inside"]
    if not os.environ.get(inside):
        raise refuse(SRUN, "inside", site, f"no {inside} in the environment")
    opts = parse(SRUN, argv, site, program=True)
    if not opts.program:
        raise refuse(SRUN, "known_option", site, "no program to launch")
    job_nodes = int(setting("NODES") or os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    nodes = opts.int("--nodes", job_nodes)
    if nodes > job_nodes:
        raise refuse(SRUN, "step_fits_job", site, f"--nodes {nodes} in a job of {job_nodes} node(s)")
    tasks = _check_shape(SRUN, opts, site, nodes)
    have_nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    have_tasks = int(os.environ.get("SLURM_NTASKS", "0") or 0) or have_nodes
    tasks_here = max(1, min(tasks, have_tasks, int(setting("RANKS", "2"))))
    nodes_here = min(nodes, have_nodes, tasks_here)
    rules = book(SRUN)["loopback"]
    line, changes = [f"--nodes={nodes_here}", f"--ntasks={tasks_here}", "--mpi=pmix"], []
    for option, value in opts.order:
        action, why = rules.get(option, ("keep", ""))
        if action == "keep":
            line.append(option if value == "yes" else f"{option}={value}")
        elif option not in ("--nodes", "--ntasks") and not (option == "--mpi" and value == "pmix"):
            changes.append(f"{option} {value} -> {'pmix' if option == '--mpi' else '(removed)'} ({why})")
    if "--mpi" not in opts.values:
        changes.append(f"--mpi=pmix added ({rules['--mpi'][1]})")
    program = list(opts.program)
    if "--container-image" in opts.values:   # no Pyxis: the image's Python is this machine's
        program = [sys.executable if w in ("python", "python3") else w for w in program]
    scaled = launch.threads_here(max(1, -(-tasks_here // nodes_here)))  # the ranks on each (loopback) node share it
    rc = subprocess.call([real_command("srun"), *line, *program], env={**os.environ, **scaled})
    log_event("srun", "accepted", " ".join(["srun", *argv])[:300], book=SRUN, job=os.environ.get("SLURM_JOB_ID"),
              ranks=tasks, ranks_here=tasks_here, nodes=nodes, nodes_here=nodes_here, mapped=changes,
              threads=os.environ.get("OMP_NUM_THREADS", ""), threads_here=scaled["OMP_NUM_THREADS"], exit=rc)
    return rc


# --- render + check ---------------------------------------------------------------------------------

def check_rendered(site: Site, results: Path) -> tuple[int, list[str]]:
    """Every batch script (bundles, every-node, runs) and its srun lines under `results` checked as the
    stand-ins would at submission and launch, nothing run: (lines checked, refusals)."""
    checked, refused = 0, []
    scripts = [*sorted((results / "bundles").glob("*.sh")), *sorted((results / "runs").glob("*/job.sh"))]
    for script in scripts:
        text = script.read_text()
        try:
            checked += 1
            opts = parse(SBATCH, batch.directives(text, book(SBATCH)["directive"]), site)
            job = check_job(opts, site)
            check_queue(job, site)
            for raw in (x for x in text.splitlines() if x.startswith("ibrun ")):
                checked += 1
                ibrun = launch.parse("ibrun", raw.split()[1:])
                tasks = opts.int("--ntasks", job.nodes)
                if ibrun.values.get("offset", 0) + ibrun.values.get("ranks", tasks) > tasks:
                    raise launch_refuse("ibrun", "ranks_fit_job", f"{raw[:40]} in a job of {tasks} task(s)")
            for raw in (x for x in text.splitlines() if x.startswith("srun ")):
                checked += 1
                line = parse(SRUN, raw.split()[1:], site, program=True)
                if line.int("--nodes", job.nodes) > job.nodes:
                    raise refuse(SRUN, "step_fits_job", site, f"--nodes {line.int('--nodes')} in a job of "
                                 f"{job.nodes} node(s)")
                _check_shape(SRUN, line, site, line.int("--nodes", job.nodes))
        except Refused as exc:
            refused.append(f"{script.relative_to(results)}: {exc}")
    return checked, refused
