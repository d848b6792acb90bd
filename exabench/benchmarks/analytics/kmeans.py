"""CORAL-2 Big Data Analytics K-Means, SPMD over MPI.

Each rank generates its own rows (untimed) from three Gaussians N(0,1), N(2,1),
N(10,1) in every column, as the suite does. What is timed is what the
reference's timer wraps (RBigData/coral2 `benchmarks/r/kmeans.r`: one
`comm.timer` around kazaam's `km` for k = 2, 3 and 4 in turn, `maxiter = 2`):
for each k, random distinct rows as initial centres (kazaam's `km.init`), an
assignment, then `maxiter` rounds of centre update + assignment, stopping early
when the centres stop moving (kazaam compares them with `all.equal`). The time is
the max over ranks. Local work is BLAS: distances as one GEMM, per-cluster sums
as a one-hot GEMM; ranks combine sums, counts and the objective in one MPI
reduction per iteration. The sanity check, apart from the timing, runs Lloyd to
convergence and checks that the true centres are recovered (synthetic) or, as
the reference's validation, the best Rand index with the species over starts
from seeds 1 to 100 (iris).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from exabench.benchmarks.registry import register
from exabench.benchmarks.analytics.common import (AnalyticsBenchmark, AnalyticsParams, TimedComm, blas_threads,
                                                  load_block, rand_index, timed_repeats, timing_metrics, world_comm)
from exabench.benchmarks.base import Check, Outcome, param

TRUE_MEANS = (0.0, 2.0, 10.0)
SUITE_KS = (2, 3, 4)  # the reference times these fits together (k = 0 selects them)
IRIS_MIN_RAND_INDEX = 0.75
IRIS_STARTS = 100  # the reference's validation keeps the best of the starts from seeds 1 to 100
ALL_EQUAL_TOLERANCE = 1.5e-8  # R's all.equal: mean relative difference, with which kazaam's km stops
LLOYD_CHUNK_ROWS = 2048  # rows per chunk of a Lloyd pass (2048 x 250 float64 = 4 MB)


@dataclass
class KMeansParams(AnalyticsParams):
    # Bounds: every centre is a k x cols array on every rank, every iteration a pass over the data.
    k: int = param(0, "clusters of the one timed fit; 0: the suite's fits for k = 2, 3 and 4 in turn, timed "
                   "together as the reference's timer", minimum=0, maximum=100_000)
    maxiter: int = param(2, "Lloyd iterations per fit, at most (2 in the suite)", minimum=1, maximum=100_000)
    init: str = param("random", "initial centres: random distinct rows (the reference) or greedy distributed "
                      "k-means++", choices=("random", "kmeans++"))
    tolerance: float = param(0.25, "sanity: max |found - true| per coordinate (mean over columns)", minimum=0.0)


def component_of_rows(rows: np.ndarray) -> np.ndarray:
    """Generating Gaussian of each global row: row index mod 3 (so every rank holds all three)."""
    return rows % len(TRUE_MEANS)


def mean_of_rows(rows: np.ndarray) -> np.ndarray:
    return np.asarray(TRUE_MEANS)[component_of_rows(rows)]


def _sq_dist(x: np.ndarray, x_sq: np.ndarray, centres: np.ndarray) -> np.ndarray:
    d = x @ centres.T
    d *= -2.0
    d += x_sq[:, None]
    d += (centres * centres).sum(1)[None, :]
    return np.maximum(d, 0.0, out=d)


class KMeansFit:
    """Distributed k-means over the rows of every rank (a TimedComm without MPI runs alone)."""

    def __init__(self, x: np.ndarray, tcomm: TimedComm, seed: int, threads: int = 1):
        self.x, self.tcomm, self.threads = x, tcomm, max(1, int(threads))
        self.x_sq = np.concatenate(self._chunked(lambda lo, hi: np.einsum("ij,ij->i", x[lo:hi], x[lo:hi])))
        self.rng = np.random.default_rng(seed)  # same stream on every rank: all draw the same numbers

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def _chunked(self, fn) -> list:
        """fn(lo, hi) over cache-sized row chunks, on `threads` threads with single-threaded BLAS
        inside (as scikit-learn does): k is small, and a multi-threaded GEMM with 3 columns spends
        its time synchronising threads, badly so on a loaded node."""
        n = len(self.x)
        chunks = [(lo, min(lo + LLOYD_CHUNK_ROWS, n)) for lo in range(0, n, LLOYD_CHUNK_ROWS)]
        if self.threads == 1 or len(chunks) == 1:
            return [fn(lo, hi) for lo, hi in chunks]
        from concurrent.futures import ThreadPoolExecutor
        with blas_threads(1), ThreadPoolExecutor(self.threads) as pool:  # numpy's BLAS calls release the GIL
            return list(pool.map(lambda c: fn(*c), chunks))

    def _sq_dist_all(self, centres: np.ndarray) -> np.ndarray:
        return np.vstack(self._chunked(lambda lo, hi: _sq_dist(self.x[lo:hi], self.x_sq[lo:hi], centres)))

    def _rows_at(self, weights: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Rows picked with probability proportional to `weights`, over all ranks."""
        local = float(weights.sum())
        totals = np.asarray(self.tcomm.allgather(local))
        offset = totals[: self.tcomm.rank].sum()
        targets = draws * totals.sum() - offset
        cum = np.cumsum(weights)
        mine = {i: self.x[min(np.searchsorted(cum, t, side="right"), len(cum) - 1)]
                for i, t in enumerate(targets) if 0 <= t < local}
        picked = {}
        for part in self.tcomm.allgather(mine):
            picked.update(part)
        return np.stack([picked[i] for i in range(len(draws))])

    def init_random(self, k: int) -> np.ndarray:
        """k distinct rows drawn uniformly from all ranks' rows (kazaam's km.init)."""
        counts = self.tcomm.allgather(len(self.x))
        first = sum(counts[: self.tcomm.rank])
        picks = self.rng.choice(sum(counts), size=k, replace=False)  # the same picks on every rank
        mine = {i: self.x[g - first] for i, g in enumerate(picks) if first <= g < first + len(self.x)}
        picked = {}
        for part in self.tcomm.allgather(mine):
            picked.update(part)
        return np.stack([picked[i] for i in range(k)])

    def init_kmeanspp(self, k: int) -> np.ndarray:
        """Greedy k-means++ (as scikit-learn): 2 + ln k candidates per centre, keep the best."""
        trials = 2 + int(math.log(k))
        centres = self._rows_at(np.ones(len(self.x)), self.rng.random(1))
        d2 = self._sq_dist_all(centres)[:, 0]
        for _ in range(1, k):
            cands = self._rows_at(d2, self.rng.random(trials))
            cd = np.minimum(d2[:, None], self._sq_dist_all(cands))
            pot = self.tcomm.sum(cd.sum(0, dtype=np.float64))
            best = int(np.argmin(pot))
            centres = np.vstack([centres, cands[best]])
            d2 = cd[:, best]
        return centres

    def init(self, k: int, how: str) -> np.ndarray:
        return self.init_kmeanspp(k) if how == "kmeans++" else self.init_random(k)

    def labels(self, centres: np.ndarray) -> np.ndarray:
        return self._sq_dist_all(centres).argmin(1)

    def lloyd(self, centres: np.ndarray) -> tuple[np.ndarray, float]:
        """One iteration; returns new centres and the objective (sum of squared distances) before it.

        One pass over the rows in cache-sized chunks: a chunk's distances (GEMM), labels and
        per-cluster sums (one-hot GEMM) are computed while it is in cache.
        """
        k, cols = centres.shape
        c_sq = (centres * centres).sum(1)

        def chunk(lo: int, hi: int):
            xc = self.x[lo:hi]
            d = xc @ centres.T
            d *= -2.0
            d += c_sq
            labels = d.argmin(1)
            rows = np.arange(len(labels))
            onehot = np.zeros((len(labels), k), dtype=self.x.dtype)
            onehot[rows, labels] = 1
            part = np.zeros((k, cols + 2), dtype=np.float64)
            part[:, :cols] = onehot.T @ xc
            part[:, cols] = np.bincount(labels, minlength=k)
            part[0, cols + 1] = (d[rows, labels] + self.x_sq[lo:hi]).clip(0).sum(dtype=np.float64)
            return part

        packed = np.sum(self._chunked(chunk), axis=0)
        packed = self.tcomm.sum(packed)
        counts = packed[:, cols]
        new = centres.copy()
        nonempty = counts > 0  # an empty cluster keeps its centre
        new[nonempty] = (packed[nonempty, :cols] / counts[nonempty, None]).astype(centres.dtype)
        return new, float(packed[0, cols + 1])

    def fit(self, k: int, how: str, maxiter: int):
        """What the reference times for one k: initial centres, an assignment, then up to `maxiter`
        updates each followed by an assignment, stopping when the centres stop moving.
        Returns (centres, labels, objectives)."""
        centres = self.init(k, how)
        objectives = []
        for _ in range(maxiter):
            new, obj = self.lloyd(centres)  # assignment to `centres`, then their update
            objectives.append(obj)
            moved = np.abs(new - centres).mean() / max(np.abs(centres).mean(), 1e-300)
            centres = new
            if moved < ALL_EQUAL_TOLERANCE:
                break
        return centres, self.labels(centres), objectives  # the final assignment, as km returns labels

    def converge(self, centres: np.ndarray, max_iter: int = 300, tol: float = 1e-9):
        """Lloyd until centres move less than `tol` (absolute); returns centres and objectives."""
        objectives = []
        for _ in range(max_iter):
            new, obj = self.lloyd(centres)
            objectives.append(obj)
            moved = np.abs(new - centres).max()
            centres = new
            if moved <= tol:
                break
        return centres, objectives


