"""The GPU check's CPU-runnable parts: planning (dry run), the anchors, the report, the wheel list,
and the refusal on a machine without a GPU. The CUDA runs themselves need a GPU machine
(docs/gpu-check.md)."""

from __future__ import annotations

import ast
import math
import json
import os
import re
import zipfile
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from exabench.gpucheck import anchors, plan, wheels

REPO = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3"


def gpucheck(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "exabench.gpucheck", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def test_dry_run_plans_every_cuda_path_within_ten_minutes_on_one_gpu(tmp_path):
    proc = gpucheck("--out", str(tmp_path / "one"), "--dry-run", "--assume-gpu", H100, "--gpus", "1")
    assert proc.returncode == 0, proc.stderr
    assert "23 runs, budgets 840 s in all; bounded at 600 s (parts that no longer fit are skipped" in proc.stdout
    for key in ("resnet50-fp32", "resnet50-tf32", "resnet50-fp16-nhwc", "resnet50-bf16", "gemm-bf16",
                "conv-heuristic", "conv-benchmark", "conv-deterministic", "rnn-lstm", "allreduce-nccl-1gpu",
                "cosmoflow", "deepcam", "bare-fp32", "bare-bf16-nhwc"):
        assert f"  {key} " in proc.stdout
    assert "ddp-nccl-2gpu          skipped: needs 2 GPUs, this machine has 1" in proc.stdout
    keys = [p.key for p in plan.parts(1, H100)]
    for prec in ("fp32", "tf32", "fp16", "bf16", "fp16-nhwc", "bf16-nhwc"):  # each bare loop right after its part
        assert keys.index(f"bare-{prec}") == keys.index(f"resnet50-{prec}") + 1
    assert "python -m exabench.gpucheck.bare --precision fp16 --channels-last --batch 256" in proc.stdout


def test_quick_mode_plans_within_four_minutes(tmp_path):
    proc = gpucheck("--out", str(tmp_path / "q"), "--dry-run", "--quick", "--assume-gpu", H100, "--gpus", "1")
    assert proc.returncode == 0, proc.stderr
    assert "7 runs" not in proc.stdout and "6 runs, budgets 235 s in all; bounded at 240 s" in proc.stdout
    planned = [line.split()[0] for line in proc.stdout.splitlines()[1:] if line.startswith("  ") and
               not line.startswith("      ") and "skipped" not in line]
    assert planned == [k for k in plan.QUICK_PARTS if k != "allreduce-nccl-across"]
    two = gpucheck("--out", str(tmp_path / "q2"), "--dry-run", "--quick", "--assume-gpu", H100, "--gpus", "2")
    assert "7 runs, budgets 265 s in all; bounded at 240 s (parts that no longer fit are skipped" in two.stdout


def test_parts_that_no_longer_fit_the_bound_are_skipped_and_named():
    gemm = next(p for p in plan.parts(1, H100) if p.key == "gemm-fp16")
    assert plan.left_for(gemm, 500.0, 600.0) == ""  # 100 s left, budget 30 s
    assert plan.left_for(gemm, 580.0, 600.0) == ("no longer fits: 20 s left of the check's 600 s bound, its "
                                                 "budget is 30 s")
    assert "0 s left" in plan.left_for(gemm, 700.0, 600.0)


def test_cpu_rehearsal_skips_what_the_bound_leaves_no_room_for(tmp_path):
    out = tmp_path / "bounded"
    proc = gpucheck("--out", str(out), "--cpu-rehearsal", "--assume-gpu", H100, "--only",
                    "gemm-fp32,allreduce-nccl-1gpu", "--bound", "20")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (out / "gpu-check.md").read_text()
    # a rehearsal's budgets are at least REHEARSAL_MIN_BUDGET_S (torch starts slowly on a shared CPU)
    assert re.search(r"\| gemm-fp32 \| no longer fits: \d+ s left of the check's 20 s bound, its budget is 180 s",
                     report)
    assert re.search(r"\| allreduce-nccl-1gpu \| no longer fits: .* its budget is 180 s", report)
    assert not list((out / "results" / "records").glob("*.json"))  # nothing was started


def test_dry_run_on_two_gpus_adds_the_cross_gpu_runs_with_their_launch_lines(tmp_path):
    out = tmp_path / "two"
    proc = gpucheck("--out", str(out), "--dry-run", "--assume-gpu", H100, "--gpus", "2")
    assert proc.returncode == 0, proc.stderr
    assert "25 runs" in proc.stdout and "skipped:" not in proc.stdout
    specs = {p.parent.name: json.loads(p.read_text()) for p in (out / "results" / "runs").glob("*/spec.json")}
    ddp = next(s for name, s in specs.items() if "ddp-nccl-2gpu" in name)
    assert ddp["params"]["backend"] == "nccl" and ddp["params"]["batch_size"] == 256
    assert "--nproc-per-node 2" in ddp["launch_line"] and "torch.distributed.run" in ddp["launch_line"]
    gemm = next(s for name, s in specs.items() if name.startswith("gemm.gemm-fp16"))
    assert gemm["params"]["peak_tflops"] == 989.4 and gemm["params"]["shapes"] == "deepbench"
    assert gemm["timeout_s"] == 30  # each part bounded by its own budget


def test_no_gpu_stops_at_once_with_a_clear_message(tmp_path):
    proc = gpucheck("--out", str(tmp_path / "x"))
    assert proc.returncode == 3
    assert "no NVIDIA GPU here" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists()
    if subprocess.run(["sh", "-c", "command -v nvidia-smi"], capture_output=True).returncode != 0:
        script = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh")], capture_output=True, text=True,
                                timeout=60)
        assert script.returncode == 3 and "no nvidia-smi here" in script.stderr


