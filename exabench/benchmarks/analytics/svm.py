"""CORAL-2 Big Data Analytics linear SVM, SPMD over MPI.

Two classes (rows alternate: class -1 from N(0,1), class +1 from N(2,1) in every
column), a linear model with intercept, and the suite's objective

    J(w, b) = (1/m) * ( sum_i max(0, 1 - y_i (x_i . w + b)) + 0.5 * (||w||^2 + b^2) )

i.e. mean hinge loss + 0.5/m ||(w, b)||^2. The intercept is penalised, as in the
reference: kazaam's `cost_svm` (kazaam 0.2-0, as vendored by RBigData/coral2)
takes the intercept as the weight of a column of ones and its `norm2(w)` covers
that weight too; `intercept: free` drops b^2 (the textbook SVM). With the
penalty, J is exactly liblinear's (scikit-learn's LinearSVC, loss='hinge', C=1,
intercept_scaling=1) objective divided by m.
The reference minimises J with Nelder-Mead for 500 iterations (not expected to
converge); here the solver is Newton's method on a Huber-smoothed hinge
(Chapelle 2007) with continuation of the smoothing width mu (1, 0.1, ...,
`mu_min`), the stages below mu = 1 on a working set of the rows near the margin,
then an active-set polish that solves the exact hinge problem's KKT system and,
when the conditions hold, certifies the optimum. A Newton iteration is two passes
over its rows plus one MPI reduction of (d+1)^2 + d+1 doubles; the line search
reduces scalars. Every rank solves the same small systems from bitwise identical
sums, so the ranks stay in lockstep.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exabench.benchmarks.registry import register
from exabench.benchmarks.analytics.common import (AnalyticsBenchmark, AnalyticsParams, TimedComm, blas_threads,
                                                  load_block, timed_repeats, timing_metrics, world_comm)
from exabench.benchmarks.base import Check, Outcome, param

CLASS_MEANS = (0.0, 2.0)  # class -1, class +1
GRAM_CHUNK_ROWS = 8192  # rows per chunk when the Newton Hessian gathers rows
HESSIAN_ROWS = 4096  # corner rows per rank in the Hessian, at most (beyond: a regular sample, weighted)
WHOLE_MU_MIN = 1.0  # Newton on all rows down to this smoothing width, then on the working set
FIRST_WORKING_MARGIN = 0.5  # rows with t = 1 - y (x.w + b) > -0.5 form the working set ...
WORKING_FRACTION = 0.05  # ... but at most 5 % of the rows (the nearest to the margin) ...
WORKING_MARGIN = 0.1  # ... and rows with t > -0.1 join it after a round that missed them
WORKING_ROUNDS = 10
GATHER_BYTES = 256 * 2**20  # a working set up to this size is gathered and solved on every rank
IRIS_POSITIVE = 0         # validation, as the reference's: setosa (+1) against the two other species (-1)
IRIS_MIN_ACCURACY = 0.80
SOLVER = "Newton on a Huber-smoothed hinge (Chapelle 2007) with continuation, working set and KKT polish"


@dataclass
class SVMParams(AnalyticsParams):
    mu_min: float = param(1e-3, "smoothing width of the last Newton stage (smaller: a thinner corner, less "
                          "curvature for Newton); the active-set polish then solves the exact hinge problem",
                          minimum=1e-4)
    max_iter: int = param(100, "Newton iterations per smoothing stage, at most", minimum=1)
    intercept: str = param("penalised", "penalised: b^2 joins ||w||^2 in the objective, as the reference (the "
                           "intercept is the weight of a column of ones); free: the intercept is not penalised",
                           choices=("penalised", "free"))
    min_accuracy: float = param(0.99, "sanity: training accuracy floor on synthetic data (classes 2 sd apart "
                                "per column)", minimum=0.0)


def class_of_rows(rows: np.ndarray) -> np.ndarray:
    return np.where(rows % 2 == 1, 1.0, -1.0)


def mean_of_rows(rows: np.ndarray) -> np.ndarray:
    return np.asarray(CLASS_MEANS)[(rows % 2)]


def hinge_objective(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: float, tcomm: TimedComm,
                    intercept: str = "penalised") -> float:
    """The suite's J(w, b) over all ranks (one pass)."""
    z = y * (x @ w.astype(x.dtype) + b)
    sums = tcomm.sum(np.array([np.maximum(0.0, 1.0 - z).sum(dtype=np.float64), len(x)]))
    return float((sums[0] + 0.5 * (float(w @ w) + _b_weight(intercept) * b * b)) / sums[1])