def centre_errors(centres: np.ndarray) -> list[float]:
    """Mean |error| per coordinate of the found centre nearest each true component mean."""
    means = centres.mean(1)
    return [float(np.abs(centres[np.argmin(np.abs(means - m))] - m).mean()) for m in TRUE_MEANS]


@register
class KMeans(AnalyticsBenchmark):
    name = "kmeans"
    Params = KMeansParams
    # Its collectives inside one timed fit (row picks, k-means++ potentials, Lloyd sums): what
    # perf.local_check.kmeans_collectives models.
    communication = {"pattern": "kmeans-fit", "backend": "mpi", "regime": "small", "timed_metric": "time"}

    def run(self, p: KMeansParams, ctx) -> Outcome:
        block = load_block(p, ctx, shift_of_rows=mean_of_rows, label_of_rows=component_of_rows)
        tcomm = TimedComm(world_comm(ctx.world))
        ks = fitted_ks(p)

        def fit_once(rep: int):
            fit = KMeansFit(block.x, tcomm, p.seed + rep, ctx.threads)
            fits = []
            for k in ks:  # as the reference: every k from the same seed
                fit.reseed(p.seed + rep)
                fits.append(fit.fit(k, p.init, p.maxiter))
            return fit, fits

        with blas_threads(ctx.threads):
            samples, (fit, fits) = timed_repeats(fit_once, p.repeats, p.warmup, tcomm, ctx.collectives,
                                                 p.budget_s, p.slowdown)
            # Sanity, untimed, on the last k: continue to convergence from the last timed state.
            k = ks[-1]
            centres, _, objectives = fits[-1]
            centres, more = fit.converge(centres)
            objectives = objectives + more
            restarts = 0
            # Lloyd can settle in a local minimum from an unlucky start (two true clusters merged):
            # that says nothing of the implementation, so the check, like scikit-learn's n_init,
            # keeps the best of a few more starts before judging recovery.
            while p.data != "iris" and k >= len(TRUE_MEANS) and restarts < 4 and \
                    max(centre_errors(centres)) > p.tolerance:
                restarts += 1
                extra = KMeansFit(block.x, tcomm, p.seed + 1000 * restarts, ctx.threads)
                other, other_obj = extra.converge(extra.init(k, "kmeans++"))
                if other_obj[-1] < objectives[-1]:
                    centres = other
            rand = None
            if p.data == "iris":  # 150 rows: the Rand index needs every pair, so gather rows and labels
                rand = iris_validation(np.concatenate(tcomm.allgather(block.x)),
                                       np.concatenate(tcomm.allgather(block.labels)),
                                       np.concatenate(tcomm.allgather(fit.labels(centres))))
        metrics = timing_metrics(samples, block.input_bytes, p.dtype,
                                 f"k = {', '.join(map(str, ks))}: {p.init} init + up to {p.maxiter} Lloyd "
                                 "iterations + final assignment each")
        checks = self.checks(p, k, centres, objectives, rand)
        info = {"rows": block.total_rows, "input_tb": block.input_bytes / 1e12, "k": list(ks),
                "iterations_timed": [len(f[2]) for f in fits], "objective": objectives[-1],
                "iterations_to_converge": len(objectives), "sanity_restarts": restarts}
        if rand is not None:
            info["iris_best_rand_index"] = rand
        return Outcome(metrics, checks, info)

    @staticmethod
    def checks(p: KMeansParams, k: int, centres: np.ndarray, objectives: list[float],
               rand: float | None) -> list[Check]:
        finite = all(math.isfinite(o) for o in objectives)
        slack = max(1e-9, 100 * float(np.finfo(np.dtype(p.dtype)).eps))  # float32 distances round at 1e-7
        monotone = all(b <= a * (1 + slack) for a, b in zip(objectives, objectives[1:]))
        checks = [Check("objective_finite", finite, f"final objective {objectives[-1]:.6g}"),
                  Check("objective_non_increasing", monotone, f"{len(objectives)} iterations (slack {slack:.0e})")]
        if p.data == "iris":
            checks.append(Check("iris_rand_index", rand > IRIS_MIN_RAND_INDEX,
                                f"best Rand index with the species over {IRIS_STARTS} starts and the timed fit "
                                f"{rand:.4f} (floor {IRIS_MIN_RAND_INDEX})"))
        elif k >= len(TRUE_MEANS):  # with fewer clusters than components, merged centres are expected
            errors = centre_errors(centres)
            detail = ", ".join(f"{m:g}: {e:.3f}" for m, e in zip(TRUE_MEANS, errors))
            checks.append(Check("centres_recovered", max(errors) <= p.tolerance,
                                f"k = {k}: mean |error| per true centre {detail}"))
        return checks


def fitted_ks(p: KMeansParams) -> tuple[int, ...]:
    """The k of each timed fit: iris has three species; k = 0 is the suite's set."""
    if p.data == "iris":
        return (3,)
    return SUITE_KS if p.k == 0 else (p.k,)


def iris_validation(x: np.ndarray, species: np.ndarray, timed_labels: np.ndarray) -> float:
    """The reference's validation (validation/kmeans.r): k = 3 from random rows with seeds 1 to 100,
    each Lloyd to convergence on the gathered iris; the best Rand index with the species, here also
    over the timed fit's labels."""
    best = rand_index(timed_labels, species)
    for seed in range(1, IRIS_STARTS + 1):
        fit = KMeansFit(x, TimedComm(None), seed)
        centres, _ = fit.converge(fit.init(3, "random"))
        best = max(best, rand_index(fit.labels(centres), species))
    return best
