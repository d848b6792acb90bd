"""The submit stand-ins (bsub; qsub of PBS Pro, Torque and Cobalt): read a script's directives and
the command line's options, check them against the centre's rule book and the site file's queues,
and run an accepted script at once, as the batch job would, with the variables that scheduler sets.

Nodes are scaled down to this one machine: the job's node file lists this host, while
EXABENCH_REHEARSAL_NODES keeps the count the header asked for (the launchers check against it).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from exabench.campaign.site import Site
from exabench.processes import alive
from exabench.rehearsal.rules import ENV, Refused, Rule, book, refuse, rule, setting


@dataclass(frozen=True)
class Job:
    nodes: int
    minutes: int
    queue: str
    account: str
    name: str
    options: dict   # option -> its values, in order


def directives(text: str, prefix: str) -> list[str]:
    """The directive words of a script: its `prefix` lines up to the first command, as the
    schedulers read them."""
    words: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(prefix):
            words += shlex.split(stripped[len(prefix):])
        elif stripped and not stripped.startswith("#"):
            break
    return words


def parse_options(book_name: str, words: list[str]) -> dict[str, list[str]]:
    """option -> values; an unknown option (or a stray word) is refused."""
    known = book(book_name)["options"]
    out: dict[str, list[str]] = {}
    i = 0
    while i < len(words):
        word, value = words[i], None
        if "=" in word and word.startswith("--"):
            word, value = word.split("=", 1)
        if word not in known:
            raise refuse(book_name, "known_option", f"'{words[i]}'")
        if known[word] == "flag":
            value = "yes"
        elif value is None:
            if i + 1 >= len(words):
                raise refuse(book_name, "value_form", f"{word} without a value")
            i += 1
            value = words[i]
        out.setdefault(word, []).append(value)
        i += 1
    return out


def minutes_of(book_name: str, option: str, text: str) -> int:
    """Walltime in minutes: [H:]M (LSF -W), H:M:S (PBS), M or H:M:S (Cobalt -t)."""
    parts = text.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        raise refuse(book_name, "value_form", f"{option} {text}")
    nums = [int(p) for p in parts]
    if len(nums) == 3:
        return nums[0] * 60 + nums[1] + (nums[2] > 0)
    return nums[0] * 60 + nums[1] if len(nums) == 2 else nums[0]


def whole(book_name: str, option: str, text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise refuse(book_name, "value_form", f"{option} {text}")
    return int(text)


def _resources(book_name: str, values: list[str]) -> dict[str, str]:
    known = book(book_name).get("resources", {})
    out: dict[str, str] = {}
    for value in values:
        for item in value.split(","):
            key, _, val = item.partition("=")
            if key not in known:
                raise refuse(book_name, "known_resource", f"-l {item}")
            out[key] = val
    return out


def _pbs_job(book_name: str, opts: dict, site: Site) -> tuple[int, int]:
    res = _resources(book_name, opts.get("-l", []))
    last = lambda o: opts[o][-1] if o in opts else None  # noqa: E731
    missing = [o for o in book(book_name)["rules"]["required"]["options"]
               if (o.startswith("-l ") and o[3:] not in res) or (not o.startswith("-l ") and last(o) is None)]
    if missing:
        raise refuse(book_name, "required", "missing " + ", ".join(missing))
    chunk = res.get("select") or res.get("nodes", "")
    count, *extra = chunk.split(":")
    nodes = whole(book_name, "-l select" if "select" in res else "-l nodes", count)
    for item in extra:
        key, _, val = item.partition("=")
        if key == "system" and val != site.name:
            raise refuse(book_name, "system", f"system={val} on {site.name}")
    allowed = book(book_name).get("filesystems", {}).get(site.name)
    if allowed is not None and "filesystems" in res:
        wrong = [f for f in res["filesystems"].split(":") if f not in allowed]
        if wrong or not res["filesystems"]:
            raise refuse(book_name, "filesystems", f"filesystems={res['filesystems']}")
    place = book(book_name).get("resource_choices", {}).get("place")
    if place and "place" in res and res["place"] not in place:
        raise refuse(book_name, "value_form", f"place={res['place']}")
    return nodes, minutes_of(book_name, "-l walltime", res["walltime"])


def job_of(book_name: str, opts: dict, site: Site) -> Job:
    """The job the options ask for, every option's form checked."""
    spec = book(book_name)
    opts = {**{k: [v] for k, v in spec.get("defaults", {}).items()}, **opts}
    for option, values in opts.items():
        allowed = spec.get("choices", {}).get(option)
        if allowed and any(v not in allowed for v in values):
            raise refuse(book_name, "value_form", f"{option} {values[-1]}")
    last = {k: v[-1] for k, v in opts.items()}
    if "-l" in spec["options"]:
        nodes, minutes = _pbs_job(book_name, opts, site)
    else:
        missing = [o for o in spec["rules"]["required"]["options"] if o not in last]
        if missing:
            raise refuse(book_name, "required", "missing " + ", ".join(missing))
        nodes = whole(book_name, "-nnodes" if "-nnodes" in last else "-n", last.get("-nnodes", last.get("-n", "")))
        minutes = minutes_of(book_name, "-W" if "-W" in last else "-t", last.get("-W", last.get("-t", "")))
    if spec["tool"] == "bsub":
        _check_lsf(book_name, last)
    if "--attrs" in last:
        _check_attrs(book_name, last["--attrs"])
    name = last.get("-J") or last.get("-N") or last.get("--jobname") or "job"
    return Job(nodes, minutes, last.get("-q", ""), last.get("-P") or last.get("-A", ""), name, opts)


