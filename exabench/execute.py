"""Run one rendered job script and make sure a record exists afterwards.

The benchmark's rank 0 writes the record when the run completes; when it does not
(a rank raised, the launcher failed, the time limit passed), this writes a record
with status `failed` or `timeout` and a readable error, so the campaign goes on and
the table shows why.

A run in progress holds `run.lock` in its run directory (owner PID, host, start time, the job's
process group): a second execution of the run is refused while the owner lives; an orphan (owner
dead on this host) is reported, its job stopped if it still runs, and the lock taken over. A run
is stopped, and writes no record, when a `stop` file appears in its run directory (the workflow's
SIGINT/SIGTERM handler writes it), when the snakemake process that started it dies, or when the process
that started `exabench execute` (a bundle or every-node script, the GPU check) dies.

No path leaves ranks running once their execution is gone (an orphan would overlap, and contaminate,
the next run): SIGTERM, SIGHUP and SIGINT to the execution stop the job's process group before it
exits; and a watchdog process, in its own session, stops the group within a second of the execution
dying even by SIGKILL (or of any process it watches dying), since the execution can then do nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from exabench import stacks
from exabench.errors import ContainerError, ExabenchError
from exabench.io import atomic_write_text
from exabench.processes import alive, group_alive, group_started_since, proc_parent, proc_start, stop_group
from exabench.records.record import (RecordError, error_dir, failed_record, now_iso, peek_record, read_record,
                                     write_record)


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


LOCK_NAME = "run.lock"
STOP_NAME = "stop"
POLL_S = 0.5  # how often a running job checks for a stop request and its snakemake


class RunLockedError(ExabenchError):
    """Another execution of the run holds its lock."""


class RunInterrupted(ExabenchError):
    """The run was stopped on request (snakemake got SIGINT/SIGTERM or died); no record was written."""


class OwnerLock:
    """A lock file naming its owner (PID and its start time, host, start time, and what `info` adds):
    created atomically (a complete file linked into place), released by its owner only. A lock
    found held is judged by `held_by`: respected (it raises), shared, or taken over."""

    def __init__(self, path: Path, info: dict):
        self.path = Path(path)
        self.info = {"pid": os.getpid(), "pid_start": proc_start(os.getpid()), "host": socket.gethostname(),
                     "start_time": now_iso(), **info}

    def _read(self) -> dict | None:
        try:
            held = json.loads(self.path.read_text())
            return held if isinstance(held, dict) and isinstance(held.get("pid"), int) else None
        except (OSError, ValueError):
            return None

    def _describe(self, held: dict) -> str:
        return f"PID {held.get('pid')} on host {held.get('host')}, since {held.get('start_time')}"

    def _owner_alive(self, held: dict) -> bool:
        return held.get("host") == self.info["host"] and alive(held["pid"], held.get("pid_start"))

    def held_by(self, held: dict, say) -> bool:
        """Raise to respect `held`; True to share it (the lock stays its owner's); False to take it over."""
        raise NotImplementedError

    def acquire(self, say) -> bool:
        """Take the lock (True) or share it (False, where `held_by` allows); raise when it is held."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(self.info))
        try:
            for _ in range(5):
                try:
                    os.link(tmp, self.path)
                    return True
                except FileExistsError:
                    pass
                held = self._read()
                if held is None:  # not a lock file we can read: left by a crash mid-write
                    say(f"exabench: unreadable lock {self.path} removed")
                elif self.held_by(held, say):
                    return False
                try:
                    self.path.unlink()
                except FileNotFoundError:
                    pass
            raise RunLockedError(f"could not take the lock {self.path} (another process keeps taking it); run again")
        finally:
            tmp.unlink(missing_ok=True)

    def release(self) -> None:
        held = self._read()
        if held and held.get("pid") == self.info["pid"] and held.get("host") == self.info["host"]:
            self.path.unlink(missing_ok=True)


class RunLock(OwnerLock):
    """`run.lock` of one run: a second execution is refused while the owner lives; an orphan's job is
    stopped and its lock taken over."""

    def __init__(self, run_id: str, run_dir: Path):
        self.run_id = run_id
        super().__init__(Path(run_dir) / LOCK_NAME, {"run_id": run_id, "job_pgid": None})

    def held_by(self, held: dict, say) -> bool:
        if held.get("host") != self.info["host"]:
            raise RunLockedError(
                f"run {self.run_id} is locked by an execution on another host ({self._describe(held)}; "
                f"lock {self.path}): it cannot be checked from here. If that execution is gone, delete "
                "the lock file and run again.")
        if self._owner_alive(held):
            raise RunLockedError(
                f"run {self.run_id} is already being executed by {self._describe(held)} (lock "
                f"{self.path}); wait for it to finish, or stop it (kill {held['pid']}), then run again.")
        note = ""
        pgid = held.get("job_pgid")
        if isinstance(pgid, int) and group_alive(pgid):
            stop_group(pgid)
            note = f"; its job (process group {pgid}) was still running and has been stopped"
        say(f"exabench: run {self.run_id}: orphaned execution found ({self._describe(held)}, "
            f"owner no longer running{note}); taking over its lock {self.path}")
        return False

    def set_job(self, pgid: int) -> None:
        self.info["job_pgid"] = pgid
        atomic_write_text(self.path, json.dumps(self.info))

    def stop_orphans(self, say) -> list[str]:
        """Before this run starts: the ranks of every other run of the campaign on this host whose
        execution died with its watchdog (both SIGKILLed: the lock stays, owner dead, its process group
        alive) are stopped, so that they do not overlap and contaminate this run's timings. Returns
        the runs whose ranks were stopped."""
        stopped = []
        for path in self.path.parent.parent.glob(f"*/{LOCK_NAME}"):
            if path == self.path:
                continue
            held = OwnerLock(path, {})._read()
            pgid = (held or {}).get("job_pgid")
            if not held or not isinstance(pgid, int) or held.get("host") != self.info["host"] \
                    or self._owner_alive(held) or not group_started_since(pgid, held.get("pid_start")):
                continue  # nothing of it left running (or a reused group id: started before its owner)
            stop_group(pgid)
            stopped.append(str(held.get("run_id") or path.parent.name))
            say(f"exabench: run {self.run_id}: the ranks of run {stopped[-1]} (process group {pgid}) outlived their "
                f"execution ({self._describe(held)}, gone) and were stopped before this run started")
        return stopped


CLAIM_NAME = "campaign.claim"


class ResultsClaimedError(ExabenchError):
    """Another campaign (another checkout or working directory) is writing the results directory."""


class ResultsClaim(OwnerLock):
    """`results/<site>/campaign.claim`: the results directory is written by one campaign at a time.
    Two checkouts (or working directories) writing one results directory would each execute every
    run. The same checkout and working directory share it (a resume, or a second target while
    the first runs: Snakemake's own lock guards their outputs); a claim whose owner died on this
    host is stale: it is reported and taken over."""

    def __init__(self, results: str | Path, checkout: str | Path, config_files=()):
        self.results = Path(results)
        super().__init__(self.results / CLAIM_NAME, {
            "checkout": str(Path(checkout).resolve()), "workdir": str(Path.cwd().resolve()),
            "results": str(self.results.resolve()), "config_files": [str(f) for f in config_files]})

    def _owner(self, held: dict) -> str:
        return (f"the campaign of checkout {held.get('checkout')} (working directory {held.get('workdir')}; "
                f"{self._describe(held)}; claim {self.path})")

    def held_by(self, held: dict, say) -> bool:
        mine = all(held.get(k) == self.info[k] for k in ("checkout", "workdir"))
        if held.get("host") != self.info["host"]:
            if mine:
                say(f"exabench: resuming the campaign of this checkout on {self.results}, claimed on host "
                    f"{held.get('host')} since {held.get('start_time')}")
                return False
            raise ResultsClaimedError(
                f"the results directory {self.results} is claimed by {self._owner(held)}: it runs on another host "
                "and cannot be checked from here. If that campaign is gone, delete the claim file and run again.")
        if self._owner_alive(held):
            if mine:
                return True
            raise ResultsClaimedError(
                f"the results directory {self.results} is claimed by {self._owner(held)}, which is still running: "
                "two campaigns writing one results directory would each execute every run. Wait for it to finish "
                f"or stop it (kill {held['pid']}), or run this campaign from a directory with its own results/.")
        say(f"exabench: stale claim on {self.results} by {self._owner(held)}: its owner is no longer running; "
            "taking it over")
        return False


def snakemake_ancestors() -> list[tuple[int, str | None]]:
    """The processes above this one up to the topmost snakemake (PID, start time): if one of them
    dies (SIGKILL of snakemake), the run stops instead of going on as an orphan. Empty when no
    snakemake is above this process (a run started by hand)."""
    chain, pid = [], os.getppid()
    while pid and pid > 1 and len(chain) < 32:
        chain.append((pid, proc_start(pid)))
        pid = proc_parent(pid)
    tops = [i for i, (p, _) in enumerate(chain) if b"snakemake" in _cmdline(p)]
    return chain[: tops[-1] + 1] if tops else []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def request_stop(runs_dir: str | Path, owner_pid: int | None = None) -> list[str]:
    """Ask the runs in progress under `runs_dir` (those whose lock's owner is alive on this host and,
    with `owner_pid`, runs below that process) to stop: each gets a `stop` file its execution polls.
    Returns the run ids asked."""
    host, asked = socket.gethostname(), []
    for lock in Path(runs_dir).glob(f"*/{LOCK_NAME}"):
        try:
            held = json.loads(lock.read_text())
            pid = int(held["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if held.get("host") != host or not alive(pid, held.get("pid_start")):
            continue
        if owner_pid is not None and pid != owner_pid:
            p, seen = pid, 0
            while p and p > 1 and p != owner_pid and seen < 64:
                p, seen = proc_parent(p), seen + 1
            if p != owner_pid:
                continue
        (lock.parent / STOP_NAME).write_text(f"stop requested by PID {os.getpid()} at {now_iso()}\n")
        asked.append(lock.parent.name)
    return sorted(asked)


def _stop_reason(run_dir: Path, watch: list[tuple[int, str | None]]) -> str | None:
    if (run_dir / STOP_NAME).exists():
        return "stopped on request (snakemake was interrupted: SIGINT or SIGTERM)"
    for pid, start in watch:
        if not alive(pid, start):
            return f"stopped because the process that started it (PID {pid}) is gone"
    return None


def parent_watch() -> list[tuple[int, str | None]]:
    """This process's parent (PID, start time): the script or snakemake that started the execution.
    Empty where the parent is already gone (adopted by init or a subreaper before we looked)."""
    ppid = os.getppid()
    return [] if ppid <= 1 else [(ppid, proc_start(ppid))]


def _start_watchdog(pgid: int, owners: list[tuple[int, str | None]]) -> subprocess.Popen | None:
    """A process in its own session that stops the job's group once any of `owners` is gone (the
    execution itself first of all): it outlives an execution killed by SIGKILL, which cannot clean up."""
    args = [str(pgid)] + [f"{pid}:{start or ''}" for pid, start in owners]
    package_root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    try:
        return subprocess.Popen([sys.executable, "-c", "import sys; from exabench.processes import watch_job; "
                                 "watch_job(sys.argv[1:])", *args], env=env, start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:  # no process to spare: the execution's own poll and signal handlers still stop the job
        return None


class _Signalled(RunInterrupted):
    """The execution itself got SIGTERM, SIGHUP or SIGINT."""


@contextlib.contextmanager
def _signals_stop_the_run(run_id: str):
    """SIGTERM, SIGHUP and SIGINT raise in the execution, so its cleanup stops the job's process group
    before it exits. Only the main thread can set handlers (snakemake may run a job in a thread:
    there the watchdog covers a death by signal)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        for sig in previous:  # a second signal must not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        raise _Signalled(f"run {run_id} stopped: its execution got {signal.Signals(signum).name}; its ranks were "
                         "stopped and no record was written: run it again to resume")

    # SIGINT too: a terminal's Ctrl-C reaches a campaign's running executions with their snakemake,
    # and a KeyboardInterrupt printed a traceback in the run's job.
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, prev in previous.items():
            signal.signal(sig, prev)