def _b_weight(intercept: str) -> float:
    """Weight of b^2 in the regulariser: 1 when the intercept is penalised (the reference), else 0."""
    if intercept not in ("penalised", "free"):
        raise ValueError(f"intercept must be 'penalised' or 'free', not {intercept!r}")
    return 1.0 if intercept == "penalised" else 0.0


@dataclass
class SVMResult:
    w: np.ndarray
    b: float
    objective: float      # exact hinge objective J at (w, b)
    passes: int           # passes over the data (X v or X^T v), to compare with Nelder-Mead's evaluations
    iterations: int       # Newton iterations over all stages
    stages: int
    kkt_certified: bool  # the KKT conditions of the exact hinge problem hold at (w, b)


def _huber_hinge(t: np.ndarray, mu: float) -> np.ndarray:
    """Hinge max(0, t) with the corner smoothed over 0 < t < mu (t = 1 - margin)."""
    return np.where(t >= mu, t - 0.5 * mu, np.where(t > 0, t * t / (2.0 * mu), 0.0))


def _solve_or_least_squares(a: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """a x = rhs by LU when that solves it (a few times faster), else by least squares (a singular guess)."""
    try:
        x = np.linalg.solve(a, rhs)
        if np.all(np.isfinite(x)) and np.linalg.norm(a @ x - rhs) <= 1e-9 * max(np.linalg.norm(rhs), 1e-300):
            return x
    except np.linalg.LinAlgError:
        pass
    return np.linalg.lstsq(a, rhs, rcond=None)[0]


class NewtonHinge:
    """Newton's method on the Huber-smoothed primal (Chapelle 2007, "Training a support vector
    machine in the primal"), with continuation in the smoothing width mu, over a set of rows.

    F = sum_i h_mu(1 - y_i (x_i . w + b)) + 0.5 (||w||^2 + reg_b b^2). The Hessian involves
    only the rows in the smoothed corner 0 < t < mu, usually few: each iteration costs a pass for the
    gradient, a pass for the step's change of margins, a small Gram matrix, and one reduction of
    (d+1)^2 + d+1 doubles. The line search (backtracking, Armijo) needs scalars only. `m` is the
    row count of the whole problem, which normalises J.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, tcomm: TimedComm, reg_b: float, m: float,
                 pass_rows: float | None = None):
        self.x, self.y, self.tcomm, self.reg_b, self.m = x, y, tcomm, reg_b, m
        self.pass_cost = len(x) / pass_rows if pass_rows else 1.0  # a pass here, in passes over all rows
        self.passes = 0.0
        self.iterations = 0

    def _reg(self, w: np.ndarray, b: float) -> float:
        return 0.5 * (float(w @ w) + self.reg_b * b * b)

    def margins_change(self, dw: np.ndarray, db: float) -> np.ndarray:
        self.passes += self.pass_cost
        return self.y * ((self.x @ dw.astype(self.x.dtype)).astype(np.float64) + db)

    def _smoothed(self, t: np.ndarray, w: np.ndarray, b: float, mu: float) -> float:
        return float(self.tcomm.sum(np.array([_huber_hinge(t, mu).sum()]))[0]) + self._reg(w, b)

    def _newton_system(self, t: np.ndarray, w: np.ndarray, b: float, mu: float):
        cols = len(w)
        slope = np.clip(t / mu, 0.0, 1.0)               # h'(t)
        coeff = -slope * self.y                         # dF/d(x.w + b) per row
        corner = (t > 0) & (t < mu)
        stride = 1 + int(corner.sum()) // HESSIAN_ROWS  # a wide corner: every stride-th of its rows, weighted
        if stride > 1:
            corner = corner & (np.cumsum(corner) % stride == 0)
        self.passes += self.pass_cost
        packed = np.zeros(cols + 1 + (cols + 1) ** 2)
        packed[:cols] = self.x.T @ coeff.astype(self.x.dtype)
        packed[cols] = coeff.sum()
        h = packed[cols + 1:].reshape(cols + 1, cols + 1)
        # Gram matrix of the corner rows, gathered chunk by chunk (at mu = 1 the corner can hold most
        # rows: no copy of them all).
        for lo in range(0, len(self.x), GRAM_CHUNK_ROWS):
            xq = self.x[lo:lo + GRAM_CHUNK_ROWS][corner[lo:lo + GRAM_CHUNK_ROWS]]
            h[:cols, :cols] += xq.T @ xq
            h[cols, :cols] += xq.sum(0, dtype=np.float64)
        h[:cols, cols] = h[cols, :cols]
        h[cols, cols] = corner.sum()
        h *= stride
        packed = self.tcomm.sum(packed)
        grad = packed[:cols + 1].copy()
        grad[:cols] += w
        grad[cols] += self.reg_b * b
        hess = packed[cols + 1:].reshape(cols + 1, cols + 1) / mu
        hess[np.arange(cols + 1), np.arange(cols + 1)] += 1.0
        hess[cols, cols] += self.reg_b - 1.0
        # A free intercept with no row in the corner has no curvature: a tiny ridge keeps H invertible.
        hess[cols, cols] += 1e-10 * (1.0 + hess[cols, cols])
        return grad, hess

    def newton(self, w: np.ndarray, b: float, mu: float, max_iter: int):
        cols = len(w)
        t = 1.0 - self.margins_change(w, b)
        f = self._smoothed(t, w, b, mu)
        for _ in range(max_iter):
            grad, hess = self._newton_system(t, w, b, mu)
            step = np.linalg.solve(hess, -grad)
            slope0 = float(grad @ step)
            if slope0 >= 0 or -slope0 <= 1e-15 * max(f, 1e-300):
                break  # no descent left at this mu
            dz = self.margins_change(step[:cols], step[cols])
            alpha = 1.0
            while True:
                f_new = self._smoothed(t - alpha * dz, w + alpha * step[:cols], b + alpha * step[cols], mu)
                if f_new <= f + 1e-4 * alpha * slope0 or alpha < 1e-12:
                    break
                alpha *= 0.5
            self.iterations += 1
            t = t - alpha * dz
            w, b = w + alpha * step[:cols], b + alpha * step[cols]
            done = f - f_new <= 1e-13 * f
            f = f_new
            if done:
                break
        return w, b

    def stages(self, w: np.ndarray, b: float, mu_max: float, mu_min: float, max_iter: int):
        """Newton at mu = mu_max, mu_max / 10, ..., mu_min; returns (w, b, stages)."""
        mu, count = mu_max, 0
        while True:
            count += 1
            w, b = self.newton(w, b, mu, max_iter)
            if mu <= mu_min:
                return w, b, count
            mu = max(mu * 0.1, mu_min)

    def exact(self, t: np.ndarray, w: np.ndarray, b: float) -> float:
        """J at (w, b), with t the margins of these rows (rows elsewhere have none inside the margin)."""
        return (float(self.tcomm.sum(np.array([np.maximum(t, 0.0).sum()]))[0]) + self._reg(w, b)) / self.m

    def polish(self, w: np.ndarray, b: float, width: float, rounds: int = 50):
        """The exact hinge optimum from the smoothed one, by an active-set exchange on the KKT system.

        Guess the rows on the margin S (|t| <= width), those inside L (t > 0, alpha = 1) and the
        rest (alpha = 0). With a free intercept, w = X_L^T y_L + X_S^T u, y_S (X_S w + b) = 1 and
        sum(u) = -sum(y_L), with u = alpha_S y_S, is one small linear system (|S| + 1 unknowns, S
        gathered on every rank). A penalised intercept is the weight of a column of ones: b =
        sum(y_L) + sum(u), no constraint, and the system is (X_S X_S^T + 1) u = y_S - X_S v - sum(y_L).
        If 0 <= alpha_S <= 1 and no other row changes side, the KKT conditions hold: the point is
        optimal. Otherwise rows move between the sets and the system is solved again.
        Returns (w, b, J, certified), the best point seen.
        """
        t = 1.0 - self.margins_change(w, b)
        best = (w, b, self.exact(t, w, b), False)
        # At most d + 1 rows lie exactly on the margin of a d-dimensional model with intercept:
        # start from the d + 1 rows nearest to it (within `width`), over all ranks.
        near = np.abs(t)
        candidates = np.sort(np.concatenate(self.tcomm.allgather(near[near <= width])))
        cutoff = candidates[len(w)] if len(candidates) > len(w) + 1 else width
        on = near <= cutoff if len(candidates) <= len(w) + 1 else near < cutoff
        inside = (t > 0) & ~on
        tol = 1e-9
        for _ in range(rounds):
            self.passes += self.pass_cost
            y_in = np.where(inside, self.y, 0.0)
            packed = self.tcomm.sum(np.append(self.x.T @ y_in.astype(self.x.dtype), y_in.sum()))
            v_inside, y_inside_sum = packed[:-1], packed[-1]
            parts = self.tcomm.allgather((self.x[on].astype(np.float64), self.y[on]))
            xs, ys = np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            n_s = len(ys)
            if n_s > 2 * (len(w) + 1):  # more margin rows than a sound guess holds: keep the best point
                break
            if self.reg_b:
                kkt = xs @ xs.T + 1.0
                u = _solve_or_least_squares(kkt, ys - xs @ v_inside - y_inside_sum)
                b_new = float(y_inside_sum + u.sum())
            else:
                kkt = np.zeros((n_s + 1, n_s + 1))
                kkt[:n_s, :n_s] = xs @ xs.T
                kkt[:n_s, n_s] = kkt[n_s, :n_s] = 1.0
                sol = _solve_or_least_squares(kkt, np.append(ys - xs @ v_inside, -y_inside_sum))
                u, b_new = sol[:n_s], float(sol[n_s])
            w_new = v_inside + xs.T @ u
            t_new = 1.0 - self.margins_change(w_new, b_new)
            j_new = self.exact(t_new, w_new, b_new)
            first = sum(len(p[1]) for p in parts[:self.tcomm.rank])
            alpha = (u * ys)[first:first + int(on.sum())]
            # How far each row breaks the guess: margin rows with alpha outside [0, 1], others on the
            # wrong side of the margin. The worst one over all ranks changes set (one at a time: moving
            # every offender at once can cycle).
            breach = np.zeros(len(t_new))
            on_idx = np.flatnonzero(on)
            breach[on_idx] = np.maximum(np.maximum(-alpha, alpha - 1.0), np.abs(t_new[on_idx]))
            breach[inside] = -t_new[inside]
            others = ~inside & ~on
            breach[others] = t_new[others]
            local_worst = int(np.argmax(breach)) if len(breach) else -1
            worst = self.tcomm.allgather((float(breach[local_worst]) if local_worst >= 0 else -np.inf,
                                          self.tcomm.rank))
            value, owner = max(worst)
            certified = value <= tol
            if j_new < best[2] or (certified and j_new <= best[2] * (1 + 1e-12)):
                best = (w_new, b_new, j_new, certified)
            if certified:
                break
            if owner == self.tcomm.rank:
                i = local_worst
                if on[i]:  # leaves the margin: inside when alpha > 1, outside when alpha < 0
                    on[i] = False
                    inside[i] = alpha[np.searchsorted(on_idx, i)] > 1.0
                else:       # reaches the margin from the wrong side
                    on[i], inside[i] = True, False
        return best


class SVMFit:
    """The exact minimiser of J over all rows; its last stages on a working set of rows.

    Rows beyond the margin (t < 0) have no loss and no gradient, and at the optimum only the rows
    near or inside the margin matter, a few percent of them. So Newton runs on all rows at mu = 1
    (where the corner is wide and the iterate still moves far; a wide corner's Hessian from a
    regular sample of HESSIAN_ROWS of its rows); then the rows nearest the margin (t > -0.5, at
    most 5 % of them) form the working set; the stages down to mu_min and the KKT polish run on
    those rows only, and one pass over all rows checks that no other row has reached the margin
    (else they join the set and the round repeats from there). A pass over the working set costs
    a few percent of a pass over the data. Profiled on 60,000 x 250 rows: this cut the passes over
    the data from about 300 to 50-55, for the same or a better objective.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, tcomm: TimedComm, intercept: str = "penalised"):
        self.x, self.y, self.tcomm = x, y.astype(np.float64), tcomm
        self.reg_b = _b_weight(intercept)
        self.m = float(tcomm.sum(np.array([len(x)], dtype=np.float64))[0])

    def _solver(self, rows=None) -> NewtonHinge:
        x, y = (self.x, self.y) if rows is None else (self.x[rows], self.y[rows])
        return NewtonHinge(x, y, self.tcomm, self.reg_b, self.m, pass_rows=len(self.x))

    def _working_solver(self, rows: np.ndarray) -> NewtonHinge:
        """The working set's solver. A small set is gathered on every rank and solved there without
        communication (the same rows in the same order: every rank computes the same bits): the
        hundreds of Newton steps and line-search trials on a few percent of the rows would otherwise
        each wait for a reduction, which costs more than the arithmetic on a busy node."""
        total = float(self.tcomm.sum(np.array([rows.sum()], dtype=np.float64))[0])
        if self.tcomm.size == 1 or total * self.x.shape[1] * self.x.itemsize > GATHER_BYTES:
            return self._solver(rows)
        parts = self.tcomm.allgather((self.x[rows], self.y[rows]))
        x, y = np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        return NewtonHinge(x, y, TimedComm(None), self.reg_b, self.m, pass_rows=len(self.x))

    def _first_working_set(self, t: np.ndarray, unknowns: int) -> np.ndarray:
        """The rows nearest the margin (t > -FIRST_WORKING_MARGIN) of each class, at most WORKING_FRACTION
        of the class's rows (separable classes crowd the margin) and at least 2 per unknown: with one
        class missing, a free intercept would slide all the set's rows out of the margin."""
        rows = np.zeros(len(t), dtype=bool)
        for label in (-1.0, 1.0):
            idx = np.flatnonzero(self.y == label)
            keep = max(int(WORKING_FRACTION * len(idx)), 2 * unknowns)
            if keep < len(idx):
                idx = idx[np.argpartition(-t[idx], keep)[:keep]]
            rows[idx[t[idx] > -FIRST_WORKING_MARGIN]] = True
        return rows

    def solve(self, mu_min: float, max_iter: int) -> SVMResult:
        whole = self._solver()
        w, b, stages = whole.stages(np.zeros(self.x.shape[1]), 0.0, 1.0, max(mu_min, WHOLE_MU_MIN), max_iter)
        solvers = [whole]
        t = 1.0 - whole.margins_change(w, b)
        rows = self._first_working_set(t, len(w))
        mu = max(WHOLE_MU_MIN * 0.1, mu_min)
        for round_ in range(WORKING_ROUNDS):
            if round_ == WORKING_ROUNDS - 1:
                rows[:] = True  # the last round, if it comes to that, takes every row
            part = self._working_solver(rows)
            solvers.append(part)
            w, b, count = part.stages(w, b, mu, mu_min, max_iter)
            w, b, _, certified = part.polish(w, b, mu_min)
            t = 1.0 - whole.margins_change(w, b)
            stages += count
            outside = int(self.tcomm.sum(np.array([(~rows & (t > -1e-9)).sum()], dtype=np.float64))[0])
            if not outside:
                break  # no row outside the set reaches the margin: the set's optimum is J's
            rows |= t > -WORKING_MARGIN
        return SVMResult(w, float(b), float(whole.exact(t, w, b)), sum(s.passes for s in solvers),
                         sum(s.iterations for s in solvers), stages, bool(certified and not outside))


