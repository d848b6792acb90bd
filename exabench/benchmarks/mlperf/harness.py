"""MLPerf-HPC conventions shared by the CosmoFlow and DeepCAM workloads:

- `MLPerfLog`: mlperf_logging.mllog records written by rank 0 to one file per run,
  with the submission_* header every HPC log needs;
- `compliance_check`: the package's own checker (`--usage hpc`) on such a log;
- `run_to_target`: the epoch loop with the epoch/eval markers, stopping at the
  quality target;
- `stage_files`: optional copy of the data set to node-local storage, timed;
- `strong_scaling_score`: the HPC strong-scaling score (drop the fastest and the
  slowest run, average the rest).
"""

from __future__ import annotations

import itertools
import math
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from exabench.energy import timed_region
from exabench.training.devices import torch_device

# The newest HPC ruleset mlperf-logging 4.1.68 ships (compliance_checker/hpc_3.0.0).
HPC_RULESET = "3.0.0"
# Runs the HPC rules ask for per strong-scaling result (mlperf_logging.benchmark_meta).
REQUIRED_RUNS = {"deepcam": 5, "cosmoflow": 10, "oc20": 5, "openfold": 10}

_counter = itertools.count()


def staging_timed(ruleset: str) -> bool:
    """Whether data staging counts in the time to train: yes before HPC 3.0 (the 1.0 and 2.0
    checkers want staging inside run_start..run_stop), no from 3.0 on."""
    return tuple(int(x) for x in ruleset.split(".")[:2]) < (3, 0)


class MLPerfLog:
    """mllog records from rank 0 to `path`; other ranks' calls do nothing."""

    def __init__(self, path, rank: int, benchmark: str, org: str = "exabench", division: str = "open",
                 status: str = "onprem", platform: str = "unknown"):
        self.path = Path(path)
        self.rank = rank
        self.division = division
        self._logger = None
        self._handler = None
        if rank != 0:
            return
        from mlperf_logging.mllog.mllog import MLLogger

        self.path.parent.mkdir(parents=True, exist_ok=True)
        pylog = logging.getLogger(f"exabench.mllog.{next(_counter)}")  # one per run: no shared handlers
        pylog.propagate = False
        pylog.setLevel(logging.INFO)
        self._handler = logging.FileHandler(self.path, mode="w")
        pylog.addHandler(self._handler)
        self._logger = MLLogger(logger=pylog, default_stack_offset=2)
        for key, value in (("submission_benchmark", benchmark), ("submission_org", org),
                           ("submission_division", division), ("submission_status", status),
                           ("submission_platform", platform)):
            self.event(key, value)

    def start(self, key: str, value=None, metadata: dict | None = None) -> None:
        if self._logger:
            self._logger.start(key=key, value=value, metadata=metadata)

    def end(self, key: str, value=None, metadata: dict | None = None) -> None:
        if self._logger:
            self._logger.end(key=key, value=value, metadata=metadata)

    def event(self, key: str, value=None, metadata: dict | None = None) -> None:
        if self._logger:
            self._logger.event(key=key, value=value, metadata=metadata)

    def close(self) -> None:
        if self._handler:
            self._handler.close()
            logging.getLogger(self._logger.logger.name).removeHandler(self._handler)
            self._handler = self._logger = None


def compliance_check(log_path, ruleset: str = HPC_RULESET, python: str = sys.executable) -> tuple[bool, str]:
    """Run `python -m mlperf_logging.compliance_checker --usage hpc` on a log: (passed, its output)."""
    log_path = Path(log_path)
    out = log_path.with_name(log_path.name + ".compliance.txt")
    proc = subprocess.run([python, "-m", "mlperf_logging.compliance_checker", "--usage", "hpc", "--ruleset",
                           ruleset, "--log_output", str(out), str(log_path)],
                          capture_output=True, text=True, timeout=300)
    return proc.returncode == 0, proc.stdout + proc.stderr


