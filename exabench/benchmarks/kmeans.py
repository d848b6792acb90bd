"""CORAL-2 Big Data Analytics K-Means, SPMD over MPI.

Each rank generates its own rows (untimed) from three Gaussians N(0,1), N(2,1),
N(10,1) in every column, as the suite does; the fit (initialisation and `maxiter`
Lloyd iterations) is timed, and its time is the max over ranks. Local work is a
BLAS distance computation; ranks combine per-cluster sums and counts with
MPI Allreduce. The sanity check, apart from the timing, runs Lloyd to
convergence and checks that the true centres are recovered.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from . import register
from .base import Benchmark, Check, Metric, Outcome, param

TRUE_MEANS = (0.0, 2.0, 10.0)


@dataclass
class KMeansParams:
    rows_per_rank: int = param(100_000, "rows each rank generates (num_local_rows)", minimum=1)
    cols: int = param(250, "columns (num_global_cols; 250 in the suite)", minimum=1)
    k: int = param(3, "clusters (the suite runs 2, 3 and 4)", minimum=1)
    maxiter: int = param(2, "Lloyd iterations timed (2 in the suite)", minimum=1)
    init: str = param("kmeans++", "initial centres: greedy distributed k-means++ or random rows (the reference)",
                      choices=("kmeans++", "random"))
    dtype: str = param("float64", "storage and arithmetic precision", choices=("float64", "float32"))
    repeats: int = param(3, "timed fits (each a sample)", minimum=1)
    seed: int = param(1234, "seed of the data (offset by rank) and of the initialisation")
    tolerance: float = param(0.25, "sanity: max |found - true| per coordinate (mean over columns)", minimum=0.0)


def generate(rows: int, cols: int, rank: int, seed: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Rows of this rank: component c = global row index mod 3 (so every rank has all three)."""
    rng = np.random.default_rng([seed, rank])
    comp = (np.arange(rows) + rank * rows) % len(TRUE_MEANS)
    x = rng.standard_normal((rows, cols), dtype=np.float64)
    x += np.asarray(TRUE_MEANS)[comp][:, None]
    return x.astype(dtype, copy=False), comp


def _sq_dist(x: np.ndarray, x_sq: np.ndarray, centres: np.ndarray) -> np.ndarray:
    d = x_sq[:, None] - 2.0 * (x @ centres.T) + (centres * centres).sum(1)[None, :]
    return np.maximum(d, 0.0, out=d)