def _check_lsf(book_name: str, last: dict) -> None:
    if last.get("-csm") == "y" and "-nnodes" in last:
        raise refuse(book_name, "csm_with_nnodes", "-csm y with -nnodes")
    allowed = book(book_name)["rules"]["alloc_flags"]["allowed"]
    wrong = [w for w in last.get("-alloc_flags", "").split() if w not in allowed]
    if wrong:
        raise refuse(book_name, "alloc_flags", f"-alloc_flags \"{' '.join(wrong)}\"")


def _check_attrs(book_name: str, text: str) -> None:
    allowed = book(book_name)["attrs"]
    for item in text.split(":"):
        key, _, val = item.partition("=")
        kind = allowed.get(key)
        if kind is None or (isinstance(kind, list) and val not in kind) or (kind == "int" and not val.isdigit()):
            raise refuse(book_name, "attrs", f"--attrs {item}")


def check_queue(book_name: str, job: Job, site: Site) -> str:
    """The site queue entry that admits the job (its name), or the refusal citing the queue's page."""
    if not site.queues:
        return job.queue
    base = rule(book_name, "queue")
    named = [q for q in site.queues if job.queue in (q.name, q.submit_as or q.name)]
    if not named:
        raise Refused(book(book_name)["tool"], base,
                      f"queue '{job.queue}' is not a queue of {site.name} (" + ", ".join(
                          dict.fromkeys(q.submit_as or q.name for q in site.queues)) + ")")
    fits = [q for q in named if q.admits(job.nodes, job.minutes, site.max_nodes) and job.minutes >= q.min_walltime_min]
    if not fits:
        shown = "; ".join(q.describe(site.max_nodes) for q in named)
        raise Refused(book(book_name)["tool"], Rule("queue", base.says, named[0].source or base.source),
                      f"{job.nodes} node(s) for {job.minutes} min in queue '{job.queue}' ({shown})")
    entry = fits[0]
    limit = entry.max_queued_per_user or entry.max_running_per_user
    if limit and len(jobs_in_flight(entry.name)) >= limit:
        per_user = rule(book_name, "per_user")
        raise Refused(book(book_name)["tool"], Rule("per_user", per_user.says, entry.source or per_user.source),
                      f"{limit} job(s) already in {entry.name} for this user")
    return entry.name


def state_dir() -> Path:
    path = Path(setting("STATE") or Path.home() / ".exabench-rehearsal")
    (path / "jobs").mkdir(parents=True, exist_ok=True)
    return path


def jobs_in_flight(queue: str) -> list[dict]:
    """The rehearsal's jobs still running in `queue` (a job file whose process is alive)."""
    found = []
    for path in (state_dir() / "jobs").glob("*.json"):
        try:
            held = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if held.get("queue") == queue and alive(held.get("pid", -1)):
            found.append(held)
    return found


def _next_id() -> int:
    counter = state_dir() / "last_job_id"
    number = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(number))
    return number


def _output(book_name: str, job: Job, job_id: int, script: Path) -> tuple[Path, Path]:
    spec, last = book(book_name)["output"], {k: v[-1] for k, v in job.options.items()}
    if "prefix" in spec and spec["prefix"] in last:  # Cobalt -O: <prefix>.output and .error
        return Path(last[spec["prefix"]] + ".output"), Path(last[spec["prefix"]] + ".error")
    stem = script.with_name(f"{job.name}.o{job_id}")
    out = Path(last.get(spec["out"], str(stem)).replace(spec.get("job_id_pattern", "\0"), str(job_id)))
    join = spec.get("join") and last.get(spec["join"]) == "oe"
    err = out if join else Path(last.get(spec["err"], f"{stem}.err").replace(spec.get("job_id_pattern", "\0"),
                                                                           str(job_id)))
    return out, err


def run_job(book_name: str, job: Job, queue_entry: str, script: Path) -> tuple[int, int]:
    """Run the accepted script now, as its batch job: (job id, the script's exit status)."""
    spec, state = book(book_name), state_dir()
    job_id = _next_id()
    host = socket.gethostname()
    hostfile = state / f"{job_id}.hosts"
    hostfile.write_text("".join(f"{h}\n" for h in (spec.get("hostfile_batch_node"), host) if h))
    values = {"id": job_id, "name": job.name, "queue": job.queue, "hostfile": hostfile, "nodes": job.nodes,
              "workdir": os.getcwd(), "account": job.account}
    env = {**os.environ, **{k: str(v).format(**values) for k, v in spec["job_env"].items()},
           ENV + "JOB": str(job_id), ENV + "NODES": str(job.nodes)}
    out, err = _output(book_name, job, job_id, script)
    record = state / "jobs" / f"{job_id}.json"
    with open(out, "a") as fo, open(err, "a") as fe:
        proc = subprocess.Popen(["bash", str(script)], env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
        record.write_text(json.dumps({"pid": proc.pid, "queue": queue_entry, "script": str(script)}))
        rc = proc.wait()
    record.unlink(missing_ok=True)
    return job_id, rc

