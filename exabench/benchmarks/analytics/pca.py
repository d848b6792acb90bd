"""CORAL-2 Big Data Analytics PCA, SPMD over MPI.

Each rank generates its own rows of N(0,1) data (untimed). The timed fit is
either the reference's eigen-decomposition of the covariance (each rank forms
its Gram matrix X^T X and column sums with one BLAS SYRK, one MPI reduction
sums them, every rank runs `eigh` on the 250 x 250 covariance) or TSQR (column
means by one reduction, a local QR of the centred rows, the R factors gathered
and reduced by one more QR, then the SVD of R: stabler when the covariance is
ill-conditioned). Reported as the reference does: the first and last singular
values of the centred data, plus the explained variance (ratio).

Sanity, untimed: the reconstruction error of the centred data from all
components (machine precision expected), and for synthetic data the spectrum
inside the Marchenko-Pastur bounds that N(0,1) data must obey.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from exabench.benchmarks.registry import register
from exabench.benchmarks.analytics.common import (AnalyticsBenchmark, AnalyticsParams, TimedComm, blas_threads,
                                                  load_block, timed_repeats, timing_metrics, world_comm)
from exabench.benchmarks.base import Check, Outcome, param


@dataclass
class PCAParams(AnalyticsParams):
    method: str = param("covariance", "covariance (eigh of the summed Gram matrix, as the reference) or tsqr "
                        "(local QR, gathered R factors, SVD of R)", choices=("covariance", "tsqr"))
    max_recon_error: float = param(1000.0, "sanity: max relative reconstruction error, in units of the "
                                   "dtype's machine epsilon", minimum=0.0)


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


def reconstruction_error(x: np.ndarray, result: PCAResult, tcomm: TimedComm) -> float:
    """||Xc - (Xc V^T) V||_F / ||Xc||_F over all ranks, with every component kept."""
    xc = x.astype(np.float64) - result.mean
    v = result.components
    residual = xc - (xc @ v.T) @ v
    sq = tcomm.sum(np.array([np.square(residual).sum(), np.square(xc).sum()]))
    return float(math.sqrt(sq[0] / sq[1])) if sq[1] > 0 else 0.0


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
                                            ctx.collectives)
            recon = reconstruction_error(block.x, result, tcomm)
        metrics = timing_metrics(samples, block.input_bytes, p.dtype, f"PCA by {p.method}")
        sv = result.singular_values
        info = {"rows": block.total_rows, "input_tb": block.input_bytes / 1e12,
                "first_singular_value": float(sv[0]), "last_singular_value": float(sv[-1]),
                "explained_variance_ratio_first": float(result.explained_variance_ratio[0]),
                "explained_variance_ratio_last": float(result.explained_variance_ratio[-1]),
                "reconstruction_error": recon}
        return Outcome(metrics, self.checks(p, result, recon, block.x.shape[1]), info)

    @staticmethod
    def checks(p: PCAParams, result: PCAResult, recon: float, cols: int) -> list[Check]:
        eps = float(np.finfo(np.dtype(p.dtype)).eps)
        sv = result.singular_values
        checks = [Check("singular_values_finite", bool(np.all(np.isfinite(sv))),
                        f"first {sv[0]:.6g}, last {sv[-1]:.6g}"),
                  Check("reconstruction_error", recon <= p.max_recon_error * eps,
                        f"relative error {recon:.3g} = {recon / eps:.3g} eps (limit {p.max_recon_error:g} eps)")]
        if p.data == "synthetic" and result.rows > cols:
            # N(0,1) columns: sample covariance eigenvalues lie in (1 -+ sqrt(cols/rows))^2, with slack.
            ratio = math.sqrt(cols / result.rows)
            lo, hi = 0.8 * (1 - ratio) ** 2, 1.2 * (1 + ratio) ** 2
            ev = result.explained_variance
            checks.append(Check("spectrum_in_marchenko_pastur_bounds", bool(lo <= ev[-1] and ev[0] <= hi),
                                f"explained variance {ev[-1]:.4g} .. {ev[0]:.4g}, bounds {lo:.4g} .. {hi:.4g}"))
        return checks