def accuracy(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: float, tcomm: TimedComm) -> float:
    correct = np.sign(x @ w.astype(x.dtype) + b) == y
    sums = tcomm.sum(np.array([correct.sum(), len(y)], dtype=np.float64))
    return float(sums[0] / sums[1])


@register
class SVM(AnalyticsBenchmark):
    name = "svm"
    Params = SVMParams

    def run(self, p: SVMParams, ctx) -> Outcome:
        block = load_block(p, ctx, shift_of_rows=mean_of_rows, label_of_rows=class_of_rows)
        y = block.labels if p.data == "synthetic" else np.where(block.labels == IRIS_POSITIVE, 1.0, -1.0)
        tcomm = TimedComm(world_comm(ctx.world))
        with blas_threads(ctx.threads):
            samples, result = timed_repeats(lambda rep: SVMFit(block.x, y, tcomm, p.intercept)
                                            .solve(p.mu_min, p.max_iter),
                                            p.repeats, p.warmup, tcomm, ctx.collectives, p.budget_s, p.slowdown)
            acc = accuracy(block.x, y, result.w, result.b, tcomm)
        metrics = timing_metrics(samples, block.input_bytes, p.dtype, f"{SOLVER} to mu={p.mu_min:g}")
        info = {"rows": block.total_rows, "input_tb": block.input_bytes / 1e12, "solver": SOLVER,
                "objective": result.objective, "passes": result.passes, "newton_iterations": result.iterations,
                "stages": result.stages, "kkt_certified": bool(result.kkt_certified),
                "accuracy": acc, "intercept": result.b}
        return Outcome(metrics, self.checks(p, result, acc), info)

    @staticmethod
    def checks(p: SVMParams, result: SVMResult, acc: float) -> list[Check]:
        floor = IRIS_MIN_ACCURACY if p.data == "iris" else p.min_accuracy
        return [Check("objective_finite", bool(np.isfinite(result.objective)), f"objective {result.objective:.8g}"),
                Check("objective_below_start", bool(result.objective < 1.0),
                      f"J = {result.objective:.6g} < J(0, 0) = 1 after {result.passes} passes over the data"),
                Check("training_accuracy", acc > floor, f"accuracy {acc:.4f} (floor {floor})")]