def _rank_of(path: Path) -> int:
    return int(path.stem[4:]) if path.stem[4:].isdigit() else 0


def _root_block(text: str) -> str:
    """A rank's error file starts with its summary (rank, host, exception type and message, which
    may span lines), then a blank line, then the traceback: the summary, on one line."""
    block = text.strip().split("\n\n", 1)[0] if text.strip() else ""
    return " ".join(line.strip() for line in block.splitlines() if line.strip())


def _error_from(run_dir: Path, returncode: int, log_tail: str) -> str:
    """The run's error: the ranks' summaries in the order they were written, so the root cause
    (the rank that raised first, with where its traceback is) comes before its consequences (peers'
    "Connection reset by peer"); an empty error file (its write failed on a full disk) is passed
    over, and a full disk is named."""
    found = []
    for f in error_dir(run_dir).glob("rank*.txt"):
        try:
            when = f.stat().st_mtime_ns
            first = _root_block(f.read_text(errors="replace"))
        except OSError:
            continue
        if first:
            found.append((when, _rank_of(f), first, f))
    found.sort()
    nospace = "No space left on device" in log_tail or any("No space left on device" in x[2] for x in found)
    hint = "No space left on device (the disk of the run directory is full); " if nospace else ""
    if found:
        consequences = "".join(f"; {x[2]}" for x in found[1:])
        return f"{hint}{found[0][2]} (traceback: {found[0][3]}){consequences}"
    tail = " | ".join(line for line in log_tail.splitlines()[-5:] if line.strip())
    return f"{hint}job script exited with code {returncode} and wrote no record; last output: {tail or '(none)'}"