def test_the_documented_dry_run_through_the_script(tmp_path):
    """docs/gpu-check.md's dry-run line, through scripts/gpu_check.sh with this Python."""
    line = next(x.strip() for x in (REPO / "docs" / "gpu-check.md").read_text().splitlines()
                if x.strip().startswith("scripts/gpu_check.sh --dry-run"))
    command = line.split("#")[0].strip().replace("scripts/gpu_check.sh", f"bash {REPO}/scripts/gpu_check.sh")
    proc = subprocess.run(f"{command} --out {tmp_path / 'out'}", shell=True, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    assert "25 runs" in proc.stdout and "ddp-nccl-2gpu" in proc.stdout


def test_assumed_gpu_needs_dry_run_or_rehearsal(tmp_path):
    proc = gpucheck("--out", str(tmp_path / "x"), "--assume-gpu", H100)
    assert proc.returncode == 2 and "--dry-run or --cpu-rehearsal" in proc.stderr
    proc = gpucheck("--out", str(tmp_path / "x"), "--dry-run", "--assume-gpu", H100, "--only", "nope")
    assert proc.returncode == 2 and "matches no part" in proc.stderr and "resnet50-fp32" in proc.stderr


@pytest.mark.parametrize("name, model, fp16", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5", 989.4), ("NVIDIA H100 PCIe", "H100 PCIe", 756.5),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5), ("NVIDIA H200", "H200 SXM", 989.4),
    ("NVIDIA A100-SXM4-80GB", "A100", 312.0), ("Tesla V100-SXM2-32GB", "V100 SXM2", 125.0),
    ("Tesla V100-PCIE-16GB", "V100 PCIe", 112.0)])
def test_datasheet_peaks_by_device_name(name, model, fp16):
    assert anchors.datasheet(name)[0] == model
    assert anchors.peak_tflops(name, "fp16").value == fp16


def test_anchors_are_only_given_where_published():
    assert anchors.datasheet("NVIDIA GeForce RTX 4090") is None
    assert anchors.peak_tflops("Tesla V100-SXM2-16GB", "bf16") is None  # Volta has no bf16 tensor cores
    assert anchors.resnet50_images_per_s("NVIDIA A100-SXM4-80GB", "fp16").value == 2470.0
    assert anchors.resnet50_images_per_s("NVIDIA A100-SXM4-80GB", "tf32").value == 938.0
    assert anchors.resnet50_images_per_s("Tesla V100-SXM2-16GB", "fp32").value == 367.0
    h100 = anchors.resnet50_images_per_s("NVIDIA H100 80GB HBM3", "fp16")  # derived from MLPerf Training v3.0
    assert h100.value == 4600.0 and "training_results_v3.0" in h100.source and "/ 64" in h100.source
    assert anchors.resnet50_images_per_s("NVIDIA H100 80GB HBM3", "fp32") is None  # nothing published
    assert anchors.resnet50_images_per_s("NVIDIA H200", "fp16") is None
    nvlink = anchors.link_bandwidth({"nvlink_GBps": [26.562] * 18, "pcie_gen": 5, "pcie_width": 16})
    assert nvlink.value == 478.1 and "18 active links" in nvlink.source
    assert anchors.link_bandwidth({"nvlink_GBps": [], "pcie_gen": 4, "pcie_width": 16}).value == 31.5
    assert anchors.link_bandwidth({}) is None