def require_closed_rules(p, fixed: dict, samples: tuple[int, int],
                         count_samples: Callable[[Path], tuple[int, int]]) -> None:
    """A closed-division claim only for a run the closed rules allow: the reference's network and
    target (`fixed`: param -> the value the rules fix) and the benchmark's own data set in
    p.data_dir with its (training, validation) sample counts `samples`. Otherwise a ConfigError
    naming every key that breaks a rule, before anything is written; open runs pass."""
    from exabench.errors import ConfigError
    if p.division != "closed":
        return
    broken = [f"{key} = {getattr(p, key)!r} (closed: {want!r})" for key, want in fixed.items()
              if getattr(p, key) != want]
    if not p.data_dir:
        broken.append("data_dir = '' (closed: the benchmark's data set, not a generated one)")
    else:
        counts = count_samples(Path(p.data_dir))
        if tuple(counts) != tuple(samples):
            broken.append(f"data_dir {p.data_dir} holds {counts[0]} training and {counts[1]} validation "
                          f"samples (closed: {samples[0]} and {samples[1]})")
    if broken:
        raise ConfigError("(params)", "division", p.division, "open, or a configuration the closed rules allow",
                          "breaks the closed rules: " + "; ".join(broken))


def split_sizes(list_split: Callable[[Path, str], list],
                unreadable: type[Exception]) -> Callable[[Path], tuple[int, int]]:
    """The `count_samples` of require_closed_rules for a data set whose `list_split(root, split)`
    lists a split's samples: the sizes of its train and validation splits. A split that raises
    `unreadable` counts 0, so the rule names the data set instead of the run failing on it."""
    def count(root: Path) -> tuple[int, int]:
        def n(split: str) -> int:
            try:
                return len(list_split(root, split))
            except unreadable:
                return 0

        return n("train"), n("validation")

    return count


def strong_scaling_score(times: list[float], benchmark: str | None = None) -> float:
    """MLPerf-HPC strong scaling: drop the fastest and the slowest time-to-train, average the rest.

    Needs at least 3 runs (and REQUIRED_RUNS[benchmark] when a benchmark is named)."""
    need = max(3, REQUIRED_RUNS.get(benchmark, 3)) if benchmark else 3
    if len(times) < need:
        raise ValueError(f"strong-scaling score of {benchmark or 'a benchmark'}: {len(times)} runs given, "
                         f"at least {need} needed")
    kept = sorted(times)[1:-1]
    return sum(kept) / len(kept)


