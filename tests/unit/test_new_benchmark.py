"""Adding a benchmark is one module: a toy benchmark declared here, and nowhere else, goes through
the plan, a real run of the runner, its record, the tidy table and the comparison table, each
showing the headline metric it declares (not the first metric by name, nor `throughput`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from exabench import runner
from exabench.analysis.compare import write_comparison
from exabench.benchmarks import REGISTRY, load_all
from exabench.benchmarks.base import Benchmark, Metric, Outcome, param
from exabench.benchmarks.registry import register
from exabench.campaign.plan import expand
from exabench.campaign.render import RunPaths, write_run_files
from exabench.config import validate
from exabench.records.record import read_record, write_record
from exabench.records.tidy import aggregate
from exabench.training.distributed import World


@dataclass
class ToyParams:
    terms: int = param(1000, "terms of the sum", minimum=1)
    scaling: str = param("weak", "weak: terms per rank; strong: terms in all", choices=("weak", "strong"))


class ToySum(Benchmark):
    """A sum of squares, timed: the smallest workload that has a headline of its own."""

    name = "toy-sum"
    suite = "test"
    framework = "python"
    Params = ToyParams
    presets = {"tiny": {"terms": 500}}
    headline = "terms_per_s"  # sorts after `elapsed_s`, and is not `throughput`
    communication = {"pattern": "none"}
    task = "sum-of-squares"

    def run(self, p: ToyParams, ctx) -> Outcome:
        samples = []
        for _ in range(3):
            t0 = time.perf_counter()
            total = sum(i * i for i in range(p.terms))
            samples.append(time.perf_counter() - t0)
        best = min(samples)
        return Outcome({"elapsed_s": Metric(best, "s", samples, higher_is_better=False),
                        "terms_per_s": Metric(p.terms / best, "terms/s", [p.terms / s for s in samples])},
                       info={"total": total})


@pytest.fixture
def toy():
    register(ToySum)
    yield ToySum
    REGISTRY.pop(ToySum.name)


def test_a_benchmark_declared_in_one_module_reaches_every_table(toy, two_core_site, tmp_path):
    config = validate({"benchmarks": [{"name": "toy-sum", "sweep": {"ranks_per_node": [1]}}]}, "config", "c.yaml")
    (run,) = expand(config, two_core_site, "c.yaml")
    assert run.run_id == "toy-sum.tiny.n1r1t2" and run.params["terms"] == 500
    assert run.workload == {"headline": "terms_per_s", "scaling": "weak", "communication": {"pattern": "none"},
                            "data_parallel": False, "task": "sum-of-squares"}

    results = tmp_path / "results" / "local"
    paths = RunPaths(results, run.run_id)
    write_run_files(run, two_core_site, paths)
    import json
    spec = json.loads(paths.spec.read_text())
    record = runner.run(spec, World(0, 1, 0, 1, "single", False))
    write_record(record, paths.record)
    rec = read_record(paths.record)
    assert rec["status"] == "ok" and rec["workload"]["headline"] == "terms_per_s"
    assert rec["info"]["total"] == sum(i * i for i in range(500))

    df = aggregate([paths.record], tmp_path / "results.csv", tmp_path / "summary.md", "local")
    assert set(df["headline"]) == {"terms_per_s"}
    summary = (tmp_path / "summary.md").read_text()
    assert f"| {run.run_id} | toy-sum |  | terms_per_s |" in summary

    write_comparison([str(paths.record)], None, "local", None, tmp_path / "tables")
    site = pd.read_csv(tmp_path / "tables" / "site.csv")
    assert list(site["metric"]) == ["terms_per_s"] and list(site["unit"]) == ["terms/s"]
    assert site["value"].iloc[0] == pytest.approx(rec["metrics"]["terms_per_s"]["value"])
    assert "terms_per_s" in (tmp_path / "tables" / "site.md").read_text()


def test_every_registered_benchmark_declares_its_facts():
    for name, cls in sorted(load_all().items()):
        facts = cls.workload(cls.Params())
        assert facts["headline"] and facts["scaling"] in ("weak", "strong"), name
        assert facts["communication"].get("pattern"), name
        timed = facts["communication"].get("timed_metric")
        assert not timed or {"backend", "regime"} <= set(facts["communication"]), name


def test_the_module_is_the_only_place(toy):
    # No table, model or verdict names a benchmark: the name appears in its own module only.
    package = Path(__file__).resolve().parents[2] / "exabench"
    for module in ("analysis", "records", "perf"):
        for path in (package / module).rglob("*.py"):
            text = path.read_text()
            for name in ("\"resnet50\"", "\"kmeans\"", "\"cosmoflow\"", "\"deepcam\"", "\"alexnet\""):
                assert name not in text, f"{path.relative_to(package.parent)} names {name}"
