"""CORAL-2 Big Data Analytics PCA, SPMD over MPI.

Each rank generates its own rows of N(0,1) data (untimed). The timed fit is
either the reference's eigen-decomposition of the covariance (each rank forms
its Gram matrix X^T X and column sums with one BLAS SYRK, one MPI reduction
sums them, every rank runs `eigh` on the 250 x 250 covariance) or TSQR (column
means by one reduction, a local QR of the centred rows, the R factors gathered
and reduced by one more QR, then the SVD of R: stabler when the covariance is
ill-conditioned). Reported as the reference does: the first and last singular
values of the centred data, plus the explained variance (ratio).

The reference (RBigData/coral2 `benchmarks/r/princomp.r`) times
`eigen(cov(x), only.values=TRUE)`: the covariance and its eigenvalues. The
covariance fit here also returns the eigenvectors (LAPACK's syevd on a 250 x 250
matrix: microseconds beside the pass over the data), which the sanity check needs.

Sanity, untimed, on the leading components (a reconstruction from all of them
would pass for any orthonormal basis):
- the leading axes are orthonormal;
- the variance of all rows along each leading axis, in float64, is the reported
  eigenvalue (a wrong or reordered axis has another variance);
- they capture at least the variance that the leading axes of a float64
  reference (LAPACK's SVD of a sample of rows, centred) capture of all rows;
- the same fit, run on that sample (distributed as the data), gives the
  reference's leading explained variances and subspace;
and for synthetic data the spectrum lies inside the Marchenko-Pastur bounds
that N(0,1) data must obey.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from exabench.benchmarks.registry import register
from exabench.benchmarks.analytics.common import (AnalyticsBenchmark, AnalyticsParams, TimedComm, blas_threads,
                                                  load_block, timed_repeats, timing_metrics, world_comm)
from exabench.benchmarks.base import Check, Outcome, param

PROJECT_CHUNK_ROWS = 8192  # rows per chunk when the check projects the data in float64


@dataclass
class PCAParams(AnalyticsParams):
    method: str = param("covariance", "covariance (eigh of the summed Gram matrix, as the reference) or tsqr "
                        "(local QR, gathered R factors, SVD of R)", choices=("covariance", "tsqr"))
    leading: int = param(10, "sanity: leading components checked against the data and a float64 reference",
                         minimum=1, maximum=1_000_000)
    sample_rows: int = param(2000, "sanity: rows (the first of every rank) of the float64 reference's sample",
                             minimum=2, maximum=1_000_000)
    max_error: float = param(10.0, "sanity: largest relative error of the leading components, in units of the "
                             "square root of the dtype's machine epsilon", minimum=0.0)


@dataclass
class PCAResult:
    mean: np.ndarray                # column means
    singular_values: np.ndarray     # of the centred data, descending
    components: np.ndarray          # rows are the principal axes, in the order of singular_values
    rows: int

    @property
    def explained_variance(self) -> np.ndarray:
        return self.singular_values ** 2 / (self.rows - 1)

    @property
    def explained_variance_ratio(self) -> np.ndarray:
        ev = self.explained_variance
        return ev / ev.sum()


def fit_covariance(x: np.ndarray, tcomm: TimedComm) -> PCAResult:
    cols = x.shape[1]
    packed = np.empty(cols * cols + cols + 1, dtype=np.float64)
    packed[:cols * cols] = (x.T @ x).ravel()  # numpy runs X^T X as SYRK
    packed[cols * cols:-1] = x.sum(0, dtype=np.float64)
    packed[-1] = len(x)
    packed = tcomm.sum(packed)
    n = packed[-1]
    gram = packed[:cols * cols].reshape(cols, cols)
    mean = packed[cols * cols:-1] / n
    cov = (gram - n * np.outer(mean, mean)) / (n - 1)
    evals, evecs = np.linalg.eigh(cov)
    order = np.argsort(evals)[::-1]
    sv = np.sqrt(np.clip(evals[order], 0.0, None) * (n - 1))
    return PCAResult(mean, sv, evecs[:, order].T, int(n))


def fit_tsqr(x: np.ndarray, tcomm: TimedComm) -> PCAResult:
    cols = x.shape[1]
    sums = tcomm.sum(np.append(x.sum(0, dtype=np.float64), len(x)))
    n = sums[-1]
    mean = sums[:cols] / n
    r_local = np.linalg.qr(x - mean.astype(x.dtype), mode="r")
    r = np.linalg.qr(np.vstack(tcomm.allgather(r_local)).astype(np.float64), mode="r")
    _, sv, vt = np.linalg.svd(r, full_matrices=False)
    if len(sv) < cols:  # fewer rows than columns: the missing singular values are zero
        sv = np.append(sv, np.zeros(cols - len(sv)))
        vt = np.vstack([vt, np.zeros((cols - len(vt), cols))])
    return PCAResult(mean, sv, vt, int(n))


FITS = {"covariance": fit_covariance, "tsqr": fit_tsqr}


def _variance_along(x: np.ndarray, mean: np.ndarray, axes: np.ndarray, tcomm: TimedComm) -> np.ndarray:
    """Variance of all ranks' rows along each row of `axes`, in float64 (one pass, in chunks)."""
    sq = np.zeros(len(axes))
    shift = mean @ axes.T
    for lo in range(0, len(x), PROJECT_CHUNK_ROWS):
        proj = x[lo:lo + PROJECT_CHUNK_ROWS].astype(np.float64) @ axes.T - shift
        sq += np.einsum("ij,ij->j", proj, proj)
    sums = tcomm.sum(np.append(sq, len(x)))
    return sums[:-1] / (sums[-1] - 1)