def stage_files(files: list[str], source_root, dest_root) -> tuple[list[str], float, int]:
    """Copy `files` (under source_root) to dest_root keeping relative paths: (new paths, seconds, bytes)."""
    t0 = time.perf_counter()
    out, nbytes = [], 0
    for f in files:
        target = Path(dest_root) / Path(f).relative_to(source_root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
        nbytes += target.stat().st_size
        out.append(str(target))
    return out, time.perf_counter() - t0, nbytes


@dataclass
class EpochResult:
    epoch: int
    train_time: float      # slowest rank's training time in this epoch (s)
    train_samples: int     # global samples trained in this epoch
    eval_time: float
    quality: float
    loss: float


@dataclass
class TrainResult:
    epochs: list[EpochResult] = field(default_factory=list)
    reached: bool = False
    time_to_train: float = 0.0   # run_start .. run_stop on rank 0, after barriers (s)


def run_to_target(log: MLPerfLog, max_epochs: int, train_epoch: Callable[[int], tuple[float, int, float]],
                  evaluate: Callable[[int], float], quality_key: str, target: float, higher_is_better: bool,
                  barrier: Callable[[], None]) -> TrainResult:
    """Epochs of training and evaluation between run_start and run_stop, until `target`.

    train_epoch(epoch) -> (slowest rank's seconds, global samples, mean loss); evaluate(epoch) -> quality
    (already reduced over ranks). Epochs are numbered from 1 in the log, as the references do."""
    result = TrainResult()
    barrier()
    with timed_region():  # energy to solution: the meter's timed region is run_start..run_stop
        t_run = time.perf_counter()
        log.start("run_start")
        for epoch in range(1, max_epochs + 1):
            log.start("epoch_start", metadata={"epoch_num": epoch})
            seconds, samples, loss = train_epoch(epoch)
            log.start("eval_start", metadata={"epoch_num": epoch})
            t_eval = time.perf_counter()
            quality = evaluate(epoch)
            eval_time = time.perf_counter() - t_eval
            log.event(quality_key, quality, metadata={"epoch_num": epoch})
            log.end("eval_stop", metadata={"epoch_num": epoch})
            log.end("epoch_stop", metadata={"epoch_num": epoch})
            result.epochs.append(EpochResult(epoch, seconds, samples, eval_time, quality, loss))
            if (quality >= target) if higher_is_better else (quality <= target):
                result.reached = True
                break
        barrier()
        result.time_to_train = time.perf_counter() - t_run
    log.end("run_stop", metadata={"status": "success" if result.reached else "aborted"})
    return result


# ---- pieces both PyTorch workloads share -------------------------------------------------
def allreduce(values: list[float], op: str = "sum") -> list[float]:
    """Element-wise sum or max of a few floats over all ranks."""
    from exabench.training.distributed import torch_allreduce
    return torch_allreduce(values, op)


def weight_spread(model) -> tuple[float, float]:
    """(max - min over ranks of the parameter checksum, the checksum): 0 when DDP kept ranks in sync."""
    s = sum(float(p.detach().double().sum()) for p in model.parameters())
    hi = allreduce([s], "max")[0]
    lo = -allreduce([-s], "max")[0]
    return hi - lo, s


def mlperf_platform(ctx) -> str:
    import platform
    return f"{ctx.world.size}x{platform.machine()}@{ctx.spec.get('site', 'local')}"


def log_common(log: MLPerfLog, ctx, global_batch: int, seed: int) -> None:
    """Keys every HPC log carries: system size, batch, seed."""
    lay = ctx.layout
    log.event("number_of_nodes", int(lay["nodes"]))
    log.event("accelerators_per_node", int(lay.get("gpus_per_rank") or 0) * int(lay["ranks_per_node"]))
    log.event("global_batch_size", global_batch)
    log.event("seed", seed)
    log.event("gradient_accumulation_steps", 1)
    log.event("gradient_accumulation_frequency", 1)


class TrainingRun:
    """What an MLPerf-HPC training run does on each rank, whatever the network: process group,
    log, untimed data generation, timed staging, sharding, the training and evaluation
    epochs. Use as a context manager: on exit the log is closed, staged data removed and
    the process group shut down."""

    def __init__(self, ctx, benchmark: str, p):
        import torch

        from exabench.training.distributed import init_torch
        torch.set_num_threads(ctx.threads)  # the run's threads per rank, before any tensor work
        self.ctx, self.p, self.world = ctx, p, ctx.world
        self.device, default_backend = torch_device(self.world)
        self.backend = p.backend if p.backend != "auto" else default_backend
        init_torch(self.world, self.backend, ctx.run_dir)
        self.log_path = Path(ctx.run_dir) / "mlperf.log"
        self.log = MLPerfLog(self.log_path, self.world.rank, benchmark, division=p.division,
                             platform=mlperf_platform(ctx))
        self.barrier = ctx.collectives.barrier
        self.benchmark = benchmark
        self.global_batch = p.batch_size * self.world.size
        self.staged: Path | None = None
        self.generated: Path | None = None
        self.staging_time = 0.0
        self.losses: list[float] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        from exabench.training.distributed import shutdown_torch
        self.log.close()
        if self.staged is not None and self.world.local_rank == 0:
            shutil.rmtree(self.staged, ignore_errors=True)
        shutdown_torch()
        if self.generated is not None and self.world.rank == 0:  # cheap to remake; keeps results/ small
            shutil.rmtree(self.generated, ignore_errors=True)
        return False

    def data_root(self, generate: Callable[[Path], object], marker: str) -> Path:
        """p.data_dir, or a synthetic set generated by rank 0 (before init_start: not timed) into the
        run directory and removed after the run."""
        if self.p.data_dir:
            return Path(self.p.data_dir)
        root = self.generated = Path(self.ctx.run_dir) / "data"
        if self.world.rank == 0 and not (root / marker).exists():
            generate(root)
        self.barrier()
        return root

    def begin_init(self) -> None:
        self.barrier()
        self.log.start("init_start")
        self.log.event("cache_clear", True)
        log_common(self.log, self.ctx, self.global_batch, self.p.seed)

    def stage(self, root: Path, files: list[str]) -> Path:
        """Copy `files` to p.stage_dir (once per node), timed and logged; returns the root to read."""
        if not self.p.stage_dir:
            return root
        self.log.start("staging_start")
        self.staged = Path(self.p.stage_dir) / f"exabench-{self.benchmark}-{Path(self.ctx.run_dir).name}"
        t0 = time.perf_counter()
        if self.world.local_rank == 0:
            stage_files(files, root, self.staged)
        self.barrier()
        self.staging_time = allreduce([time.perf_counter() - t0], "max")[0]
        self.log.end("staging_stop", metadata={"staging_duration": self.staging_time})
        return self.staged

    def shard(self, train: list, val: list) -> None:
        """Every rank the same number of training samples (DDP steps in lockstep); logs the set sizes."""
        from exabench.errors import ConfigError
        w = self.world
        self.n_local = len(train) // w.size
        self.my_train = train[w.rank::w.size][:self.n_local]
        self.my_val = val[w.rank::w.size]
        self.steps = self.n_local // self.p.batch_size
        if self.steps < 1:
            raise ConfigError("(params)", "batch_size", self.p.batch_size,
                              f"<= {self.n_local} (training samples per rank)", "leaves no step per epoch")
        self.log.event("train_samples", len(train))
        self.log.event("eval_samples", len(val))

    def train_epoch(self, epoch: int, ddp, opt, batch: Callable, loss_fn: Callable,
                    after_step: Callable[[], object] = lambda: None) -> tuple[float, int, float]:
        """One pass over this rank's shard in a seeded order: (slowest rank's s, global samples, mean loss)."""
        import numpy as np
        bs = self.p.batch_size
        order = np.random.default_rng(self.p.seed + epoch).permutation(self.n_local)
        ddp.train()
        t0 = time.perf_counter()
        total = 0.0
        for s in range(self.steps):
            x, y = batch([self.my_train[i] for i in order[s * bs:(s + 1) * bs]])
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x), y)
            loss.backward()
            opt.step()
            after_step()
            total += float(loss.detach())
        return self.epoch_summary(t0, total, self.steps)

    def epoch_summary(self, t0: float, total_loss: float, steps: int) -> tuple[float, int, float]:
        """After `steps` steps since perf_counter() read t0, their losses summing to total_loss on this
        rank: (slowest rank's s, global samples, mean loss); the mean loss is kept for the record."""
        import torch
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        seconds = allreduce([time.perf_counter() - t0], "max")[0]
        mean_loss = allreduce([total_loss / steps])[0] / self.world.size
        self.losses.append(mean_loss)
        return seconds, steps * self.global_batch, mean_loss

    def evaluate(self, model, batch: Callable, score: Callable) -> float:
        """sum of score(output, y) (-> (sum, count)) over this rank's validation shard, reduced over ranks."""
        import torch
        model.eval()
        total, count = 0.0, 0.0
        with torch.no_grad():
            for s in range(0, len(self.my_val), self.p.batch_size):
                x, y = batch(self.my_val[s:s + self.p.batch_size])
                a, n = score(model(x), y)
                total, count = total + a, count + n
        total, count = allreduce([total, count])
        return total / count

    def train(self, epochs: int, train_epoch, evaluate, quality_key: str, target: float,
              higher_is_better: bool) -> TrainResult:
        self.log.end("init_stop")
        return run_to_target(self.log, epochs, train_epoch, evaluate, quality_key, target, higher_is_better,
                             self.barrier)

    def outcome(self, result: TrainResult, model, quality_key: str, quality_name: str, target: float,
                higher_is_better: bool, info: dict):
        """Metrics, checks and info of the run, with the replicas' weights checked to agree."""
        from exabench.benchmarks.base import Check
        spread, checksum = weight_spread(model)
        sync = Check("weights_in_sync", spread <= 1e-6 * max(1.0, abs(checksum)),
                     f"parameter checksum spread over ranks {spread:.3g}")
        info.update({"parameters": sum(x.numel() for x in model.parameters()), "global_batch": self.global_batch,
                     "ranks": self.world.size,
                     "device": str(self.device), "backend": self.backend})
        return train_outcome(result, self.losses, self.log, self.world.rank, quality_key, quality_name, target,
                             higher_is_better, info, self.staging_time if self.p.stage_dir else None, [sync])


