"""The study catalogue (docs/studies.md): every study file validates, every published value names its
source (a document and a place in it), every campaign plans on its site, the table's verdicts follow
the rules, and every study's tiny variant runs through Snakemake in one campaign and writes its table."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from exabench.analysis import studies
from exabench.campaign.site import load_site
from exabench.config import load_and_validate
from exabench.errors import ConfigError
from helpers_compare import REPO, env

CATALOGUE = studies.load_catalogue()
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
            assert "tolerance" in fig, fig["id"]
            # A value quoted from the seeds (issue text) without a primary source says so.
            if "issue 17" in src["document"] and "arXiv" not in src["document"]:
                assert fig["verified"] is False, fig["id"]


def _site_of(variant: str) -> str:
    return {"tiny": "local", "default": "perlmutter"}.get(variant, variant)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_campaign_plans_on_its_site(name):
    study = CATALOGUE[name]
    for variant in study.data["campaigns"]:
        site = load_site(REPO / "profiles" / _site_of(variant) / "site.yaml")
        assert studies.variant_of(study, site.name) == variant
        runs = studies.plan_studies([study], BASE, site)[name]
        assert runs and all(r.campaign == f"study-{name}" for r in runs)
        if variant != "tiny":
            assert all(r.preset == "full" for r in runs), variant


def test_shared_tiny_runs_are_planned_once():
    plans = studies.plan_studies(list(CATALOGUE.values()), BASE, load_site(REPO / "profiles/local/site.yaml"))
    merged = studies.merged_runs(plans, "studies")
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
        (lambda d: d["campaigns"]["tiny"].update(benchmarks=[{"name": "alexnet"}]), "campaigns.tiny.benchmarks"),
    ],
)
def test_a_bad_study_names_file_and_key(tmp_path, spoil, key):
    data = _good()
    spoil(data)
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        studies.load_study(path)
    assert str(path) in str(err.value) and f"'{key}'" in str(err.value)


def test_an_unknown_study_lists_the_catalogue():
    with pytest.raises(ConfigError) as err:
        studies.select(CATALOGUE, "no-such-study")
    assert "no-such-study" in str(err.value) and "stampede2-strong-scaling" in str(err.value)


def test_a_study_without_a_campaign_for_the_site_says_so():
    with pytest.raises(ConfigError) as err:
        studies.variant_of(CATALOGUE["deeplabv3-climate-summit"], "frontier")
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


def test_efficiency_within_and_outside_tolerance_on_the_published_machine():
    strong = {"scaling": "strong"}
    # Strong scaling of a throughput: efficiency = (X4 / 4) / (X1 / 1).
    near = [_record("a1", 1, 100.0, params=strong), _record("a4", 4, 220.0, params=strong)]
    row = studies.study_table(STRONG, near, "stampede2", "stampede2").iloc[0]
    assert row["reproduced"] == pytest.approx(0.55) and row["verdict"] == studies.WITHIN
    assert row["ratio"] == pytest.approx(1.1) and "4 workers" in row["reproduced_at"]
    far = [_record("a1", 1, 100.0, params=strong), _record("a4", 4, 100.0, params=strong)]
    assert studies.study_table(STRONG, far, "stampede2", "stampede2").iloc[0]["verdict"] == studies.OUTSIDE


def test_another_machine_judges_efficiency_but_not_values():
    strong = {"scaling": "strong"}
    recs = [_record("a1", 1, 100.0, params=strong), _record("a4", 4, 200.0, params=strong)]
    assert studies.study_table(STRONG, recs, "perlmutter", "default").iloc[0]["verdict"] == studies.WITHIN
    caffe = CATALOGUE["caffe-cori-knl-scale"]
    recs = [_record("c1", 1, 2.0, benchmark="caffenet", metric="achieved_flops")]
    df = studies.study_table(caffe, recs, "perlmutter", "default").set_index("figure")
    assert df.loc["single-node-tflops", "verdict"] == studies.NOT_COMPARABLE
    assert "published on cori-knl" in df.loc["single-node-tflops", "detail"]
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


def test_tiny_and_missing_values_are_labelled():
    strong = {"scaling": "strong"}
    recs = [_record("a1", 1, 100.0, params=strong), _record("a2", 2, 150.0, params=strong)]
    row = studies.study_table(STRONG, recs, "local", "tiny").iloc[0]
    # nodes=4 was not run by the tiny variant: ignored, and the point says so.
    assert row["verdict"] == studies.TINY and row["reproduced"] == pytest.approx(0.75)
    assert "tiny: nodes=4 not run" in row["reproduced_at"] and math.isnan(row["ratio"])
    model = CATALOGUE["coral2-bdas-perf-model"]
    rec = _record("k1", 1, 12.5, benchmark="kmeans", params={"size_per_node": "8GB"}, metric="time")
    rec["layout"]["threads_per_rank"] = 1
    df = studies.study_table(model, [rec], "summit", "summit").set_index("figure")
    assert df.loc["summit-kmeans-8gb-smt1", "verdict"] == studies.NO_VALUE
    assert df.loc["summit-kmeans-8gb-smt1", "reproduced"] == 12.5


def test_another_models_runs_reproduce_nothing():
    cosmoflow = CATALOGUE["mlperf-hpc-cosmoflow-scaling"]
    resnet = [_record("r1", 1, 10.0), _record("r2", 2, 18.0)]
    for site, variant in (("local", "tiny"), ("cori-knl", "cori-knl")):
        row = studies.study_table(cosmoflow, resnet, site, variant).iloc[0]
        assert math.isnan(row["reproduced"]) and "no ok run of cosmoflow" in row["detail"]
    own = [_record("c1", 1, 10.0, benchmark="cosmoflow"), _record("c2", 2, 18.0, benchmark="cosmoflow")]
    row = studies.study_table(cosmoflow, own, "local", "tiny").iloc[0]
    assert row["reproduced"] == pytest.approx(0.9) and row["verdict"] == studies.TINY


def test_speedup_over_a_published_figure():
    bdas = CATALOGUE["coral2-bdas-speedup"]
    rec = _record("k", 128, 3.6, benchmark="kmeans", params={"size_per_node": "8GB"}, metric="fom")
    df = studies.study_table(bdas, [rec], "summit", "summit").set_index("figure")
    assert df.loc["speedup-kmeans", "reproduced"] == pytest.approx(2.0)  # 3.6 / Titan's 1.8 TB/s
    assert df.loc["titan-fom-kmeans", "verdict"] == studies.NOT_COMPARABLE


# -- every tiny variant, through Snakemake, in one campaign ---------------------------------------


# Studies whose first figure is a scaling efficiency of a workload only they run.
EFFICIENCY_FIRST = (
    "mlperf-hpc-cosmoflow-scaling",
    "mlperf-hpc-deepcam-scaling",
    "deeplabv3-climate-summit",
    "keras-horovod-resnet50",
)


@pytest.mark.timeout(1200)  # 19 tiny runs: about 570 s at load 4, 760 s at load 6 on 2 cores
def test_every_tiny_variant_runs_through_snakemake(tmp_path):
    for name in ("Snakefile", "workflow", "profiles", "config", "studies"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, tmp_path / name)
        else:
            shutil.copy2(REPO / name, tmp_path / name)
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
        "study=all",
        "results_store=none",
    ]
    res = subprocess.run(cmd, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=1180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    tables = tmp_path / "results" / "local" / "tables"
    for name, study in CATALOGUE.items():
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
        row = pd.read_csv(tables / f"study-{name}.csv").iloc[0]
        assert row["reproduced"] > 0 and row["reproduced_at"].endswith("vs 1 workers"), (name, row.to_dict())
    # BNL: AlexNet, GoogLeNet and ResNet-50 over Horovod each give their efficiency (K80 and P100 rows).
    bnl = pd.read_csv(tables / "study-bnl-horovod-scaling.csv")
    assert bnl["reproduced"].notna().all() and (bnl["reproduced"] > 0).all(), bnl[["figure", "detail"]].to_string()


def test_a_profile_site_replaced_by_the_command_line_is_caught(monkeypatch):
    from exabench import pipeline

    monkeypatch.chdir(REPO)
    lost = pipeline.profile_site_lost(
        {"site": "profiles/local/site.yaml", "study": "x"}, ["--profile", "profiles/summit"]
    )
    assert "add site=profiles/summit/site.yaml to --config" in lost and "plan for profiles/local/site.yaml" in lost
    assert not pipeline.profile_site_lost({"site": "profiles/summit/site.yaml"}, ["--profile=profiles/summit"])
    assert not pipeline.profile_site_lost({"site": "profiles/local/site.yaml"}, ["--profile", "profiles/local"])
    assert not pipeline.profile_site_lost(
        {"site": "/tmp/my-site.yaml"}, ["--profile", "profiles/summit", "--config", "site=/tmp/my-site.yaml"]
    )


def test_all_on_a_site_is_every_study_with_a_campaign_there():
    on_stampede2 = {s.name for s in studies.select(CATALOGUE, "all", site="stampede2")}
    assert {n for n in NAMED if n.startswith("stampede2-")} <= on_stampede2
    assert "deeplabv3-climate-summit" not in on_stampede2
    assert {s.name for s in studies.select(CATALOGUE, "all", site="local")} == set(CATALOGUE)


def test_two_studies_planning_different_runs_under_one_id_are_refused():
    local = load_site(REPO / "profiles/local/site.yaml")
    one = CATALOGUE["coral2-dl-speedup"]
    other = studies.Study("other", "studies/other.yaml", {**one.data, "name": "other"})
    other.data["campaigns"] = {
        "tiny": {"benchmarks": [{"name": "resnet50", "params": {"steps": 3}, "sweep": {"ranks_per_node": [1, 2]}}]}
    }
    with pytest.raises(ConfigError) as err:
        studies.plan_studies([one, other], BASE, local)
    assert "studies/other.yaml" in str(err.value) and "differently" in str(err.value)