def _exit_or_timeout(proc: subprocess.Popen, pidfd: int | None, timeout: float) -> int | None:
    """The job's exit status, or None when `timeout` s pass first. Woken by the exit itself through a
    pidfd where the kernel has them (Linux 5.3): Popen.wait's polling sleeps (up to 50 ms each) would
    add tens of milliseconds to every run."""
    if pidfd is None:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    select.select([pidfd], [], [], timeout)  # readable once the process has exited
    return proc.poll()


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3: Popen.wait's polling
        return None


def _ranks_record(record_path: Path, run_id: str) -> tuple[dict | None, str | None]:
    """The record the ranks wrote (record, None), else (None, why it is not one). Its schema is not
    checked again here (write_record checked it before writing; the tables check every record): that
    check's library costs a run's job about a tenth of a second to import."""
    rec = peek_record(record_path)
    if rec is not None and rec.get("run_id") == run_id:
        return rec, None
    try:
        read_record(record_path)
        why = f"{record_path}: not the record of run {run_id}"
    except RecordError as exc:
        why = str(exc)
    return None, why


def execute(spec_path: str | Path, script: str | Path | None = None, log=None,
            watch: list[tuple[int, str | None]] | None = None) -> dict:
    """Run the job script of `spec_path` under the run's lock; returns the record that now exists.
    `watch`: processes (PID, start time) whose death stops the run (snakemake_ancestors()); the
    process that called this is always watched too."""
    spec_path = Path(spec_path)
    spec = json.loads(spec_path.read_text())
    run_dir = Path(spec["paths"]["run_dir"])
    watch = list(dict.fromkeys(parent_watch() + list(watch or [])))

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        if log is not None:
            log.write(line + "\n")

    with _signals_stop_the_run(spec["run_id"]):
        lock = RunLock(spec["run_id"], run_dir)
        lock.acquire(say)
        lock.stop_orphans(say)  # no other run's ranks overlap this one on this host
        try:
            (run_dir / STOP_NAME).unlink(missing_ok=True)  # a stop request of an earlier execution
            return _execute(spec, run_dir, Path(script) if script else run_dir / "job.sh", log, lock, watch)
        finally:
            (run_dir / STOP_NAME).unlink(missing_ok=True)
            lock.release()


