"""Communication model: textbook costs exactly, fits that recover known parameters, a real 2-rank
MPI allreduce sweep reproduced within a stated error, and the validation/projection tables."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, requires_mpi
from exabench.perf.alphabeta import (Assumptions, Link, Machine, Workload, allgather_time, allreduce_table,
                                     allreduce_time, cost_terms, fit_link, fit_regimes, hierarchical_allreduce_time,
                                     project, ring_allreduce_time, step_time)
from exabench.errors import ConfigError, ExabenchError
from exabench.records.record import SCHEMA
from exabench.benchmarks import get
from exabench.benchmarks.analytics.kmeans import KMeans
from helpers_png import pixels, shows_data


@pytest.mark.parametrize("n,nbytes,alpha,bw", [(2, 8, 1e-6, 1e9), (4, 1e6, 2e-6, 12.5e9), (7, 3e8, 5e-6, 25e9),
                                               (1024, 102228128, 1e-5, 6.25e9)])
def test_ring_is_the_textbook_cost(n, nbytes, alpha, bw):
    expected = 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bw
    assert ring_allreduce_time(n, nbytes, Link(alpha, bw)) == pytest.approx(expected, rel=1e-15)


def test_ring_by_hand_and_edge_cases():
    # 4 ranks, 1 MB, 1 us, 1 GB/s: 6 us + 1.5 ms.
    assert ring_allreduce_time(4, 1e6, Link(1e-6, 1e9)) == pytest.approx(0.001506, rel=1e-12)
    assert ring_allreduce_time(1, 1e9, Link(1e-6, 1e9)) == 0.0
    with pytest.raises(ExabenchError, match="valid: ring, halving-doubling, tree, hierarchical"):
        allreduce_time("butterfly", 1, 4, 1e6, Link(1e-6, 1e9))


def test_tree_halving_doubling_and_allgather():
    link = Link(2e-6, 1e9)
    assert allreduce_time("tree", 1, 8, 1e6, link) == pytest.approx(2 * 3 * (2e-6 + 1e6 / 1e9))
    assert allreduce_time("halving-doubling", 1, 8, 1e6, link) == pytest.approx(2 * 3 * 2e-6 + 2 * 7 / 8 * 1e6 / 1e9)
    assert allgather_time(4, 1000, link) == pytest.approx(3 * 2e-6 + 3 * 1000 / 1e9)


def test_hierarchical_reduces_to_flat_rings():
    intra, inter = Link(1e-6, 50e9), Link(5e-6, 25e9)
    # One rank per node: a ring between nodes on the inter link.
    assert hierarchical_allreduce_time(16, 1, 1e8, intra, inter) == pytest.approx(ring_allreduce_time(16, 1e8, inter))
    # One node: a reduce-scatter + allgather ring in the node = a ring allreduce on the intra link.
    assert hierarchical_allreduce_time(1, 6, 1e8, intra, inter) == pytest.approx(ring_allreduce_time(6, 1e8, intra))
    # g ranks share the node link: the inter part carries all bytes at the node's bandwidth.
    g, n, s = 6, 32, 1e8
    expected = 2 * (g - 1) * 1e-6 + 2 * (g - 1) / g * s / 50e9 + 2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * s / 25e9
    assert hierarchical_allreduce_time(n, g, s, intra, inter) == pytest.approx(expected)


def sweep_table(alpha, bw, ns=(2, 4, 8), noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    rows = [{"n": n, "bytes": 2 ** e, "time_s": ring_allreduce_time(n, 2 ** e, Link(alpha, bw))
             * math.exp(noise * rng.standard_normal())} for n in ns for e in range(3, 25)]
    return pd.DataFrame(rows)


def test_fit_recovers_known_parameters_exactly_without_noise():
    fit = fit_link(sweep_table(3e-6, 8e9))
    assert fit.link.alpha_s == pytest.approx(3e-6, rel=1e-6)
    assert fit.link.bandwidth_Bps == pytest.approx(8e9, rel=1e-6)
    assert fit.max_rel_error < 1e-6


def test_fit_with_noise_and_regimes():
    fit = fit_link(sweep_table(3e-6, 8e9, noise=0.05))
    assert fit.link.alpha_s == pytest.approx(3e-6, rel=0.1)
    assert fit.link.bandwidth_Bps == pytest.approx(8e9, rel=0.1)
    # Two protocol regimes: a single pair cannot follow both, one pair per regime can.
    small = sweep_table(1e-6, 2e9)
    big = sweep_table(50e-6, 0.5e9)
    both = pd.concat([small[small.bytes < 65536], big[big.bytes >= 65536]])
    lo, hi = fit_regimes(both, 65536)
    assert lo.max_rel_error < 1e-6 and hi.max_rel_error < 1e-6
    assert hi.link.alpha_s == pytest.approx(50e-6, rel=1e-6)
    assert fit_link(both).max_rel_error > 0.2


def test_fit_rejects_a_table_it_cannot_fit():
    with pytest.raises(ExabenchError, match="lacks columns"):
        fit_link(pd.DataFrame({"n": [2], "bytes": [8]}))
    with pytest.raises(ExabenchError, match="at least two message sizes"):
        fit_link(pd.DataFrame({"n": [2, 2], "bytes": [8, 8], "time_s": [1e-6, 1e-6]}))


def allreduce_record(run_id, ranks, times_us: dict[int, float], status="ok"):
    metrics = {f"time.{b}B": {"value": t, "unit": "us", "higher_is_better": False, "precision": "fp32",
                              "stats": {"n": 1}} for b, t in times_us.items()}
    metrics["busbw"] = {"value": 1.0, "unit": "GB/s", "precision": "fp32", "stats": {}}
    return {"schema": SCHEMA, "run_id": run_id, "benchmark": "allreduce", "site": "x", "params": {}, "swept": {},
            "layout": {"nodes": 1, "ranks_per_node": ranks, "threads_per_rank": 1, "ranks": ranks},
            "status": status, "metrics": metrics if status == "ok" else {}}


def test_adapter_reads_per_size_metrics_of_allreduce_records():
    recs = [allreduce_record("a", 2, {8: 2.0, 1024: 3.5}), allreduce_record("b", 4, {8: 4.0}),
            allreduce_record("c", 4, {}, status="failed")]
    t = allreduce_table(recs).sort_values(["n", "bytes"]).reset_index(drop=True)
    assert t[["n", "bytes"]].values.tolist() == [[2, 8], [2, 1024], [4, 8]]
    assert t["time_s"].tolist() == pytest.approx([2e-6, 3.5e-6, 4e-6])


def test_step_time_overlap_and_scaling_formulas():
    w = Workload("w", gradient_bytes=1e8, samples_per_s_per_device=100, batch_per_device=10)
    m = Machine("m", devices_per_node=1, intra=Link(1e-6, 1e10), inter=Link(0.0, 1e9), algorithm="ring")
    comm = ring_allreduce_time(4, 1e8, Link(0.0, 1e9))  # 0.15 s
    st = step_time(w, m, 4, 10, overlap=0.5)
    assert st["compute_s"] == pytest.approx(0.1) and st["comm_s"] == pytest.approx(comm)
    assert st["exposed_comm_s"] == pytest.approx(max(0.5 * comm, comm - 0.1))
    assert step_time(w, m, 4, 10, overlap=1.0)["exposed_comm_s"] == pytest.approx(comm - 0.1)  # compute hides 0.1 s
    weak = project(w, m, [1, 4], Assumptions(overlap=0.0))
    assert weak["efficiency"].tolist() == pytest.approx([1.0, 0.1 / (0.1 + comm)])
    strong = project(w, m, [1, 4], Assumptions(overlap=0.0, mode="strong", global_batch=40))
    t1, t4 = 40 / 100, 10 / 100 + comm
    assert strong["batch_per_device"].tolist() == [40, 10]
    assert strong["efficiency"].iloc[1] == pytest.approx(t1 / (4 * t4))
    with pytest.raises(ExabenchError, match="global_batch"):
        project(w, m, [1], Assumptions(mode="strong"))


def test_cost_terms_match_the_time_functions():
    link = Link(4e-6, 3e9)
    for alg in ("ring", "halving-doubling", "tree"):
        a, b = cost_terms(alg, 16, 1e7)
        assert allreduce_time(alg, 1, 16, 1e7, link) == pytest.approx(a * 4e-6 + b / 3e9)


# --- the reference file, the validation table and the projection ------------------------------------

def test_every_reference_value_is_cited():
    from exabench.perf.reference import Reference
    ref = Reference()
    for section in ("machines", "workloads"):
        for name, entry in ref.data[section].items():
            for key, item in entry.items():
                if isinstance(item, dict):
                    assert item["source"] in ref.sources, f"{section}.{name}.{key}"
    for case in ref.data["cases"]:
        assert case["published_efficiency"]["source"] in ref.sources
        assert case["why_miss"].strip()


def test_validation_table_has_published_projected_gap_and_sources():
    from exabench.perf.reference import Reference
    from exabench.perf.validation import validation_table
    ref = Reference()
    t = validation_table(ref)
    assert len(t) == len(ref.data["cases"]) >= 6
    assert set(t["case"]) >= {"goyal2017_resnet50_256gpu", "mikami2018_resnet50_2176gpu",
                              "mlperfhpc07_cosmoflow_summit", "stampede2_caffe_512knl"}
    assert (t["gap_pp"] == 100 * (t["projected"] - t["published"])).all()
    assert ((t["projected_no_overlap"] <= t["projected"]) & (t["projected"] <= t["projected_full_overlap"])).all()
    misses = t[t["verdict"] != "match"]
    assert (misses["gap_pp"].abs() > ref.data["tolerance_pp"]).all() and (misses["why"].str.len() > 20).all()
    assert t["sources"].str.len().gt(0).all()


def test_reference_with_an_unknown_source_is_rejected(tmp_path):
    from exabench.perf.reference import Reference
    from exabench.perf.validation import validation_table
    data = yaml.safe_load((REPO / "results/reference/published_scaling.yaml").read_text())
    data["machines"]["summit"]["inter_bandwidth_GBps"]["source"] = "nowhere"
    path = tmp_path / "ref.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"machines.summit.inter_bandwidth_GBps.source' = 'nowhere'"):
        validation_table(Reference(path))


def test_projection_reaches_whole_machines_and_is_labelled(tmp_path):
    from exabench.perf.projection import write_projection
    text = write_projection(REPO / "results/reference/published_scaling.yaml", tmp_path / "p.csv",
                            tmp_path / "p.md", tmp_path / "p.png")
    table = pd.read_csv(tmp_path / "p.csv")
    assert (table["status"] == "PROJECTED").all()
    assert table.groupby("machine")["nodes"].max().to_dict() == {"frontier": 9472, "summit": 4608}
    assert text.count("(PROJECTED)") == table.groupby(["workload", "machine", "mode"]).ngroups
    assert "overlap: 50%" in text and shows_data(pixels(tmp_path / "p.png"))


# --- a real allreduce sweep on this machine ---------------------------------------------------------

def run_sweep(tmp_path, max_bytes: int) -> pd.DataFrame:
    out = tmp_path / "sweep.csv"
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
           "--mca", "btl", "self,vader,tcp", "-np", "2", sys.executable, str(REPO / "scripts/allreduce_sweep.py"),
           "--out", str(out), "--max-bytes", str(max_bytes), "--repeats", "7"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True)
    try:
        log, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, log
    return pd.read_csv(out)


@requires_mpi
@pytest.mark.timeout(300)
def test_fitted_link_reproduces_a_measured_two_rank_sweep(tmp_path):
    """Stated error: on this shared 2-core machine, the small-message regime (8 B .. 32 KiB) fitted on
    the least-disturbed batch of each size reproduces the measured times with a median relative error
    below 35%. Larger messages change protocol and are dominated by time slices of other jobs."""
    sweep = run_sweep(tmp_path, 32768)
    assert sweep["n"].eq(2).all() and len(sweep) == 13
    fit = fit_link(sweep.assign(time_s=sweep["time_min_s"]))
    print("\n" + fit.summary())
    assert 0 < fit.link.alpha_s < 1e-3 and fit.link.bandwidth_Bps > 1e7
    assert fit.median_rel_error < 0.35, fit.table.to_string()


# Rows carry their workload's communication fact, as the tidy table of real records does.
def kmeans_rows(run_id, ranks, time_s, comm_s, compute_s=None, nodes=1):
    params = json.dumps({"k": 3, "cols": 250, "maxiter": 2, "init": "kmeans++", "dtype": "float64"}, sort_keys=True)
    base = {"run_id": run_id, "benchmark": "kmeans", "status": "ok", "nodes": nodes, "ranks_per_node": ranks // nodes,
            "threads_per_rank": 1, "ranks": ranks, "params": params,
            "communication": json.dumps(KMeans.communication)}
    return [{**base, "metric": "time", "value": time_s}, {**base, "metric": "comm_time", "value": comm_s},
            {**base, "metric": "compute_time", "value": time_s - comm_s if compute_s is None else compute_s}]


def resnet_rows(run_id, nodes, rpn, threads, step_s):
    params = json.dumps({"image_size": 64, "batch_size": 4, "precision": "fp32"}, sort_keys=True)
    return [{"run_id": run_id, "benchmark": "resnet50", "status": "ok", "nodes": nodes, "ranks_per_node": rpn,
             "threads_per_rank": threads, "ranks": nodes * rpn, "params": params, "metric": "step_time",
             "value": step_s, "communication": json.dumps(get("resnet50").communication)}]


def test_local_check_adds_the_collectives_to_the_one_rank_time():
    from exabench.perf.local_check import kmeans_collectives, scaling_check
    params = {"k": 3, "cols": 250, "maxiter": 2, "init": "kmeans++", "dtype": "float64"}
    coll = kmeans_collectives(params)
    # k-means++ with k = 3: 3 row picks (2 allgathers each), 2 candidate allreduces, 2 Lloyd allreduces.
    assert [kind for kind, _ in coll].count("allgather") == 6 and [kind for kind, _ in coll].count("allreduce") == 4
    assert coll[-1] == ("allreduce", 3 * 252 * 8)
    link = Link(1e-6, 1e9)
    links = {("mpi", "intra_node", "small"): (link, "fitted (test)")}
    df = pd.DataFrame(kmeans_rows("one", 1, 0.10, 0.0) + kmeans_rows("two", 2, 0.15, 0.04, compute_s=0.12))
    check = scaling_check(df, links, usable_cores=2).iloc[0]
    comm = sum(allreduce_time("ring", 1, 2, b, link) if k == "allreduce" else allgather_time(2, b, link)
               for k, b in coll)
    # size_per_node is split over the node's 2 ranks: half the work each.
    assert check["work_per_rank"] == 0.5 and check["projected_s"] == pytest.approx(0.05 + comm)
    assert check["gap"] == pytest.approx(0.15 / (0.05 + comm) - 1)
    assert check["measured_comm_s"] == 0.04 and check["compute_vs_model"] == pytest.approx(0.12 / 0.05)
    assert "2.40x what the model expects" in check["why"]
    # Two nodes, one rank each, weak scaling: each node adds size_per_node, the work per rank stays.
    df2 = pd.DataFrame(kmeans_rows("one", 1, 0.10, 0.0) + kmeans_rows("n2", 2, 0.12, 0.01, nodes=2))
    inter = {("mpi", "inter_node", "small"): (Link(5e-6, 1e8), "fitted (test)")}
    check2 = scaling_check(df2, inter, usable_cores=2).iloc[0]
    assert check2["work_per_rank"] == 1 and check2["layout"] == "n2r1t1"
    assert check2["projected_s"] == pytest.approx(0.10 + sum(
        allreduce_time("ring", 1, 2, b, Link(5e-6, 1e8)) if k == "allreduce" else allgather_time(2, b, Link(5e-6, 1e8))
        for k, b in coll))
    with pytest.raises(ExabenchError, match="1-rank twin"):
        scaling_check(pd.DataFrame(kmeans_rows("two", 2, 0.15, 0.04)), links, usable_cores=2)


def test_local_check_of_ddp_steps_uses_buckets_levels_and_core_sharing():
    from exabench.perf.local_check import DDP_BUCKET_BYTES, core_share_factor, ddp_buckets, scaling_check
    params = 25_557_032
    assert ddp_buckets(params * 4) == [params * 4 / 4] * 4 and max(ddp_buckets(params * 4)) <= DDP_BUCKET_BYTES
    intra, inter = Link(300e-6, 1.5e9), Link(500e-6, 0.5e9)
    links = {("gloo", "intra_node", "large"): (intra, "fitted"), ("gloo", "inter_node", "large"): (inter, "site")}
    df = pd.DataFrame(resnet_rows("r1", 1, 1, 1, 0.4) + resnet_rows("r2", 1, 2, 1, 0.6)
                      + resnet_rows("n2", 2, 1, 1, 0.7) + resnet_rows("r1t2", 1, 1, 2, 0.25)
                      + resnet_rows("r2t2", 1, 2, 2, 0.6))
    info = {r: {"parameters": params, "load_average": [1.5, 1, 1]} for r in ("r2", "n2", "r2t2")}
    check = scaling_check(df, links, usable_cores=2, info=info).set_index("run_id")
    ring = lambda link: sum(allreduce_time("ring", 1, 2, b, link) for b in ddp_buckets(params * 4))  # noqa: E731
    assert check.loc["r2", "projected_s"] == pytest.approx(0.4 + ring(intra))
    assert check.loc["n2", "projected_s"] == pytest.approx(0.4 + ring(inter))
    assert check.loc["n2", "link_origin"] == "site"
    # 2 ranks x 2 threads on 2 cores: compute per rank twice as long as alone.
    assert core_share_factor(2, 2, 2) == 2 and check.loc["r2t2", "core_share_factor"] == 2
    assert check.loc["r2t2", "projected_s"] == pytest.approx(0.25 * 2 + ring(intra))
    assert check.loc["r2", "load_1m"] == 1.5 and "DDP step" in check.loc["r2", "why"]
    # A level with no parameters: no projection, and the row says why.
    check = scaling_check(df, {("gloo", "intra_node", "large"): (intra, "fitted")}, 2, info).set_index("run_id")
    assert np.isnan(check.loc["n2", "projected_s"]) and "no gloo inter_node large" in check.loc["n2", "why"]
    # A DDP record without its parameter count: no projection, said, and the other runs still checked.
    check = scaling_check(df, links, 2, {**info, "r2": {"load_average": [1, 1, 1]}}).set_index("run_id")
    assert np.isnan(check.loc["r2", "projected_s"]) and "parameters" in check.loc["r2", "why"]
    assert not np.isnan(check.loc["n2", "projected_s"])


@pytest.mark.timeout(300)
def test_pipeline_targets_write_validation_and_projection(tmp_path):
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--profile",
           str(REPO / "profiles" / "local"), "--config", f"site={REPO}/profiles/local/site.yaml",
           "--configfile", str(REPO / "config" / "config.yaml"), "--cores", "1", "perf_validation",
           "perf_projection"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    text = (tmp_path / "results/perf/validation.md").read_text()
    assert "goyal2017_resnet50_256gpu" in text and "## Where the model misses, and why" in text
    assert "`goyal2017`: P. Goyal" in text  # sources are written out in full
    assert shows_data(pixels(tmp_path / "results/perf/projection.png"))
    assert not (tmp_path / "results/local/records").exists()  # no benchmark ran
