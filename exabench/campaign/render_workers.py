"""A large campaign's run files rendered by several processes (render.write_runs_files, each on a
share of the runs): a 10,000-run campaign is about 0.5 ms of Python a run and as much of the file
system's time, which one core does alone.

Each helper is `python -m exabench.campaign.render` (which calls `serve` here), its share of the
runs pickled on its standard input: not multiprocessing, whose spawn and forkserver methods import
the parent's `__main__` again in each worker (under Snakemake, Snakemake's own), and whose fork
copies a threaded process (Snakemake's) unsafely. Each share is written as one atomic batch
(io.atomic_write_many); a failed share leaves the others' files in place, which are the files a
second render writes.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from exabench.errors import ExabenchError

# Runs a helper is worth: its start (a Python, the renderer's imports, its share unpickled) is about
# 0.3 s, the time of about 600 runs rendered and written.
RUNS_PER_WORKER = 2000
MAX_WORKERS = 8


def worker_count(runs: int) -> int:
    """Processes for a campaign of `runs`: one per usable CPU, each with at least RUNS_PER_WORKER runs."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, MAX_WORKERS, runs // RUNS_PER_WORKER))


def write_shares(runs: list, site, root: Path, workers: int, write, helper: str) -> int:
    """`write(runs, site, root)` on `workers` contiguous shares of `runs`: the first in this process,
    the others in helpers (`python -m helper`, which `serve`s `write`), fed by threads while this
    process writes its own. Returns the files written; a helper's error is raised here (an
    ExabenchError with its own message) once every helper has ended."""
    size = -(-len(runs) // workers)
    shares = [runs[i:i + size] for i in range(0, len(runs), size)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))}
    helpers = [subprocess.Popen([sys.executable, "-m", helper], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env) for _ in shares[1:]]
    with ThreadPoolExecutor(max(1, len(helpers))) as feeders:
        replies = [feeders.submit(helper.communicate, pickle.dumps((share, site, str(root))))
                   for helper, share in zip(helpers, shares[1:])]
        try:
            written = write(shares[0], site, root)
        except BaseException:
            for helper in helpers:
                helper.kill()
            raise
        failures = []
        for number, (helper, reply, share) in enumerate(zip(helpers, replies, shares[1:]), start=2):
            out, err = reply.result()
            if helper.returncode == 0:
                written += json.loads(out)["written"]
                continue
            said = json.loads(out) if out.startswith(b"{") else {}
            left = remove_temp_files(share, root, helper.pid)
            failures.append(said.get("error") or _crash_text(helper, number, len(shares), share, err, left))
    if failures:
        raise ExabenchError(failures[0])
    return written


def _crash_text(helper, number: int, shares: int, share: list, err: bytes, removed: int) -> str:
    """Why a helper ended without writing its share: its signal or exit status (a helper killed by
    SIGKILL, the OOM killer's signal, says nothing on stderr), what was cleaned up, what to do."""
    code = helper.returncode
    how = f"was killed by signal {-code} ({_signal_name(-code)})" if code < 0 else f"exited with status {code}"
    said = err.decode(errors="replace").strip()[-2000:]
    return (f"render helper {number} of {shares} (pid {helper.pid}, runs {share[0].run_id} .. {share[-1].run_id}) "
            f"{how}: its share was not written ({removed} temp file(s) it left removed); render again"
            + (f"\n{said}" if said else ""))


def _signal_name(number: int) -> str:
    import signal
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def remove_temp_files(share: list, root: Path, pid: int) -> int:
    """The temp files a helper `pid` left in its share's run folders (io._write_temp names them
    .<file>.<pid>-<n>.tmp); returns how many were removed."""
    removed = 0
    for run in share:
        folder = Path(root) / "runs" / run.run_id
        for tmp in folder.glob(f".*.{pid}-*.tmp") if folder.is_dir() else ():
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


def serve(write) -> int:
    """A helper's side: its share from standard input, `write(runs, site, root)`, and on standard output
    the files written or the user's error."""
    share, site, root = pickle.load(sys.stdin.buffer)
    try:
        written = write(share, site, Path(root))
    except ExabenchError as exc:
        print(json.dumps({"error": str(exc)}))
        return 3
    print(json.dumps({"written": written}))
    return 0