def execute_logged(spec_path: str | Path, log_path: str | Path | None = None) -> dict:
    """execute() as a campaign's run job calls it: the job's output in `log_path` (the rule's log),
    and the run stopped if the snakemake above it dies (none above: only the caller is watched)."""
    if not log_path:
        return execute(spec_path, watch=snakemake_ancestors())
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        return execute(spec_path, log=log, watch=snakemake_ancestors())


def _execute(spec: dict, run_dir: Path, script: Path, log, lock: RunLock, watch) -> dict:
    record_path = Path(spec["paths"]["record"])
    for stale in error_dir(run_dir).glob("rank*.txt"):
        stale.unlink()
    stacks.clear(error_dir(run_dir))
    if record_path.exists():  # a previous result: archived by write_record already; start clean
        record_path.unlink()
    start = now_iso()
    t0 = time.monotonic()
    try:
        if spec.get("container"):  # only a run in an image pays for the container modules' import
            from exabench.containers import check_before_start
            check_before_start(spec["container"])
    except ContainerError as exc:
        record = failed_record(spec, "failed", str(exc), start, now_iso())
        write_record(record, record_path, spec["paths"]["archive_dir"])
        return record
    out_path = run_dir / "output.log"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **stacks.deadline_env(spec["timeout_s"])})
        deadline = t0 + spec["timeout_s"]
        watchdog, pidfd = None, _open_pidfd(proc.pid)
        try:
            watchdog = _start_watchdog(proc.pid, [(os.getpid(), proc_start(os.getpid())), *watch])
            lock.set_job(proc.pid)
            while True:
                rc = _exit_or_timeout(proc, pidfd, max(0.0, min(POLL_S, deadline - time.monotonic())))
                if rc is not None:
                    timed_out = False
                    break
                if time.monotonic() >= deadline:
                    _kill_group(proc)
                    rc, timed_out = proc.returncode, True
                    break
                reason = _stop_reason(run_dir, watch)
                if reason:
                    _kill_group(proc)
                    record_path.unlink(missing_ok=True)  # a stopped run has no result: a resume runs it
                    raise RunInterrupted(f"run {spec['run_id']} {reason}; its ranks were stopped and no "
                                         "record was written: run the campaign again to resume")
        except BaseException:  # interrupted ourselves: never leave ranks running, nor a result of theirs
            _kill_group(proc)
            record_path.unlink(missing_ok=True)
            raise
        finally:
            stop_group(proc.pid)  # what the job left behind in its group (a rank the launcher lost)
            if watchdog is not None:
                watchdog.kill()
                watchdog.wait()
            if pidfd is not None:
                os.close(pidfd)
    reason = None if timed_out or rc == 0 else _stop_reason(run_dir, watch)
    if reason:  # the watchdog stopped the ranks first (the owner died): no result, a resume runs it
        record_path.unlink(missing_ok=True)
        raise RunInterrupted(f"run {spec['run_id']} {reason}; its ranks were stopped and no record was written: "
                             "run the campaign again to resume")
    output = out_path.read_text(errors="replace")
    if log is not None:
        log.write(output)
    invalid = None
    if record_path.exists() and not timed_out:
        rec, invalid = _ranks_record(record_path, spec["run_id"])
        if rec is not None:
            return rec
        kept = run_dir / "invalid-record.json"  # what the ranks wrote, kept for the user to look at
        os.replace(record_path, kept)
        invalid = f"the ranks wrote a record that is not valid ({invalid}); it is kept in {kept}"
    if timed_out:
        status, error = "timeout", f"run exceeded its time limit of {spec['timeout_s']} s and was stopped"
        where = stacks.summary(error_dir(run_dir))
        error += f"; {where}" if where else ""
    else:
        status, error = "failed", invalid or _error_from(run_dir, rc, output)
    record = failed_record(spec, status, error, start, now_iso())
    record["provenance"]["elapsed_s"] = round(time.monotonic() - t0, 3)
    write_record(record, record_path, spec["paths"]["archive_dir"])
    return record


