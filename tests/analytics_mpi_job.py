"""Run under mpirun by tests/integration/test_analytics.py: the analytics kernels on every rank's block,
the same data gathered on rank 0 and fitted by scikit-learn, and the comparison written as JSON.

    mpirun -np 3 python tests/analytics_mpi_job.py OUT.json ROWS

ROWS is the global number of synthetic rows (choose one not divisible by the ranks for uneven
splits). Rank 0 writes {case: {quantity: value}}; the test asserts on the numbers.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from exabench import benchmarks
from exabench.benchmarks.analytics import common as analytics, kmeans, pca, svm
from exabench.training.distributed import detect_world
from exabench.runner import Context

COLS = 20  # few columns: fast, and enough for the kernels' code paths


def gather_rows(comm, a):
    parts = comm.gather(a, root=0)
    return np.concatenate(parts) if parts is not None else None


def kmeans_case(x, comm, k, seed, how):
    fit = kmeans.KMeansFit(x, analytics.TimedComm(comm), seed)
    init = fit.init(k, how)
    rows_of_x = np.vstack(comm.allgather(x))  # random init: k distinct rows of the data
    init_is_rows = all(any(np.array_equal(c, r) for r in rows_of_x) for c in init) and \
        len({c.tobytes() for c in init}) == k
    centres, objectives = fit.converge(init.copy(), tol=0.0)
    full = gather_rows(comm, x)
    if comm.Get_rank() != 0:
        return None
    from sklearn.cluster import KMeans
    sk = KMeans(n_clusters=k, init=init, n_init=1, max_iter=300, tol=0.0, algorithm="lloyd").fit(full)
    return {"init_is_distinct_rows": init_is_rows,
            "centre_max_abs_diff": float(np.abs(centres - sk.cluster_centers_).max()),
            "inertia": objectives[-1], "sklearn_inertia": float(sk.inertia_),
            "sklearn_best_of_10_inertia": float(KMeans(n_clusters=k, n_init=10, random_state=0).fit(full).inertia_)}


def pca_case(x, comm, method):
    res = pca.FITS[method](x, analytics.TimedComm(comm))
    full = gather_rows(comm, x)
    if comm.Get_rank() != 0:
        return None
    from sklearn.decomposition import PCA
    sk = PCA(svd_solver="full").fit(full.astype(np.float64))
    n = min(full.shape)
    alignment = np.abs(np.einsum("ij,ij->i", res.components[:n], sk.components_[:n]))
    return {"sv_rel_diff": float(np.abs(res.singular_values[:n] / sk.singular_values_ - 1).max()),
            "evr_max_abs_diff": float(np.abs(res.explained_variance_ratio[:n] - sk.explained_variance_ratio_).max()),
            "min_component_alignment": float(alignment.min()),
            "first_sv": float(res.singular_values[0]), "last_sv": float(res.singular_values[n - 1])}


def svm_case(x, y, comm, nelder_mead=False, intercept="penalised"):
    tcomm = analytics.TimedComm(comm)
    res = svm.SVMFit(x, y, tcomm, intercept).solve(mu_min=1e-3, max_iter=500)
    acc = svm.accuracy(x, y, res.w, res.b, tcomm)
    full, full_y = gather_rows(comm, x), gather_rows(comm, y)
    if comm.Get_rank() != 0:
        return None
    from scipy.optimize import minimize
    from sklearn.svm import SVC, LinearSVC
    alone = analytics.TimedComm(None)

    def objective(theta):
        return svm.hinge_objective(full, full_y, theta[:-1], theta[-1], alone, intercept)

    if intercept == "penalised":
        # liblinear (LinearSVC, hinge, C = 1) appends a column of ones and penalises its weight: m J.
        sk = LinearSVC(C=1.0, loss="hinge", tol=1e-12, max_iter=1_000_000, random_state=0).fit(full, full_y)
    else:  # libsvm's SVC with a linear kernel leaves the intercept free: m J without b^2
        sk = SVC(kernel="linear", C=1.0, tol=1e-8).fit(full, full_y)
    sk_j = objective(np.append(sk.coef_.ravel(), sk.intercept_[0]))
    out = {}
    if nelder_mead:  # the reference's solver, from the same start
        t = time.perf_counter()
        nm = minimize(objective, np.zeros(full.shape[1] + 1), method="Nelder-Mead")
        out = {"nelder_mead_objective": float(nm.fun), "nelder_mead_evaluations": int(nm.nfev),
               "nelder_mead_seconds": time.perf_counter() - t}
    ours = full @ res.w + res.b
    agree = np.sign(ours) == sk.predict(full)
    return {**out, "objective": res.objective, "sklearn_objective": sk_j,
            "passes": res.passes, "kkt_certified": bool(res.kkt_certified), "accuracy": acc,
            "sklearn_accuracy": float((sk.predict(full) == full_y).mean()),
            "prediction_agreement": float(agree.mean()),
            "disagreeing_max_margin": float(np.abs(ours[~agree]).max(initial=0.0))}


def benchmark_checks(world, comm, name, params):
    """The benchmark's own run (timed repeats, sanity checks), as the runner calls it."""
    ctx = Context(spec={"layout": {"threads_per_rank": 1, "nodes": 1}}, world=world, run_dir=Path("."))
    cls = benchmarks.get(name)
    out = cls().run(cls.resolve_params("tiny", params, "(test)", name), ctx)
    return {"checks": {c.name: [c.passed, c.detail] for c in out.checks},
            "metrics": {k: m.value for k, m in out.metrics.items()}, "info": out.info}


