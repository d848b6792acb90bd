"""CORAL-2 Big Data Analytics linear SVM, SPMD over MPI.

Two classes (rows alternate: class -1 from N(0,1), class +1 from N(2,1) in every
column), a linear model with intercept, and the suite's objective

    J(w, b) = (1/m) * ( sum_i max(0, 1 - y_i (x_i . w + b)) + 0.5 * ||w||^2 )

i.e. mean hinge loss + 0.5/m ||w||^2 (the intercept is not penalised). The
reference minimises it with Nelder-Mead; here the solver is L-BFGS (scipy's
L-BFGS-B) on a Huber-smoothed hinge with continuation of the smoothing width mu
(1, 0.1, ..., `mu_min`), warm-started from stage to stage. The smoothed loss is
within mu/2 of the hinge at every point, so the last stage's exact objective is
within mu_min/2 of the optimum. Each evaluation is two passes over the local
rows (X w and X^T c) and one MPI reduction of 252 doubles; every rank runs the
same L-BFGS on bitwise identical sums, so ranks stay in lockstep.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import register
from .analytics import (SIZE_PRESETS, SUITE, AnalyticsParams, TimedComm, blas_threads, load_block,
                        timed_repeats, timing_metrics, world_comm)
from .base import Benchmark, Check, Outcome, param

CLASS_MEANS = (0.0, 2.0)  # class -1, class +1
IRIS_POSITIVE = 2         # validation: virginica (+1) against the two other species (-1)
IRIS_MIN_ACCURACY = 0.80
SOLVER = "L-BFGS on a Huber-smoothed hinge with continuation"


@dataclass
class SVMParams(AnalyticsParams):
    mu_min: float = param(1e-6, "smallest smoothing width of the hinge (exact objective within mu_min/2 "
                          "of the optimum)", minimum=1e-12)
    max_iter: int = param(500, "L-BFGS iterations per smoothing stage, at most", minimum=1)
    min_accuracy: float = param(0.99, "sanity: training accuracy floor on synthetic data (classes 2 sd apart "
                                "per column)", minimum=0.0)


def class_of_rows(rows: np.ndarray) -> np.ndarray:
    return np.where(rows % 2 == 1, 1.0, -1.0)


def mean_of_rows(rows: np.ndarray) -> np.ndarray:
    return np.asarray(CLASS_MEANS)[(rows % 2)]


def hinge_objective(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: float, tcomm: TimedComm) -> float:
    """The suite's J(w, b) over all ranks (one pass)."""
    z = y * (x @ w.astype(x.dtype) + b)
    sums = tcomm.sum(np.array([np.maximum(0.0, 1.0 - z).sum(dtype=np.float64), len(x)]))
    return float((sums[0] + 0.5 * float(w @ w)) / sums[1])


@dataclass
class SVMResult:
    w: np.ndarray
    b: float
    objective: float      # exact hinge objective J at (w, b)
    evaluations: int      # objective + gradient evaluations (each two passes over the data)
    stages: int


