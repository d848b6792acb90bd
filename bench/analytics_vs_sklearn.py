"""exabench's analytics kernels against scikit-learn on the same single-node data, in one run.

    PYTHONPATH=. python bench/analytics_vs_sklearn.py [--rows 100000] [--cols 250] [--dtype float64]

A benchmark script, not a test: K-Means, PCA and the linear SVM each run on the suite's data
(one process, no MPI, the same BLAS threads for both), timed as the median of --repeats fits,
with the quality of each answer beside the time: K-Means inertia, PCA singular values and
reconstruction error, SVM objective J = (sum hinge + 0.5 ||w||^2) / m and accuracy.
A ratio above 1 means exabench was faster. Times are noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import numpy as np

from exabench.benchmarks.analytics import common as analytics, kmeans, pca, svm


def timed(fn, repeats: int):
    """(median seconds, last result) of `repeats` calls after one warm-up call."""
    fn()
    seconds, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - t)
    return statistics.median(seconds), result


def compare_kmeans(rows, cols, dtype, repeats, seed, threads):
    from sklearn.cluster import KMeans
    x = analytics.generate_rows(0, rows, cols, seed, dtype, kmeans.mean_of_rows)
    alone = analytics.TimedComm(None)

    def ours():
        fit = kmeans.KMeansFit(x, alone, seed, threads)
        centres, objectives = fit.converge(fit.init(3, "kmeans++"), tol=0.0)
        return objectives[-1]

    def theirs():
        return KMeans(n_clusters=3, init="k-means++", n_init=1, tol=0.0, max_iter=300, algorithm="lloyd",
                      random_state=seed).fit(x).inertia_

    (t_ours, q_ours), (t_sk, q_sk) = timed(ours, repeats), timed(theirs, repeats)
    return "K-Means (k=3, k-means++, Lloyd to a fixed point)", t_ours, t_sk, f"inertia {q_ours:.8g}", \
        f"inertia {q_sk:.8g}"


def compare_pca(rows, cols, dtype, repeats, seed, threads):
    from sklearn.decomposition import PCA
    x = analytics.generate_rows(0, rows, cols, seed, dtype)
    alone = analytics.TimedComm(None)
    t_ours, res = timed(lambda: pca.fit_covariance(x, alone), repeats)
    t_sk, sk = timed(lambda: PCA().fit(x), repeats)  # 'auto' picks covariance_eigh for tall data
    agree = np.abs(res.singular_values / sk.singular_values_ - 1).max()
    recon = pca.reconstruction_error(x, res, alone)
    return "PCA (all 250 components)", t_ours, t_sk, \
        f"sv {res.singular_values[0]:.6g}..{res.singular_values[-1]:.6g}, recon {recon:.1e}", \
        f"sv {sk.singular_values_[0]:.6g}..{sk.singular_values_[-1]:.6g}, max rel diff {agree:.1e}"


def compare_svm(rows, cols, dtype, repeats, seed, threads, separation):
    from sklearn.svm import LinearSVC
    idx = np.arange(rows)
    x = analytics.generate_rows(0, rows, cols, seed, dtype, lambda r: separation * (r % 2))
    y = svm.class_of_rows(idx)
    alone = analytics.TimedComm(None)
    t_ours, res = timed(lambda: svm.SVMFit(x, y, alone).solve(1e-2, 100), repeats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # liblinear's ConvergenceWarning: its objective is printed instead
        t_sk, sk = timed(lambda: LinearSVC(C=1.0, loss="hinge", max_iter=100_000).fit(x, y), repeats)
    j_sk = svm.hinge_objective(x, y, sk.coef_[0].astype(np.float64), float(sk.intercept_[0]), alone)
    acc_ours = svm.accuracy(x, y, res.w, res.b, alone)
    acc_sk = float((sk.predict(x) == y).mean())
    return f"SVM (class means 0 and {separation:g})", t_ours, t_sk, \
        f"J {res.objective:.6g}, acc {acc_ours:.4f}{', KKT-certified' if res.kkt_certified else ''}", \
        f"J {j_sk:.6g}, acc {acc_sk:.4f} (LinearSVC hinge)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--cols", type=int, default=analytics.COLS)
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="BLAS/OpenMP threads for both (0: all cores)")
    ap.add_argument("--only", nargs="*", default=["kmeans", "pca", "svm", "svm-overlap"],
                    choices=["kmeans", "pca", "svm", "svm-overlap"], help="workloads to run")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    import sklearn
    from threadpoolctl import threadpool_limits
    dtype = np.dtype(args.dtype)
    threads = args.threads or os.cpu_count()
    compares = {"kmeans": compare_kmeans, "pca": compare_pca,
                "svm": lambda *a: compare_svm(*a, separation=2.0),
                "svm-overlap": lambda *a: compare_svm(*a, separation=0.3)}
    lines = []
    with threadpool_limits(limits=threads):
        for name in args.only:
            lines.append(compares[name](args.rows, args.cols, dtype, args.repeats, args.seed, threads))
    print(f"{args.rows} rows x {args.cols} columns, {args.dtype}, median of {args.repeats}, "
          f"scikit-learn {sklearn.__version__}, threads {threads}")
    print(f"{'workload':48s} {'exabench s':>10s} {'sklearn s':>10s} {'speedup':>8s}  quality (exabench | sklearn)")
    for name, t_ours, t_sk, q_ours, q_sk in lines:
        print(f"{name:48s} {t_ours:10.3f} {t_sk:10.3f} {t_sk / t_ours:8.2f}  {q_ours} | {q_sk}")


if __name__ == "__main__":
    main()
