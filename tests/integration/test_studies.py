"""The study catalogue (docs/studies.md): every study file validates, every published value names its
source (a document and a place in it), every campaign plans on its site, the table's verdicts follow
the rules, and every study's tiny variant runs through Snakemake in one campaign and writes its table."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from exabench.analysis import seed_inventory, studies
from exabench.campaign import studies as catalogue
from exabench.campaign.site import load_site
from exabench.config import load_and_validate
from exabench.errors import ConfigError
from helpers_compare import REPO, env
from helpers_png import drawn_in, pixels, shows_data

CATALOGUE = catalogue.load_catalogue()
BASE = load_and_validate(REPO / "config" / "config.yaml", "config")
# The studies issue 17 names, at least.
NAMED = [
    "coral2-bdas-speedup",
    "coral2-bdas-perf-model",
    "coral2-dl-speedup",
    "resnet50-summit-strong-scaling",
    "keras-horovod-resnet50",
    "bnl-horovod-scaling",
    "stampede2-thread-sweep",
    "stampede2-knl-gpu-comparison",
    "stampede2-strong-scaling",
    "stampede2-weak-scaling",
    "stampede2-framework-slowdown",
    "mlperf-hpc-cosmoflow-scaling",
    "mlperf-hpc-deepcam-scaling",
    "deeplabv3-climate-summit",
    "caffe-cori-knl-scale",
    "coral2-dl-perf-model",
]
PLACE_WORDS = ("abstract", "table", "figure", "slide", "section", "bullet", "deliver", "line")


def test_the_catalogue_holds_the_named_studies():
    assert set(NAMED) <= set(CATALOGUE)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_published_value_names_a_document_and_a_place(name):
    study = CATALOGUE[name]
    for fig in study.figures:
        src = fig["source"]
        assert src["document"].strip() and src["place"].strip(), fig["id"]
        assert any(w in src["place"].lower() for w in PLACE_WORDS), (fig["id"], src["place"])
        if fig["value"] is not None:
            assert "tolerance" in fig and fig.get("tolerance_why"), fig["id"]


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_published_figure_is_on_its_cited_seed_line_or_in_a_cited_table(name):
    """Provenance a reviewer can check: a figure citing a seed line has its number on that line (72 for
    0.72 as 72%, 1,024 for 1024); one citing a public document names the table, figure or abstract and its
    address; any other published value is marked unverified (shown, never judged)."""
    for fig in CATALOGUE[name].figures:
        src = fig["source"]
        assert ("seed" in src) == ("line" in src), fig["id"]
        if "seed" in src:
            line = seed_inventory.seed_line(src["seed"], src["line"])
            if fig["value"] is not None:
                assert seed_inventory.prints(line, fig["value"]), (fig["id"], fig["value"], src["line"], line[:300])
        elif fig["value"] is not None and fig["verified"]:
            assert "url" in src, fig["id"]
            assert any(w in src["place"].lower() for w in ("table", "figure", "abstract")), (fig["id"], src["place"])


def test_the_number_check_accepts_formats_and_refuses_other_numbers():
    assert seed_inventory.prints("Summit: 170 nodes (x6 v100s), -- 72% scaling eff", 0.72)
    assert seed_inventory.prints("Cori: 1,024 KNL nodes", 1024)
    assert seed_inventory.prints("we were able to obtain two teraflops", 2.0)
    assert seed_inventory.prints("you can hit 1.13 exaflops", 1130.0)
    assert seed_inventory.prints("| 1.9 | 2.1 |", 2.1)
    assert not seed_inventory.prints("Summit: 170 nodes (x6 v100s), -- 72% scaling eff", 0.78)
    assert not seed_inventory.prints("| 1.9 | 2.1 |", 2.2)


def test_the_inventory_lists_every_seed_result_on_its_line_and_carries_it_in_the_catalogue():
    """Every result's printed text is on its seed line, its value is that text's number, and every
    `carried_by` names a figure of the catalogue with the same value (or none where the text has none)."""
    inventory = seed_inventory.load_inventory()
    for e in inventory:
        if e["printed"] is not None:
            line = seed_inventory.seed_line(e["seed"], e["line"])
            assert e["printed"] in line, (e["id"], e["printed"], line[:200])
            if e["value"] is not None:
                assert seed_inventory.prints(e["printed"], e["value"]), (e["id"], e["printed"], e["value"])
        if e["carried_by"]:
            fig = seed_inventory.figure_of(e, CATALOGUE)
            assert fig is not None, (e["id"], e["carried_by"])
            if e["value"] is not None and fig["value"] is not None:
                assert seed_inventory.prints(e["printed"], fig["value"]), (e["id"], e["printed"], fig["value"])
    # What the seeds print and the catalogue once lacked: the BDAS table's 37 walltimes (SVM included),
    # the DL table's NCCL 0.33 s and MPI 0.46 s, ~35x and ~80x over Titan, Stampede2's KNL-over-GPU
    # ratios and slowdown table, DeepCAM's PF/s on Cori, Theta and Summit, CosmoFlow at 170 Summit nodes.
    by_id = {e["id"]: e for e in inventory}
    walltimes = [e for e in inventory if e["id"].startswith("s000-bdas-") and e["unit"] == "s"]
    assert len(walltimes) == 37 and all(e["carried_by"] for e in walltimes)
    assert {e["workload"] for e in walltimes} == {"pca", "kmeans", "svm"}
    model = CATALOGUE["coral2-bdas-perf-model"]
    assert sum(f["unit"] == "s" and f["value"] is not None for f in model.figures) == 37
    assert by_id["s000-dl-summit-comm-nccl-fp16"]["value"] == 0.33
    assert by_id["s000-dl-summit-comm-mpi-fp16"]["value"] == 0.46
    for key in ("s000-ml-per-node-over-titan", "s000-dl-per-node-over-titan", "s003-knl-over-k40",
                "s003-tensorflow-p100-slowdown-high", "s004-deepcam-summit-sustained-pflops"):
        assert seed_inventory.figure_of(by_id[key], CATALOGUE) is not None, key
    summit = seed_inventory.figure_of(by_id["s004-cosmoflow-summit-efficiency"], CATALOGUE)
    assert summit["reproduce"]["at"]["nodes"] == 170 and "170" in summit["layout"]
    # Every result exabench cannot run says why.
    assert all(e["runs"] or e.get("not_runnable") for e in inventory)


def test_the_inventory_counts():
    counts = seed_inventory.counts(seed_inventory.load_inventory(), CATALOGUE)
    print("inventory counts:", counts)  # docs/studies.md quotes them
    assert counts["results"] == counts["printed"] + counts["plots_without_numbers"]
    assert counts["judged"] <= counts["in_catalogue"] <= counts["results"]
    assert counts["runnable"] <= counts["results"]


def test_a_bad_inventory_names_file_and_key(tmp_path):
    data = yaml.safe_load(seed_inventory.INVENTORY.read_text())
    data["results"][0].pop("runs")
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        seed_inventory.load_inventory(path)
    assert str(path) in str(err.value) and "runs" in str(err.value)


def _site_of(variant: str) -> str:
    return {"tiny": "local", "default": "perlmutter"}.get(variant, variant)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_campaign_plans_on_its_site(name):
    study = CATALOGUE[name]
    for variant in study.data["campaigns"]:
        site = load_site(REPO / "profiles" / _site_of(variant) / "site.yaml")
        assert catalogue.variant_of(study, site.name) == variant
        runs = catalogue.plan_studies([study], BASE, site)[name]
        assert runs and all(r.campaign == f"study-{name}" for r in runs)
        if variant != "tiny":
            assert all(r.preset == "full" for r in runs), variant


def test_shared_tiny_runs_are_planned_once():
    plans = catalogue.plan_studies(list(CATALOGUE.values()), BASE, load_site(REPO / "profiles/local/site.yaml"))
    merged = catalogue.merged_runs(plans, "studies")
    assert len({r.run_id for r in merged}) == len(merged) < sum(len(v) for v in plans.values())


# -- bad input names the file and the key ----------------------------------------------------------


def _write(tmp_path, data: dict, name: str = "my-study") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _good() -> dict:
    return yaml.safe_load((REPO / "studies" / "stampede2-strong-scaling.yaml").read_text()) | {"name": "my-study"}


@pytest.mark.parametrize(
    "spoil, key",
    [
        (lambda d: d["published"][0]["source"].pop("place"), "published[0].source.place"),
        (lambda d: d["published"][0].pop("tolerance"), "published[0].tolerance"),
        (lambda d: d["campaigns"].pop("tiny"), "campaigns.tiny"),
        (lambda d: d["published"][0]["reproduce"].update(kind="guess"), "published[0].reproduce.kind"),
        (lambda d: d.update(name="other-name"), "name"),
        # A tiny variant runs the study's own benchmark, not another model in its place.
        (lambda d: d["campaigns"]["tiny"].update(benchmarks=[{"name": "resnet50"}]), "campaigns.tiny.benchmarks"),
    ],
)
def test_a_bad_study_names_file_and_key(tmp_path, spoil, key):
    data = _good()
    spoil(data)
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        catalogue.load_study(path)
    assert str(path) in str(err.value) and f"'{key}'" in str(err.value)


def test_an_unknown_study_lists_the_catalogue():
    with pytest.raises(ConfigError) as err:
        catalogue.select(CATALOGUE, "no-such-study")
    assert "no-such-study" in str(err.value) and "stampede2-strong-scaling" in str(err.value)


def test_a_study_without_a_campaign_for_the_site_says_so():
    with pytest.raises(ConfigError) as err:
        catalogue.variant_of(CATALOGUE["deeplabv3-climate-summit"], "frontier")
    assert "frontier" in str(err.value) and "deeplabv3-climate-summit" in str(err.value)


# -- the table's arithmetic and verdicts ------------------------------------------------------------


def _record(run_id, nodes, value, benchmark="resnet50", params=None, metric="throughput"):
    return {
        "run_id": run_id,
        "benchmark": benchmark,
        "status": "ok",
        "params": params or {},
        "layout": {"nodes": nodes, "ranks_per_node": 1, "threads_per_rank": 64, "gpus_per_rank": 0, "ranks": nodes},
        "workload": {"headline": "throughput", "scaling": (params or {}).get("scaling", "weak")},
        "metrics": {metric: {"value": value, "unit": "images/s", "higher_is_better": True}},
    }


STRONG = CATALOGUE["stampede2-strong-scaling"]
CONVNET = "convnet_cifar10"  # the strong-scaling study's first figure: ConvNet at 4 KNLs


def test_efficiency_within_and_outside_tolerance_on_the_published_machine():
    strong = {"scaling": "strong"}
    # Strong scaling of a throughput: efficiency = (X4 / 4) / (X1 / 1).
    near = [_record("a1", 1, 100.0, CONVNET, strong), _record("a4", 4, 220.0, CONVNET, strong)]
    row = studies.study_table(STRONG, near, "stampede2", "stampede2").iloc[0]
    assert row["reproduced"] == pytest.approx(0.55) and row["verdict"] == studies.WITHIN
    assert row["ratio"] == pytest.approx(1.1) and "4 workers" in row["reproduced_at"]
    assert "±10 points" in row["tolerance_why"]
    far = [_record("a1", 1, 100.0, CONVNET, strong), _record("a4", 4, 100.0, CONVNET, strong)]
    assert studies.study_table(STRONG, far, "stampede2", "stampede2").iloc[0]["verdict"] == studies.OUTSIDE


def test_the_study_picture_shows_each_reproduced_figure_against_its_tolerance_band(tmp_path):
    # On the published machine: ConvNet's efficiency within its band, CaffeNet's outside, the two
    # figures not measured left out and counted; the tiny variant's table draws nothing and says why.
    from exabench.analysis.figures import NothingToDraw
    from exabench.analysis.study_picture import plot_study, study_points, write_study_picture
    strong = {"scaling": "strong"}
    recs = [_record("a1", 1, 100.0, CONVNET, strong), _record("a4", 4, 220.0, CONVNET, strong),
            _record("c1", 1, 100.0, "caffenet", strong), _record("c4", 4, 100.0, "caffenet", strong)]
    df = studies.study_table(STRONG, recs, "stampede2", "stampede2")
    points = study_points(df)
    assert [(p["figure"], p["verdict"]) for p in points] == [
        ("strong-efficiency-4-knl-convnet", studies.WITHIN), ("strong-efficiency-4-knl-caffenet", studies.OUTSIDE)]
    assert points[0]["ratio"] == pytest.approx(1.1) and points[0]["band"] == pytest.approx((0.8, 1.2))  # ±0.1 of 0.5
    assert points[1]["ratio"] == pytest.approx(0.5)
    # The workflow's path: the table's CSV read back, the picture beside its index.
    csv = tmp_path / "study-stampede2-strong-scaling.csv"
    df.to_csv(csv, index=False)
    assert "study picture ->" in write_study_picture(csv, tmp_path / "plots" / "study-stampede2-strong-scaling.json")
    img = pixels(tmp_path / "plots" / "study-stampede2-strong-scaling.png")
    assert shows_data(img) and len(drawn_in(img, "C2")) > 20 and len(drawn_in(img, "C3")) > 20  # within, outside
    tiny = studies.study_table(STRONG, recs, "local", "tiny")
    with pytest.raises(NothingToDraw, match="tiny variant's runs are laptop scale"):
        plot_study(tiny, tmp_path / "tiny.png")
    tiny.to_csv(csv, index=False)
    write_study_picture(csv, tmp_path / "plots" / "study-stampede2-strong-scaling.json")
    [entry] = json.loads((tmp_path / "plots" / "study-stampede2-strong-scaling.json").read_text())
    assert entry["file"] is None and not (tmp_path / "plots" / "study-stampede2-strong-scaling.png").exists()


def test_another_machine_is_shown_and_never_judged():
    strong = {"scaling": "strong"}
    recs = [_record("a1", 1, 100.0, CONVNET, strong), _record("a4", 4, 200.0, CONVNET, strong)]
    row = studies.study_table(STRONG, recs, "perlmutter", "default").iloc[0]
    # The value and its ratio are shown; the verdict says why there is none.
    assert row["verdict"] == studies.DIFFERENT_MACHINE and row["ratio"] == pytest.approx(1.0)
    assert "published on stampede2" in row["detail"]
    caffe = CATALOGUE["caffe-cori-knl-scale"]
    recs = [_record("c1", 1, 2.0, benchmark="caffenet", metric="achieved_flops")]
    df = studies.study_table(caffe, recs, "perlmutter", "default").set_index("figure")
    assert df.loc["single-node-tflops", "verdict"] == studies.DIFFERENT_MACHINE
    df = studies.study_table(caffe, recs, "cori-knl", "cori-knl").set_index("figure")
    assert df.loc["single-node-tflops", "verdict"] == studies.WITHIN
    assert df.loc["peak-pflops-9600", "verdict"] == studies.NOT_MEASURED
    assert "9600" in df.loc["peak-pflops-9600", "detail"]
    # A peak rate is the fastest step's (the samples' max), a sustained one the run's own figure.
    big = _record("c9600", 9600, 13000.0, benchmark="caffenet", metric="achieved_flops")
    big["metrics"]["achieved_flops"]["stats"] = {"max": 15000.0}
    df = studies.study_table(caffe, [big], "cori-knl", "cori-knl").set_index("figure")
    assert df.loc["peak-pflops-9600", "reproduced"] == pytest.approx(15.0)
    assert df.loc["sustained-pflops-9600", "reproduced"] == pytest.approx(13.0)
    assert df.loc["peak-pflops-9600", "verdict"] == df.loc["sustained-pflops-9600", "verdict"] == studies.WITHIN


def test_unverified_and_not_judged_figures_are_shown_never_judged():
    unverified = {**STRONG.figures[0], "verified": False}
    study = catalogue.Study("s", "studies/s.yaml", {**STRONG.data, "published": [unverified]})
    recs = [_record("a1", 1, 100.0, CONVNET, {"scaling": "strong"}), _record("a4", 4, 200.0, CONVNET, {"scaling": "strong"})]
    row = studies.study_table(study, recs, "stampede2", "stampede2").iloc[0]
    assert row["verdict"] == studies.UNVERIFIED and row["reproduced"] == pytest.approx(0.5)
    slowdown = CATALOGUE["stampede2-framework-slowdown"]
    rec = _record("t", 1, 50.0, benchmark="convnet_cifar10-keras")
    df = studies.study_table(slowdown, [rec], "stampede2", "stampede2").set_index("figure")
    assert set(df["verdict"]) == {studies.NOT_JUDGED}
    assert "no MXNet" in df.loc["mxnet-k40-slowdown-low", "detail"]
    assert "two machines" in df.loc["tensorflow-p100-slowdown-high", "detail"]


def test_tiny_and_missing_values_are_labelled():
    strong = {"scaling": "strong"}
    recs = [_record("a1", 1, 100.0, CONVNET, strong), _record("a2", 2, 150.0, CONVNET, strong)]
    row = studies.study_table(STRONG, recs, "local", "tiny").iloc[0]
    # nodes=4 was not run by the tiny variant: ignored, and the point says so.
    assert row["verdict"] == studies.TINY and row["reproduced"] == pytest.approx(0.75)
    assert "tiny: nodes=4 not run" in row["reproduced_at"] and math.isnan(row["ratio"])
    bnl = CATALOGUE["bnl-horovod-scaling"]
    recs = [_record("x1", 1, 10.0, "alexnet", {"backend": "horovod"}), _record("x2", 2, 19.0, "alexnet", {"backend": "horovod"})]
    row = studies.study_table(bnl, recs, "bnl-k80", "default").set_index("figure").loc["alexnet-k80-efficiency"]
    assert row["verdict"] == studies.NO_VALUE and row["reproduced"] == pytest.approx(0.95)


def _bdas(run_id, value, size, ranks, threads, smt, metric="time", nodes=1, benchmark="kmeans"):
    rec = _record(run_id, nodes, value, benchmark=benchmark, params={"size_per_node": size}, metric=metric)
    rec["layout"].update(ranks_per_node=ranks, threads_per_rank=threads, smt=smt, ranks=ranks * nodes)
    return rec


def test_the_bdas_table_judges_walltimes_and_speedups_at_their_layouts():
    model = CATALOGUE["coral2-bdas-perf-model"]
    # Summit, K-Means 8 GB: SMT1 (42 x 1) published 3.1 s, SMT2 (42 x 2) 3 s.
    recs = [_bdas("k1", 3.0, "8GB", 42, 1, 1), _bdas("k2", 4.5, "8GB", 42, 2, 2)]
    df = studies.study_table(model, recs, "summit", "summit").set_index("figure")
    assert df.loc["summit-kmeans-8gb-smt1", "verdict"] == studies.WITHIN
    assert df.loc["summit-kmeans-8gb-smt1", "reproduced"] == 3.0
    assert df.loc["summit-kmeans-8gb-smt2", "verdict"] == studies.OUTSIDE
    # A speedup on Summit: Summit-Dev's published 4.7 s (SMT1) over the 3.0 s measured here.
    sp = df.loc["speedup-kmeans-8gb-sd-smt1-over-summit-smt1"]
    assert sp["reproduced"] == pytest.approx(4.7 / 3.0) and sp["verdict"] == studies.WITHIN
    # The Summit-Dev cells are not judged on Summit; a layout exabench cannot run (80 ranks on 20 cores) never.
    assert df.loc["summitdev-kmeans-8gb-smt1", "verdict"] == studies.DIFFERENT_MACHINE
    df = studies.study_table(model, [_bdas("d", 35.0, "64GB", 20, 4, 4)], "summitdev", "summitdev").set_index("figure")
    assert df.loc["summitdev-kmeans-64gb-smt4", "verdict"] == studies.NOT_JUDGED
    assert "80 ranks on 20 cores" in df.loc["summitdev-kmeans-64gb-smt4", "detail"]


def test_speedup_over_a_published_figure():
    bdas = CATALOGUE["coral2-bdas-speedup"]
    rec = _record("k", 128, 3.6 / 36, benchmark="kmeans", params={"size_per_node": "8GB"}, metric="fom")
    df = studies.study_table(bdas, [rec], "summit", "summit").set_index("figure")
    # One 128-node job's FOM times the 36 such jobs Summit holds, over Titan's projected 1.8 TB/s.
    assert df.loc["speedup-kmeans", "reproduced"] == pytest.approx(2.0)
    assert df.loc["titan-fom-kmeans", "verdict"] == studies.DIFFERENT_MACHINE
    titan = _record("t", 128, 1.8 / 146, benchmark="kmeans", params={"size_per_node": "8GB"}, metric="fom")
    df = studies.study_table(bdas, [titan], "titan", "titan").set_index("figure")
    assert df.loc["titan-fom-kmeans", "verdict"] == studies.WITHIN  # 146 jobs x one job's FOM


def test_another_models_runs_reproduce_nothing():
    cosmoflow = CATALOGUE["mlperf-hpc-cosmoflow-scaling"]
    resnet = [_record("r1", 1, 10.0), _record("r2", 2, 18.0)]
    for site, variant in (("local", "tiny"), ("cori-knl", "cori-knl")):
        row = studies.study_table(cosmoflow, resnet, site, variant).iloc[0]
        assert math.isnan(row["reproduced"]) and "no ok run of cosmoflow" in row["detail"]
    own = [_record("c1", 1, 10.0, benchmark="cosmoflow"), _record("c2", 2, 18.0, benchmark="cosmoflow")]
    row = studies.study_table(cosmoflow, own, "local", "tiny").iloc[0]
    assert row["reproduced"] == pytest.approx(0.9) and row["verdict"] == studies.TINY


# -- every tiny variant, through Snakemake, in one campaign ---------------------------------------


# Studies whose first figure is a scaling efficiency of a workload only they run.
EFFICIENCY_FIRST = (
    "mlperf-hpc-cosmoflow-scaling",
    "mlperf-hpc-deepcam-scaling",
    "deeplabv3-climate-summit",
    "keras-horovod-resnet50",
)


HOROVOD = importlib.util.find_spec("horovod") is not None
LOCAL = load_site(REPO / "profiles/local/site.yaml")


def _needs_horovod(name: str) -> bool:
    return bool(catalogue.horovod_runs(catalogue.plan_studies([CATALOGUE[name]], BASE, LOCAL)))


def _copy_workflow(dest: Path) -> Path:
    for name in ("Snakefile", "workflow", "profiles", "config", "studies"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, dest / name)
        else:
            shutil.copy2(REPO / name, dest / name)
    return dest


def test_studies_over_horovod_say_what_to_set_up_before_the_campaign_starts(tmp_path):
    """`make setup` does not build Horovod: a study that trains over it stops at once, naming
    `make setup-horovod`, where Horovod is missing; it plans where Horovod imports."""
    assert {n for n in CATALOGUE if _needs_horovod(n)} == {"bnl-horovod-scaling", "keras-horovod-resnet50"}
    work = _copy_workflow(tmp_path)
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/local", "-n", "study", "--config",
           "study=bnl-horovod-scaling"]
    res = subprocess.run(cmd, cwd=work, env=env(), capture_output=True, text=True, timeout=300)
    if HOROVOD:
        assert res.returncode == 0, res.stderr[-2000:]
    else:
        assert res.returncode != 0 and "needs `make setup-horovod`" in res.stderr, res.stderr[-2000:]
        assert "Traceback" not in res.stderr and "bnl-horovod-scaling" in res.stderr


# The Stampede2 scaling studies and the KNL/GPU comparison repeat the networks the thread sweep and
# the other studies already run, at 1 and 2 ranks: 15 of the 42 tiny runs (about 7 minutes on 2 cores,
# docs/studies.md). `make test` leaves them out; `make test-full` (EXABENCH_ALL_STUDIES=1) runs them.
REPEATED_NETWORK_STUDIES = ("stampede2-strong-scaling", "stampede2-weak-scaling", "stampede2-knl-gpu-comparison")
ALL_STUDIES = os.environ.get("EXABENCH_ALL_STUDIES") == "1"


def test_the_studies_left_out_by_default_run_no_benchmark_the_others_do_not():
    """What `make test` leaves out only repeats networks at other rank counts: every benchmark of the
    catalogue still runs in the default campaign."""
    kept = [CATALOGUE[n] for n in CATALOGUE if n not in REPEATED_NETWORK_STUDIES]
    dropped = [CATALOGUE[n] for n in REPEATED_NETWORK_STUDIES]
    runs = lambda chosen: {r.benchmark for v in catalogue.plan_studies(chosen, BASE, LOCAL).values() for r in v}
    assert runs(dropped) <= runs(kept), runs(dropped) - runs(kept)


@pytest.mark.timeout(2400)  # up to 42 tiny runs: about 20 min on 2 busy cores (docs/studies.md)
def test_every_tiny_variant_runs_through_snakemake(tmp_path):
    # Without Horovod (`make setup-horovod`) the studies over it are left out: the test above covers them.
    names = [n for n in CATALOGUE if (HOROVOD or not _needs_horovod(n))
             and (ALL_STUDIES or n not in REPEATED_NETWORK_STUDIES)]
    work = _copy_workflow(tmp_path)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        "profiles/local",
        "--cores",
        "2",
        "study",
        "--config",
        "study=" + ("all" if len(names) == len(CATALOGUE) else ",".join(names)),
        "results_store=none",
    ]
    res = subprocess.run(cmd, cwd=work, env=env(), capture_output=True, text=True, timeout=2380)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    tables = work / "results" / "local" / "tables"
    for name in names:
        study = CATALOGUE[name]
        md = (tables / f"study-{name}.md").read_text()
        assert "tiny, not comparable" in md and study.data["title"] in md
        df = pd.read_csv(tables / f"study-{name}.csv")
        assert list(df["figure"]) == [f["id"] for f in study.figures]
        assert set(df["verdict"]) == {studies.TINY}
        # The study's code path ran: at least one figure is reproduced from its own tiny runs.
        assert df["reproduced"].notna().any(), (name, df[["figure", "detail"]].to_string())
    # CosmoFlow, DeepCAM (trained to their MLPerf targets) and the Keras ResNet-50 over Horovod: the
    # efficiency of their own 2-rank run against their own 1-rank run.
    for name in EFFICIENCY_FIRST:
        if name not in names:
            continue
        row = pd.read_csv(tables / f"study-{name}.csv").iloc[0]
        assert row["reproduced"] > 0 and row["reproduced_at"].endswith("vs 1 workers"), (name, row.to_dict())
    if HOROVOD:
        # BNL: AlexNet, GoogLeNet and ResNet-50 over Horovod each give their efficiency (K80 and P100 rows).
        bnl = pd.read_csv(tables / "study-bnl-horovod-scaling.csv")
        assert bnl["reproduced"].notna().all() and (bnl["reproduced"] > 0).all(), bnl[["figure", "detail"]].to_string()


def test_all_on_a_site_is_every_study_with_a_campaign_there():
    on_stampede2 = {s.name for s in catalogue.select(CATALOGUE, "all", site="stampede2")}
    assert {n for n in NAMED if n.startswith("stampede2-")} <= on_stampede2
    assert "deeplabv3-climate-summit" not in on_stampede2
    assert {s.name for s in catalogue.select(CATALOGUE, "all", site="local")} == set(CATALOGUE)


def test_two_studies_planning_different_runs_under_one_id_are_refused():
    local = load_site(REPO / "profiles/local/site.yaml")
    one = CATALOGUE["coral2-dl-speedup"]
    other = catalogue.Study("other", "studies/other.yaml", {**one.data, "name": "other"})
    other.data["campaigns"] = {
        "tiny": {"benchmarks": [{"name": "resnet50", "params": {"steps": 3}, "sweep": {"ranks_per_node": [1, 2]}}]}
    }
    with pytest.raises(ConfigError) as err:
        catalogue.plan_studies([one, other], BASE, local)
    assert "studies/other.yaml" in str(err.value) and "differently" in str(err.value)
