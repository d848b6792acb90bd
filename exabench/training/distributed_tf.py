"""TensorFlow's data parallelism from exabench's `World`: MultiWorkerMirroredStrategy with a
TF_CONFIG built from the launcher's ranks, or Horovod for TensorFlow.

TF_CONFIG lists one `host:port` per rank. Every rank picks a free port and the list is
allgathered over the runner's collectives: MPI (mpirun, jsrun, srun --mpi=pmix) where the
launcher is an MPI one; otherwise (plain srun, torchrun) a torch.distributed Gloo group
whose rendezvous is `init_torch`'s (a FileStore in the run directory keyed by the Slurm
job and step, or torchrun's MASTER_ADDR) - the runner gathers its provenance over the same
group. Loopback when all ranks share one node.
"""

from __future__ import annotations

import json
import os
import socket

from exabench.training.distributed import _free_port, init_torch

KERAS_BACKENDS = ("auto", "ring", "nccl", "horovod")


def tf_config(world, collectives) -> dict:
    """The TF_CONFIG of this rank: the cluster's workers (one per rank, in rank order) and its index."""
    one_node = world.local_size >= world.size
    host = "127.0.0.1" if one_node else socket.gethostbyname(socket.gethostname())
    workers = collectives.allgather(f"{host}:{_free_port()}")
    if one_node and len({w.split(":")[0] for w in workers}) != 1:  # a launcher that misstates local sizes
        raise RuntimeError(f"local_size {world.local_size} >= size {world.size} but ranks report hosts {workers}")
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": world.rank}}


def mirrored_strategy(world, collectives, run_dir, implementation: str, fusion_threshold_mb: float):
    """MultiWorkerMirroredStrategy over `implementation` (RING, NCCL or AUTO) for this world."""
    import tensorflow as tf
    if world.size > 1:
        if not world.mpi:
            init_torch(world, "gloo", run_dir)  # the collectives (and the runner's) need a process group
        os.environ["TF_CONFIG"] = json.dumps(tf_config(world, collectives))
    else:
        os.environ.pop("TF_CONFIG", None)  # a stale one from the environment would make this rank wait for peers
    impl = getattr(tf.distribute.experimental.CommunicationImplementation, implementation)
    # bytes_per_pack: TF's tensor fusion, the counterpart of Horovod's fusion buffer (0: no packing).
    options = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=int(fusion_threshold_mb * 1024 * 1024), implementation=impl)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if strategy.num_replicas_in_sync != world.size:
        raise RuntimeError(f"MultiWorkerMirroredStrategy has {strategy.num_replicas_in_sync} replicas but the "
                           f"launcher started {world.size} ranks (one replica per rank expected)")
    return strategy, options


def init_horovod(world, collectives, fusion_threshold_mb: float):
    """Horovod for TensorFlow (horovod.tensorflow, not horovod.tensorflow.keras: that one needs Keras 2)."""
    os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(fusion_threshold_mb * 1024 * 1024))
    if world.size > 1 and world.mpi:
        collectives.barrier()  # mpi4py initialises MPI first, so Horovod leaves MPI_Finalize to it
    try:
        import horovod.tensorflow as hvd
    except ImportError as exc:
        raise RuntimeError(f"backend 'horovod' needs Horovod built with TensorFlow support (import "
                           f"horovod.tensorflow failed: {exc}); valid backends without it: auto, ring, nccl") from exc
    from exabench.training.distributed import init_horovod
    init_horovod(hvd)
    if hvd.size() != world.size:
        raise RuntimeError(f"Horovod sees {hvd.size()} ranks but the launcher says {world.size}")
    return hvd