def _stop_marks(errors: Path) -> tuple[int, int]:
    """(ranks that armed a stop mark, ranks whose mark the launch's SIGTERM wrote): stacks.mark_stops."""
    found = list(errors.glob(stacks.STOP_MARK.format(rank="*")))
    return len(found), sum(1 for p in found if p.stat().st_size > 0)


def collect_node_world(run_spec: str | Path, nodes: list[str], exit_code: int,
                       elapsed_s: float | None = None) -> dict[str, str]:
    """After the run's one launch across `nodes` ended with `exit_code`: every node without its
    record gets one (exabench.campaign.node_worlds); `elapsed_s`, the launch's time, tells `timeout`'s
    exit 137 from a killed rank's. Returns node -> status of its record."""
    from exabench.campaign.node_sweep import node_dir
    from exabench.campaign.node_worlds import NOT_RUN_STOPPED, timed_out
    spec = json.loads(Path(run_spec).read_text())
    found: dict[str, dict | None] = {}
    for node in nodes:
        path = node_dir(spec, node) / "spec.json"
        if not path.exists():
            raise ExabenchError(f"node-collect: run '{spec['run_id']}' has no spec prepared for node '{node}' "
                                f"({path}); valid: the node list given to exabench node-prepare")
        found[node] = json.loads(path.read_text())
    # a node's own error: its ranks' error files, quoted as a run job's failure quotes them
    errors = {n: _error_from(Path(s["paths"]["run_dir"]), exit_code, "")
              if any(error_dir(Path(s["paths"]["run_dir"])).glob("rank*.txt")) else None for n, s in found.items()}
    marks = {n: _stop_marks(error_dir(Path(s["paths"]["run_dir"]))) for n, s in found.items()}
    # Where no node's ranks wrote an error, the launch ended because a rank died without a word:
    # killed outright (out of memory, a signal). Where the launch stopped ranks with SIGTERM (some
    # rank's mark written), it is a node one of whose ranks left its mark empty; where no mark is
    # written (the others had finished, or a launcher kills with SIGKILL only), the one node of a
    # failed launch left without a record; of several, none can be told apart. Where a node's ranks
    # did write an error, that error ended the launch, and an empty mark elsewhere is no sign of a
    # kill of its own: a launcher may send SIGKILL before a rank on a busy node ran its SIGTERM
    # handler (Open MPI 4.1's mpirun sent it 6 ms after SIGTERM here, to 4 ranks on 2 cores).
    signalled = any(written for _, written in marks.values())
    unrecorded = [n for n, s in found.items() if peek_record(Path(s["paths"]["record"])) is None]
    alone = exit_code != 0 and len(unrecorded) == 1
    explained = any(errors.values())
    for n, (ranks, written) in marks.items():
        if n in unrecorded and not explained and written < ranks and (signalled or alone):
            errors[n] = (f"{ranks - written} of its {ranks} rank(s) ended with no record, no error and no stop signal "
                         f"from the launch (exit {exit_code}): killed outright (out of memory, or a signal)")
    failed = [n for n, e in errors.items() if e]
    status = {}
    for node, node_spec in found.items():
        record_path = Path(node_spec["paths"]["record"])
        rec = peek_record(record_path)
        if rec is not None and rec.get("run_id") == node_spec["run_id"]:
            status[node] = rec["status"]
            continue
        run_dir = Path(node_spec["paths"]["run_dir"])
        if timed_out(exit_code, elapsed_s, node_spec["timeout_s"]):
            where = stacks.summary(error_dir(run_dir))
            kind, error = "timeout", (f"run exceeded its time limit of {node_spec['timeout_s']} s and was stopped "
                                      "with the launch across every node" + (f"; {where}" if where else ""))
        elif errors[node]:
            kind, error = "failed", errors[node]
        elif exit_code != 0:
            others = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
            kind, error = "failed", (f"{NOT_RUN_STOPPED} (exit {exit_code}) before this node's run recorded: "
                                     + (f"node(s) {others} failed" if failed else "no node's ranks wrote an error"))
        else:
            kind, error = "failed", ("the launch across every node ended with exit 0 but this node's ranks wrote "
                                     f"no record ({record_path})")
        now = now_iso()
        write_record(failed_record(node_spec, kind, error, now, now), record_path, node_spec["paths"]["archive_dir"])
        status[node] = kind
    return status