class _Fit:
    """Distributed k-means over an mpi4py communicator (or alone, when comm is None)."""

    def __init__(self, x: np.ndarray, comm, seed: int):
        self.x, self.comm = x, comm
        self.x_sq = np.einsum("ij,ij->i", x, x)
        self.rng = np.random.default_rng(seed)  # same stream on every rank: all draw the same numbers
        self.comm_time = 0.0

    def _allreduce(self, a: np.ndarray) -> np.ndarray:
        if self.comm is None:
            return a
        from mpi4py import MPI
        t = time.perf_counter()
        out = np.empty_like(a)
        self.comm.Allreduce(a, out, op=MPI.SUM)
        self.comm_time += time.perf_counter() - t
        return out

    def _allgather(self, obj):
        if self.comm is None:
            return [obj]
        t = time.perf_counter()
        out = self.comm.allgather(obj)
        self.comm_time += time.perf_counter() - t
        return out

    def _rows_at(self, weights: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Rows picked with probability proportional to `weights`, over all ranks."""
        local = float(weights.sum())
        totals = np.asarray(self._allgather(local))
        offset = totals[: (self.comm.Get_rank() if self.comm else 0)].sum()
        targets = draws * totals.sum() - offset
        cum = np.cumsum(weights)
        mine = {i: self.x[min(np.searchsorted(cum, t, side="right"), len(cum) - 1)]
                for i, t in enumerate(targets) if 0 <= t < local}
        picked = {}
        for part in self._allgather(mine):
            picked.update(part)
        return np.stack([picked[i] for i in range(len(draws))])

    def init_random(self, k: int) -> np.ndarray:
        return self._rows_at(np.ones(len(self.x)), self.rng.random(k))

    def init_kmeanspp(self, k: int) -> np.ndarray:
        """Greedy k-means++ (as scikit-learn): 2 + ln k candidates per centre, keep the best."""
        trials = 2 + int(math.log(k))
        centres = self.init_random(1)
        d2 = _sq_dist(self.x, self.x_sq, centres)[:, 0]
        for _ in range(1, k):
            cands = self._rows_at(d2, self.rng.random(trials))
            cd = np.minimum(d2[:, None], _sq_dist(self.x, self.x_sq, cands))
            pot = self._allreduce(cd.sum(0))
            best = int(np.argmin(pot))
            centres = np.vstack([centres, cands[best]])
            d2 = cd[:, best]
        return centres

    def lloyd(self, centres: np.ndarray) -> tuple[np.ndarray, float]:
        """One iteration; returns new centres and the objective (sum of squared distances) before it."""
        d = _sq_dist(self.x, self.x_sq, centres)
        labels = d.argmin(1)
        k, cols = centres.shape
        packed = np.zeros((k, cols + 2), dtype=np.float64)
        for j in range(k):
            members = labels == j
            packed[j, :cols] = self.x[members].sum(0)
            packed[j, cols] = members.sum()
        packed[0, cols + 1] = d[np.arange(len(labels)), labels].sum()
        packed = self._allreduce(packed)
        counts = packed[:, cols]
        new = centres.copy()
        nonempty = counts > 0  # an empty cluster keeps its centre
        new[nonempty] = (packed[nonempty, :cols] / counts[nonempty, None]).astype(centres.dtype)
        return new, float(packed[0, cols + 1])


@register
class KMeans(Benchmark):
    name = "kmeans"
    suite = "coral2-bdas"
    framework = "mpi4py-numpy"
    launcher_needs = "mpi"
    Params = KMeansParams
    id_params = ("dtype",)
    presets = {
        "tiny": {"rows_per_rank": 20_000, "repeats": 3},
        "small": {"rows_per_rank": 400_000, "repeats": 3},
        # 8 GB per node of float64 at 250 columns is 4 M rows: split over the ranks of a node by the user.
        "full": {"rows_per_rank": 4_000_000, "repeats": 3},
    }

    def run(self, p: KMeansParams, ctx) -> Outcome:
        world = ctx.world
        comm = None
        if world.size > 1:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
        x, _ = generate(p.rows_per_rank, p.cols, world.rank, p.seed, np.dtype(p.dtype))
        times, comm_times = [], []
        for rep in range(p.repeats):
            fit = _Fit(x, comm, p.seed + rep)
            if comm is not None:
                comm.Barrier()
            t0 = time.perf_counter()
            centres = fit.init_kmeanspp(p.k) if p.init == "kmeans++" else fit.init_random(p.k)
            objectives = []
            for _ in range(p.maxiter):
                centres, obj = fit.lloyd(centres)
                objectives.append(obj)
            local = time.perf_counter() - t0
            times.append(ctx.collectives.allreduce(local, "max"))
            comm_times.append(ctx.collectives.allreduce(fit.comm_time, "max"))
        # Sanity, untimed: continue to convergence from the last timed state.
        for _ in range(100):
            new, obj = fit.lloyd(centres)
            objectives.append(obj)
            if np.allclose(new, centres, rtol=0, atol=1e-9):
                break
            centres = new
        rows = p.rows_per_rank * world.size
        tb = rows * p.cols * np.dtype(p.dtype).itemsize / 1e12
        med = float(np.median(times))
        metrics = {
            "time": Metric(med, "s", times, p.dtype, higher_is_better=False,
                           description=f"init + {p.maxiter} Lloyd iterations, max over ranks"),
            "comm_time": Metric(float(np.median(comm_times)), "s", comm_times, p.dtype, higher_is_better=False,
                                description="time inside MPI collectives, max over ranks"),
            "fom": Metric(tb / med, "TB/s", [tb / t for t in times], p.dtype,
                          description="CORAL-2 figure of merit: input TB / runtime"),
        }
        return Outcome(metrics, self.checks(p, centres, objectives), {"rows": rows, "input_tb": tb})

    @staticmethod
    def checks(p: KMeansParams, centres: np.ndarray, objectives: list[float]) -> list[Check]:
        finite = all(math.isfinite(o) for o in objectives)
        monotone = all(b <= a * (1 + 1e-9) for a, b in zip(objectives, objectives[1:]))
        checks = [Check("objective_finite", finite, f"final objective {objectives[-1]:.6g}"),
                  Check("objective_non_increasing", monotone, f"{len(objectives)} iterations")]
        if p.k >= len(TRUE_MEANS):  # with fewer clusters than components, merged centres are expected
            means = centres.mean(1)
            errors = [float(np.abs(centres[np.argmin(np.abs(means - m))] - m).mean()) for m in TRUE_MEANS]
            detail = ", ".join(f"{m:g}: {e:.3f}" for m, e in zip(TRUE_MEANS, errors))
            checks.append(Check("centres_recovered", max(errors) <= p.tolerance,
                                f"mean |error| per true centre {detail}"))
        return checks