def test_tf32_and_bf16_parts_skip_a_pre_ampere_gpu(tmp_path):
    info = {"gpus": 1, "name": "Tesla V100-SXM2-16GB", "capability": "7.0"}
    planned, skipped = plan.plan(info, tmp_path)
    assert {p.key for p, _ in skipped} >= {"resnet50-tf32", "resnet50-bf16", "gemm-tf32", "gemm-bf16"}
    assert all("compute capability 8.0" in why for p, why in skipped if "16" in p.key or "32" in p.key)
    assert "resnet50-fp16-nhwc" in {p.key for p, _ in planned}


def _imports(path: Path) -> set[str]:
    """Every module a file imports, function-level imports included (benchmarks import torch lazily)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def _module_file(name: str) -> Path | None:
    base = REPO / Path(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def test_the_wheel_list_covers_what_the_check_imports():
    """Every distribution the planner, the runner and the checked benchmarks can import is the
    machine's torch (with what torch brings), one of the wheels scripts/gpu_wheels.sh downloads, or
    a backend the check does not use (wheels.NOT_USED)."""
    from exabench.benchmarks import registry

    todo = ["exabench.gpucheck.__main__", "exabench.gpucheck.report", "exabench.gpucheck.bare", "exabench.runner",
            "exabench.execute"]
    todo += sorted({registry.index()[p.benchmark] for p in plan.parts(2, H100) if p.benchmark != plan.BARE})
    seen, third_party = set(), set()
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        for target in _imports(path):
            if target.startswith("exabench"):
                todo.append(target)
            elif target.split(".")[0] not in sys.stdlib_module_names:
                third_party.add(target.split(".")[0])
    assert {"torch", "yaml", "jsonschema", "jinja2", "mlperf_logging", "h5py"} <= third_party
    by_module = metadata.packages_distributions()

    def closure(names) -> set[str]:
        seen_d, stack = set(), [wheels.normalise(n) for n in names]
        while stack:
            dist = stack.pop()
            if dist in seen_d:
                continue
            seen_d.add(dist)
            try:
                requires = metadata.requires(dist) or []
            except metadata.PackageNotFoundError:
                continue
            stack += [wheels.normalise(re.split(r"[\s;\[<>=!~]", r, maxsplit=1)[0]) for r in requires
                      if "extra ==" not in r]
        return seen_d

    provided = closure(wheels.RUNTIME) | closure(["torch", "torchvision"])
    missing = sorted(m for m in third_party - set(wheels.NOT_USED)
                     if not {wheels.normalise(d) for d in by_module.get(m, [m])} & provided)
    assert not missing, f"imported on the GPU check's path but in no wheel: {missing}"


def test_requirement_lines_follow_the_lock(tmp_path):
    lines = wheels.requirement_lines(REPO / "requirements.lock")
    assert len(lines) == len(wheels.RUNTIME) and all("==" in line for line in lines)
    (tmp_path / "lock").write_text("PyYAML==6.0\n")
    with pytest.raises(SystemExit, match="no pinned version of jsonschema"):
        wheels.requirement_lines(tmp_path / "lock")


def _wheel(folder: Path, name: str, requires: list[str]) -> None:
    meta = "Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as z:
        z.writestr(f"{name}-1.0.dist-info/METADATA", meta)


def test_only_the_wheels_this_python_lacks_are_chosen(tmp_path):
    """On the GPU machine only what its Python lacks is installed (its numpy, pandas and torch stay):
    a wanted distribution that is missing comes with what it needs and this Python lacks too; what
    this Python has, what an extra or a false marker asks for, is left out."""
    _wheel(tmp_path, "exb_absent_a", ["PyYAML>=5", "exb-absent-b", 'exb-absent-c; extra == "docs"',
                                      'exb-absent-d; python_version < "3"'])
    _wheel(tmp_path, "exb_absent_b", [])
    _wheel(tmp_path, "exb_absent_c", [])
    _wheel(tmp_path, "pyyaml", [])
    (tmp_path / "requirements.txt").write_text("exb-absent-a==1.0\nPyYAML==6.0.3\n")
    assert [w.name.split("-")[0] for w in wheels.missing_wheels(tmp_path)] == ["exb_absent_a", "exb_absent_b"]
    (tmp_path / "exb_absent_b-1.0-py3-none-any.whl").unlink()
    with pytest.raises(SystemExit, match="lacks exb-absent-b and there is no wheel of it"):
        wheels.missing_wheels(tmp_path)


def test_cpu_rehearsal_runs_real_records_and_writes_the_report(tmp_path):
    """torchrun with 2 ranks and no MPI (as on a bare GPU machine): the allreduce across ranks and
    GEMM run for real at tiny size, and gpu-check.md puts GEMM beside the A100 datasheet peak."""
    out = tmp_path / "rehearsal"
    proc = gpucheck("--out", str(out), "--cpu-rehearsal", "--assume-gpu", "NVIDIA A100-SXM4-80GB", "--gpus", "2",
                    "--only", "gemm-fp32,allreduce-nccl-across,gemm-tf32")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (out / "gpu-check.md").read_text()
    assert "CPU rehearsal" in report
    gemm = next(line for line in report.splitlines() if line.startswith("| gemm-fp32 "))
    cells = [c.strip() for c in gemm.strip("|").split("|")]
    assert cells[2] == "ok" and cells[3].endswith("TFLOP/s") and cells[5] == "19.5 TFLOP/s"
    assert float(cells[6]) >= 0 and "A100 Tensor Core GPU datasheet" in cells[8]
    across = next(line for line in report.splitlines() if line.startswith("| allreduce-nccl-across "))
    assert "| ok |" in across and "GB/s" in across
    assert "| gemm-tf32 | needs a GPU of compute capability 8.0" in report
    records = list((out / "results" / "records").glob("*.json"))
    assert len(records) == 2 and all(json.loads(r.read_text())["status"] == "ok" for r in records)


def test_cpu_rehearsal_runs_the_bare_loop_beside_resnet50_and_reports_the_ratio(tmp_path):
    out = tmp_path / "bare"
    proc = gpucheck("--out", str(out), "--cpu-rehearsal", "--assume-gpu", H100, "--only", "resnet50-fp32,bare-fp32")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (out / "gpu-check.md").read_text()
    assert "## Harness overhead: exabench / bare loop" in report
    row = next(line for line in report.splitlines() if line.startswith("| resnet50-fp32 |") and "images/s" not in
               line and line.count("|") == 5)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[3]) > 0  # exabench / bare, both measured
    bare = next(line for line in report.splitlines() if line.startswith("| bare-fp32 "))
    assert "| ok |" in bare and "images/s" in bare and "/ 180 |" in bare  # seconds beside the budget
    assert re.search(r"The whole check took \d+ s of its 600 s bound", report)


def test_bare_loop_is_the_same_step_on_the_cpu():
    from exabench.gpucheck import bare
    out = bare.step_loop("fp32", False, batch=2, image_size=32, warmup=1, steps=2, device="cpu")
    assert out["images_per_s"] > 0 and out["steps"] == 2 and out["device"] == "cpu"
    assert math.isfinite(out["loss"])


@pytest.mark.parametrize("only", ["nonsense", "gemm-fp32,nonsense", "zzz,yyy"])
def test_a_bad_only_is_refused_before_anything_is_written(tmp_path, only):
    out = tmp_path / "x"
    proc = gpucheck("--out", str(out), "--dry-run", "--assume-gpu", H100, "--only", only)
    assert proc.returncode == 2 and "matches no part" in proc.stderr and "Traceback" not in proc.stderr
    assert "nonsense" in proc.stderr or "zzz" in proc.stderr
    assert not out.exists()  # no site.yaml or config half-written


def test_an_out_that_is_a_file_is_refused(tmp_path):
    out = tmp_path / "taken"
    out.write_text("mine\n")
    proc = gpucheck("--out", str(out), "--dry-run", "--assume-gpu", H100)
    assert proc.returncode == 2 and f"--out {out} is a file" in proc.stderr and "Traceback" not in proc.stderr
    assert out.read_text() == "mine\n"