def train_outcome(result: TrainResult, losses: list[float], log: MLPerfLog, rank: int, quality_key: str,
                  quality_name: str, target: float, higher_is_better: bool, info: dict,
                  staging_time: float | None = None, extra_checks: list | None = None):
    """Metrics, checks and info of a train-to-target run, whatever the framework; rank 0 also
    runs the compliance checker on the (closed) log."""
    from exabench.benchmarks.base import Check, Metric, Outcome
    epochs = result.epochs
    train_times = [e.train_time for e in epochs]
    samples = sum(e.train_samples for e in epochs)
    metrics = {
        "time_to_train": Metric(result.time_to_train, "s", higher_is_better=False, precision="fp32",
                                description="run_start to run_stop (MLPerf time-to-train); "
                                            "meaningful only when the target was reached"),
        "throughput": Metric(samples / sum(train_times), "samples/s",
                             [e.train_samples / e.train_time for e in epochs], "fp32",
                             description="global training samples / training time of the slowest rank, per epoch"),
        "epoch_time": Metric(sum(train_times) / len(epochs), "s", train_times, "fp32", higher_is_better=False,
                             description="training time of one epoch, slowest rank"),
        f"eval_{quality_name.lower()}": Metric(epochs[-1].quality, quality_name, [e.quality for e in epochs],
                                               "fp32", higher_is_better=higher_is_better,
                                               description=f"validation {quality_name} after each epoch"),
        "epochs": Metric(len(epochs), "epochs", higher_is_better=False, description="epochs run"),
    }
    if staging_time is not None:
        metrics["staging_time"] = Metric(staging_time, "s", higher_is_better=False,
                                         description="copy of the data set to node-local storage")
    checks = [
        Check("quality_target_reached", result.reached,
              f"{quality_key} {epochs[-1].quality:.4f} after {len(epochs)} epochs; target "
              f"{'>=' if higher_is_better else '<='} {target}"),
        Check("loss_finite", all(math.isfinite(x) for x in losses), f"epoch losses {losses}"),
    ] + list(extra_checks or [])
    log.close()  # complete before the checker reads it
    if rank == 0:
        ok, output = compliance_check(log.path)
        checks.append(Check("mlperf_compliance", ok, f"{log.division} division: compliance_checker --usage hpc "
                                                      f"--ruleset {HPC_RULESET}: {output.strip().splitlines()[-1:]}"))
    info.update({"mlperf_log": str(log.path), "mlperf_ruleset": HPC_RULESET, "mlperf_division": log.division,
                 "losses": losses, "staging_in_time_to_train": staging_timed(HPC_RULESET),
                 "quality_per_epoch": [e.quality for e in epochs], "staging_time_s": staging_time or 0.0})
    return Outcome(metrics, checks, info)