def leading_errors(x: np.ndarray, result: PCAResult, fit, tcomm: TimedComm, leading: int,
                   sample_rows: int) -> dict[str, float]:
    """How far the leading components of `result` (fitted on all ranks' rows `x`) and of `fit` run on a
    sample are from the data and from a float64 reference; relative errors, 0 for an exact answer.

    - orthonormality: max |V_q V_q^T - I| of the q leading axes;
    - rayleigh: max over them of |variance of the data along the axis / reported eigenvalue - 1|;
    - captured: how much less variance of the data the q axes capture than the reference's q leading
      axes (from the sample) do, relative (0 when they capture at least as much, as they must);
    - sample_variance, sample_subspace: the fit run on the sample (the first rows of every rank)
      against LAPACK's SVD of that sample in float64, as the largest relative error of the q leading
      explained variances and 1 - the smallest cosine of the principal angles between the subspaces.
    """
    q = min(leading, len(result.components))
    axes = result.components[:q].astype(np.float64)
    share = -(-sample_rows // tcomm.size)
    local = x[:share]
    sample_fit = fit(local, tcomm)
    sample = np.vstack(tcomm.allgather(local.astype(np.float64)))
    _, sv, ref_axes = np.linalg.svd(sample - sample.mean(0), full_matrices=False)
    qs = min(q, len(sample) - 1)
    ref_variance = sv[:qs] ** 2 / (len(sample) - 1)
    along = _variance_along(x, result.mean, np.vstack([axes, ref_axes[:q]]), tcomm)
    ours, theirs = along[:q], along[q:]
    cosines = np.linalg.svd(sample_fit.components[:qs].astype(np.float64) @ ref_axes[:qs].T, compute_uv=False)
    return {
        "orthonormality": float(np.abs(axes @ axes.T - np.eye(q)).max()),
        "rayleigh": float(np.abs(ours / np.maximum(result.explained_variance[:q], 1e-300) - 1).max()),
        "captured": float(max(0.0, 1 - ours.sum() / theirs.sum())) if theirs.sum() > 0 else 0.0,
        "sample_variance": float(np.abs(sample_fit.explained_variance[:qs] / ref_variance - 1).max()),
        "sample_subspace": float(1 - cosines.min()),
    }


@register
class PCA(AnalyticsBenchmark):
    name = "pca"
    Params = PCAParams

    def run(self, p: PCAParams, ctx) -> Outcome:
        block = load_block(p, ctx)
        tcomm = TimedComm(world_comm(ctx.world))
        fit = FITS[p.method]
        with blas_threads(ctx.threads):
            samples, result = timed_repeats(lambda rep: fit(block.x, tcomm), p.repeats, p.warmup, tcomm,
                                            ctx.collectives, p.budget_s, p.slowdown)
            errors = leading_errors(block.x, result, fit, tcomm, p.leading, p.sample_rows)
        metrics = timing_metrics(samples, block.input_bytes, p.dtype, f"PCA by {p.method}")
        sv = result.singular_values
        info = {"rows": block.total_rows, "input_tb": block.input_bytes / 1e12,
                "first_singular_value": float(sv[0]), "last_singular_value": float(sv[-1]),
                # what the reference prints: the first and last "standard deviations", sqrt(eigenvalues of cov)
                "first_standard_deviation": float(np.sqrt(result.explained_variance[0])),
                "last_standard_deviation": float(np.sqrt(result.explained_variance[-1])),
                "explained_variance_ratio_first": float(result.explained_variance_ratio[0]),
                "explained_variance_ratio_last": float(result.explained_variance_ratio[-1]),
                "leading_component_errors": errors}
        return Outcome(metrics, self.checks(p, result, errors, block.x.shape[1]), info)

    @staticmethod
    def checks(p: PCAParams, result: PCAResult, errors: dict[str, float], cols: int) -> list[Check]:
        limit = p.max_error * math.sqrt(float(np.finfo(np.dtype(p.dtype)).eps))
        sv = result.singular_values
        worst = max(errors, key=errors.get)
        checks = [Check("singular_values_finite", bool(np.all(np.isfinite(sv))),
                        f"first {sv[0]:.6g}, last {sv[-1]:.6g}"),
                  Check("leading_components", all(e <= limit for e in errors.values()),
                        ", ".join(f"{k} {v:.2g}" for k, v in errors.items()) + f" (limit {limit:.2g}; worst {worst})")]
        if p.data == "synthetic" and result.rows > cols:
            # N(0,1) columns: sample covariance eigenvalues lie in (1 -+ sqrt(cols/rows))^2, with slack.
            ratio = math.sqrt(cols / result.rows)
            lo, hi = 0.8 * (1 - ratio) ** 2, 1.2 * (1 + ratio) ** 2
            ev = result.explained_variance
            checks.append(Check("spectrum_in_marchenko_pastur_bounds", bool(lo <= ev[-1] and ev[0] <= hi),
                                f"explained variance {ev[-1]:.4g} .. {ev[0]:.4g}, bounds {lo:.4g} .. {hi:.4g}"))
        return checks