def main(out_path: str, rows: int) -> None:
    comm = MPI.COMM_WORLD
    world = detect_world()
    results = {}
    x_iris, species = analytics.load_iris_block(world.rank, world.size, np.float64)
    start, stop = analytics.split_rows(rows, world.size, world.rank)
    x_km = analytics.generate_rows(start, stop, COLS, 7, np.float64, kmeans.mean_of_rows)
    x_pca = analytics.generate_rows(start, stop, COLS, 7, np.float64)
    x_svm = analytics.generate_rows(start, stop, COLS, 7, np.float64, svm.mean_of_rows)
    # Overlapping classes (means 0 and 0.3): a non-separable problem where the hinge matters.
    x_svm_hard = analytics.generate_rows(start, stop, COLS, 8, np.float64, lambda r: 0.3 * (r % 2))
    y_svm = svm.class_of_rows(np.arange(start, stop))
    cases = {
        "rows_local": lambda: len(x_km),
        "kmeans_iris": lambda: kmeans_case(x_iris, comm, 3, 1, "random"),
        "kmeans_synthetic": lambda: kmeans_case(x_km, comm, 4, 2, "random"),
        "kmeans_synthetic_kmeanspp": lambda: kmeans_case(x_km, comm, 4, 2, "kmeans++"),
        "pca_iris_covariance": lambda: pca_case(x_iris, comm, "covariance"),
        "pca_iris_tsqr": lambda: pca_case(x_iris, comm, "tsqr"),
        "pca_synthetic_covariance": lambda: pca_case(x_pca, comm, "covariance"),
        "pca_synthetic_tsqr": lambda: pca_case(x_pca, comm, "tsqr"),
        "svm_iris": lambda: svm_case(x_iris, np.where(species == svm.IRIS_POSITIVE, 1.0, -1.0), comm, True),
        "svm_synthetic_overlapping": lambda: svm_case(x_svm_hard, y_svm, comm),
        "svm_synthetic_separated": lambda: svm_case(x_svm, y_svm, comm),
        "svm_iris_free_intercept": lambda: svm_case(x_iris, np.where(species == svm.IRIS_POSITIVE, 1.0, -1.0), comm,
                                                    intercept="free"),
        "svm_synthetic_overlapping_free_intercept": lambda: svm_case(x_svm_hard, y_svm, comm, intercept="free"),
    }
    seconds = {}
    for name, case in cases.items():
        t = time.perf_counter()
        results[name] = case() if name != "rows_local" else comm.gather(case(), root=0)
        seconds[name] = time.perf_counter() - t
    t = time.perf_counter()
    small = {"size_per_node": f"{rows}rows", "cols": COLS, "repeats": 1, "warmup": 0}
    for name in ("kmeans", "pca", "svm"):
        results[f"run_{name}_iris"] = benchmark_checks(world, comm, name, {"data": "iris", "repeats": 1})
        results[f"run_{name}_synthetic_float32"] = benchmark_checks(world, comm, name, {**small, "dtype": "float32"})
        seconds[f"run_{name}"] = time.perf_counter() - t
        t = time.perf_counter()
    results["seconds"] = seconds  # where the test's time goes (rank 0)
    if world.rank == 0:
        Path(out_path).write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
