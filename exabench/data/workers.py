"""How a rank's DataLoader workers start: from a fork server, never by forking the rank itself.

A rank has threads by the time its loaders start (the process group's Gloo/MPI threads, the
intra-op pool, an energy poller). fork() copies only the calling thread: a lock another thread
held at that instant (the allocator's, a logging or I/O lock, the OpenMP runtime's) stays held in the
child for ever, and the worker hangs on its first batch, a hang that depends on timing and so comes
only sometimes. A fork server is started once per rank as a fresh single-threaded interpreter, imports
torch and the readers once, and forks each worker from itself: a worker costs a fork, not an import.
"""

from __future__ import annotations

import functools

# Imported by the server before any worker is forked from it, so no worker pays for them.
PRELOAD = ["torch", "exabench.data.images"]


@functools.lru_cache(maxsize=1)
def worker_context():
    """The multiprocessing context every DataLoader of this rank starts its workers in."""
    import multiprocessing
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
