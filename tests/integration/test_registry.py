"""The registry knows every benchmark by name without importing the workloads, and a run's
process imports its own benchmark module and no other."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from exabench.benchmarks import registry
from exabench.campaign.plan import expand
from exabench.campaign.render import RunPaths, write_run_files
from exabench.config import validate

BENCHMARK_MODULES = sorted(set(registry.index().values()))


def _benchmark_modules_after(code: str, cwd) -> list[str]:
    """Run `code` in a fresh interpreter; the benchmark modules it has imported by the end."""
    probe = textwrap.dedent(code) + textwrap.dedent(f"""
        import json as _json, sys as _sys
        print(_json.dumps(sorted(m for m in _sys.modules if m in {BENCHMARK_MODULES!r})))
    """)
    out = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_index_names_every_benchmark_and_its_module():
    # Read from the sources; checked against the registry that importing every module fills.
    loaded = registry.load_all()
    assert registry.index() == {name: cls.__module__ for name, cls in loaded.items()
                                if cls.__module__.startswith("exabench.benchmarks.")}
    assert {"kmeans", "resnet50", "resnet50-keras", "cosmoflow-keras", "gemm"} <= set(registry.names())


def test_names_in_source_reads_register_classes_and_the_benchmarks_tuple():
    source = textwrap.dedent('''
        BENCHMARKS = ("made-a", "made-b")

        @register
        class A(Benchmark):
            name = "a"

        @registry.register
        class B(Benchmark):
            name: str = "b"

        class NotRegistered(Benchmark):
            name = "c"

        def factory(n):
            return register(type(n, (Benchmark,), {"name": n}))
    ''')
    assert registry.names_in_source(source) == ["made-a", "made-b", "a", "b"]


def test_importing_the_package_imports_no_benchmark(repo):
    assert _benchmark_modules_after("import exabench.benchmarks, exabench.runner", repo) == []


def test_a_spawned_runner_imports_its_own_benchmark_module_only(repo, tmp_path, two_core_site):
    cfg = validate({"benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1]}}]}, "config", "c.yaml")
    (run,) = expand(cfg, two_core_site, "c.yaml")
    paths = RunPaths(tmp_path / "results" / "local", run.run_id)
    write_run_files(run, two_core_site, paths)
    loaded = _benchmark_modules_after(f"""
        from exabench import runner
        assert runner.main(["--spec", {str(paths.spec)!r}]) == 0
    """, repo)
    assert loaded == ["exabench.benchmarks.analytics.kmeans"]
    record = json.loads(paths.record.read_text())
    assert record["status"] == "ok" and record["benchmark"] == "kmeans"  # it did run


def test_a_plan_imports_the_benchmarks_it_uses_only(repo, tmp_path):
    loaded = _benchmark_modules_after("""
        from exabench.campaign.plan import expand
        from exabench.campaign.site import load_site
        from exabench.config import validate
        cfg = validate({"benchmarks": [{"name": "gemm"}, {"name": "pca"}]}, "config", "c.yaml")
        assert len(expand(cfg, load_site("profiles/local/site.yaml"), "c.yaml")) == 2
    """, repo)
    assert loaded == ["exabench.benchmarks.analytics.pca", "exabench.benchmarks.micro.gemm"]