class SVMFit:
    """Distributed smoothed-hinge objective and its gradient, for scipy's L-BFGS-B."""

    def __init__(self, x: np.ndarray, y: np.ndarray, tcomm: TimedComm):
        self.x, self.y, self.tcomm = x, y.astype(x.dtype), tcomm
        self.m = float(tcomm.sum(np.array([len(x)], dtype=np.float64))[0])
        self.evaluations = 0
        self.last_hinge = np.inf  # exact objective at the last point evaluated

    def value_and_grad(self, theta: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
        self.evaluations += 1
        w, b = theta[:-1], theta[-1]
        z = self.x @ w.astype(self.x.dtype)
        z += self.x.dtype.type(b)
        z *= self.y
        t = 1.0 - z.astype(np.float64)
        hinge = np.maximum(t, 0.0)
        smooth = np.where(t >= mu, t - 0.5 * mu, hinge * hinge / (2.0 * mu))
        coeff = -np.clip(t / mu, 0.0, 1.0) * self.y  # d smooth / d (x.w + b)
        cols = len(w)
        packed = np.empty(cols + 3, dtype=np.float64)
        packed[:cols] = self.x.T @ coeff.astype(self.x.dtype)
        packed[cols] = coeff.sum()
        packed[cols + 1] = smooth.sum()
        packed[cols + 2] = hinge.sum()
        packed = self.tcomm.sum(packed)
        reg = 0.5 * float(w @ w)
        self.last_hinge = (packed[cols + 2] + reg) / self.m
        grad = np.append(packed[:cols] + w, packed[cols]) / self.m
        return (packed[cols + 1] + reg) / self.m, grad

    def solve(self, mu_min: float, max_iter: int, theta0: np.ndarray | None = None) -> SVMResult:
        from scipy.optimize import minimize
        theta = np.zeros(self.x.shape[1] + 1) if theta0 is None else theta0
        best_j, best_theta, stages, mu = np.inf, theta, 0, 1.0
        while True:
            stages += 1
            res = minimize(self.value_and_grad, theta, args=(mu,), jac=True, method="L-BFGS-B",
                           options={"maxiter": max_iter, "ftol": 1e-15, "gtol": 1e-10})
            theta = res.x
            j = hinge_objective(self.x, self.y, theta[:-1], theta[-1], self.tcomm)
            if j <= best_j:
                best_j, best_theta = j, theta
            if mu <= mu_min:
                break
            mu = max(mu * 0.1, mu_min)
        return SVMResult(best_theta[:-1], float(best_theta[-1]), best_j, self.evaluations, stages)


def accuracy(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: float, tcomm: TimedComm) -> float:
    correct = np.sign(x @ w.astype(x.dtype) + b) == y
    sums = tcomm.sum(np.array([correct.sum(), len(y)], dtype=np.float64))
    return float(sums[0] / sums[1])


@register
class SVM(Benchmark):
    name = "svm"
    suite = SUITE
    framework = "mpi4py-numpy-scipy"
    launcher_needs = "mpi"
    Params = SVMParams
    id_params = ("dtype",)
    presets = SIZE_PRESETS

    def run(self, p: SVMParams, ctx) -> Outcome:
        block = load_block(p, ctx, shift_of_rows=mean_of_rows, label_of_rows=class_of_rows)
        y = block.labels if p.data == "synthetic" else np.where(block.labels == IRIS_POSITIVE, 1.0, -1.0)
        tcomm = TimedComm(world_comm(ctx.world))
        with blas_threads(ctx.threads):
            samples, result = timed_repeats(lambda rep: SVMFit(block.x, y, tcomm).solve(p.mu_min, p.max_iter),
                                            p.repeats, p.warmup, tcomm, ctx.collectives)
            acc = accuracy(block.x, y, result.w, result.b, tcomm)
        metrics = timing_metrics(samples, block.input_bytes, p.dtype, f"{SOLVER} to mu={p.mu_min:g}")
        info = {"rows": block.total_rows, "input_tb": block.input_bytes / 1e12, "solver": SOLVER,
                "objective": result.objective, "evaluations": result.evaluations, "stages": result.stages,
                "accuracy": acc, "intercept": result.b}
        return Outcome(metrics, self.checks(p, result, acc), info)

    @staticmethod
    def checks(p: SVMParams, result: SVMResult, acc: float) -> list[Check]:
        floor = IRIS_MIN_ACCURACY if p.data == "iris" else p.min_accuracy
        return [Check("objective_finite", bool(np.isfinite(result.objective)), f"objective {result.objective:.8g}"),
                Check("objective_below_start", result.objective < 1.0,
                      f"J = {result.objective:.6g} < J(0, 0) = 1 after {result.evaluations} evaluations"),
                Check("training_accuracy", acc > floor, f"accuracy {acc:.4f} (floor {floor})")]
