"""The TensorFlow/Keras image-classification workloads (resnet50-keras, convnet_cifar10-keras):
model sizes, LARC against torch's maths, tf.data shards, real 2-rank runs over
MultiWorkerMirroredStrategy (mpirun), Horovod for TensorFlow where it is built, and a
Snakemake campaign. TensorFlow runs only in child processes, never in the pytest process."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from helpers_image_classification import ROOT, run_benchmark, write_cifar10_batches_bin

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")

HELPER = ROOT / "tests" / "helpers_image_classification_keras.py"
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def child_env() -> dict:
    return {**os.environ, **MPI_ENV, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "TF_CPP_MIN_LOG_LEVEL": "2"}


def run_child(cmd: list[str], timeout: int = 240, cwd=None, env=None, check: bool = True) -> tuple[int, str, str]:
    """Run a command in its own process group; kill the whole group if it outlives `timeout`."""
    proc = subprocess.Popen(cmd, env=env or child_env(), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if check:
        assert proc.returncode == 0, err[-3000:]
    return proc.returncode, out, err


def helper(*args: str) -> dict:
    return json.loads(run_child([sys.executable, str(HELPER), *args])[1].strip().splitlines()[-1])


def horovod_tf_importable() -> bool:
    proc = subprocess.run([sys.executable, "-c", "import horovod.tensorflow"], env=child_env(), capture_output=True,
                          timeout=120)
    return proc.returncode == 0


# -- models ----------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_keras_parameter_counts_and_flops_match_pytorch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from exabench.benchmarks.image_classification.pytorch import build_model, training_flops
    counts = helper("counts")
    assert counts["resnet50"] == 25_557_032           # torchvision's ResNet-50, 1000 classes
    assert counts["convnet_cifar10"] == 145_578       # Caffe's cifar10_quick
    # Keras counts BatchNorm moving statistics (torch's buffers) in count_params(): 2 x 26,560 channels.
    assert counts["resnet50_with_bn_statistics"] == 25_557_032 + 2 * 26_560
    # keras.applications.ResNet50 (v1) has a bias on every convolution: 26,560 more trainable parameters.
    assert counts["application"] == 25_583_592 == counts["resnet50"] + counts["application_conv_biases"]
    assert counts["application_total"] == 25_636_712
    # The FLOPs behind achieved_flops are counted as torch's FlopCounterMode counts them.
    cpu = torch.device("cpu")
    assert counts["flops_resnet50_64"] == training_flops(build_model("resnet50", 1000), 64, cpu)
    assert counts["flops_convnet_cifar10_32"] == training_flops(build_model("convnet_cifar10", 10), 32, cpu)


# -- LARC ------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
@pytest.mark.parametrize("clip,momentum", [(True, 0.0), (False, 0.9)])
def test_keras_larc_matches_torch_larc(clip, momentum):
    torch = pytest.importorskip("torch")
    from exabench.training.torch_loop import LARC
    grads = [[0.6, 0.8, 0.0], [0.3, -0.2, 0.5]]
    args = {"w": [3.0, 4.0, 1.0], "grads": grads, "lr": 0.5, "wd": 0.1, "trust": 0.02, "clip": clip,
            "momentum": momentum, "larc": True}
    keras_w = helper("larc", json.dumps(args))["w"]
    w = torch.nn.Parameter(torch.tensor(args["w"]))
    opt = LARC(torch.optim.SGD([w], lr=0.5, momentum=momentum, weight_decay=0.1), trust_coefficient=0.02, clip=clip,
               eps=0.0)
    for g in grads:
        w.grad = torch.tensor(g)
        opt.step()
    assert keras_w == pytest.approx(w.detach().tolist(), abs=1e-6)
    assert keras_w != pytest.approx(args["w"], abs=1e-3)  # the steps moved the weights


@pytest.mark.timeout(300)
def test_keras_sgd_follows_torch_rule_under_changing_lr():
    torch = pytest.importorskip("torch")
    args = {"w": [1.0, -2.0], "grads": [[0.5, 0.5]], "lr": 0.1, "wd": 0.01, "trust": 0.02, "clip": True,
            "momentum": 0.9, "larc": False}
    keras_w = helper("larc", json.dumps(args))["w"]
    w = torch.nn.Parameter(torch.tensor(args["w"]))
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9, weight_decay=0.01)
    w.grad = torch.tensor([0.5, 0.5])
    opt.step()
    assert keras_w == pytest.approx(w.detach().tolist(), abs=1e-7)


# -- data ------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["cifar10-binary", "imagefolder"])
def test_tf_data_reads_real_formats_in_equal_shards(tmp_path, kind):
    import numpy as np

    from exabench.data.images import write_dataset
    if kind == "cifar10-binary":  # the official folder; data_batch_k.bin holds label k - 1, test_batch.bin 9
        rng = np.random.default_rng(0)
        files = {f"data_batch_{k}.bin": k - 1 for k in range(1, 6)} | {"test_batch.bin": 9}
        path = write_cifar10_batches_bin(tmp_path, {name: (rng.integers(0, 256, size=(5, 3, 32, 32)), [label] * 5)
                                                    for name, label in files.items()})
        train_labels, val_labels, n_val = {0, 1, 2, 3, 4}, {9}, 5
    else:
        path, _ = write_dataset(kind, tmp_path, 24, 8, num_classes=3, size=40, seed=5)
        train_labels, val_labels, n_val = {0, 1, 2}, {0, 1, 2}, 8
    out = helper("shards", kind, str(path), "2")
    for rank in ("0", "1"):
        shard = out[rank]
        assert shard["steps"] == 3  # 24 or 25 images / 2 ranks / batch 4: the same on both ranks
        assert [shape for shape, _ in shard["train"]] == [[4, 32, 32, 3]] * 3
        assert {label for _, labels in shard["train"] for label in labels} <= train_labels
        assert set(shard["val_labels"]) <= val_labels
    assert {label for r in ("0", "1") for _, labels in out[r]["train"] for label in labels} == train_labels
    assert out["0"]["val_images"] + out["1"]["val_images"] == n_val


# -- parameters ------------------------------------------------------------------------------
@pytest.mark.parametrize("key,value,valid", [
    ("channels_last", True, "False only"), ("compile", True, "False only"),
    ("backend", "gloo", "'auto', 'ring', 'nccl', 'horovod'"), ("compression", "fp16", "'none' with backend 'auto'")])
def test_torch_only_params_are_refused_by_name(key, value, valid):
    from exabench.benchmarks import get
    from exabench.errors import ConfigError
    with pytest.raises(ConfigError) as err:
        get("resnet50-keras").resolve_params("tiny", {key: value}, "c.yaml", "benchmarks[0].params")
    assert f"benchmarks[0].params.{key}" in str(err.value) and repr(value) in str(err.value)
    assert valid in str(err.value)


def test_keras_twins_share_presets_and_parameters():
    from exabench.benchmarks import get
    for name in ("resnet50", "convnet_cifar10"):
        torch_cls, keras_cls = get(name), get(f"{name}-keras")
        assert keras_cls.presets == torch_cls.presets and keras_cls.framework == "tensorflow"
        assert list(keras_cls.param_fields()) == list(torch_cls.param_fields())


def test_frameworks_campaign_pairs_each_model():
    from exabench.config import load_yaml
    from exabench.campaign.plan import expand
    from exabench.campaign.site import load_site
    runs = expand(load_yaml(ROOT / "config" / "frameworks.yaml"), load_site(ROOT / "profiles/local/site.yaml"))
    by_name = {r.benchmark: r for r in runs}
    assert set(by_name) == {"resnet50", "resnet50-keras", "convnet_cifar10", "convnet_cifar10-keras"}
    for name in ("resnet50", "convnet_cifar10"):
        a, b = by_name[name], by_name[f"{name}-keras"]
        assert a.params == {**b.params, "backend": a.params["backend"]}
        assert a.layout == b.layout and a.layout.ranks_per_node == 2


# -- distributed runs ------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_two_ranks_mwms_step_equals_single_process_step(tmp_path):
    out = tmp_path / "mwms_step.json"
    run_child(["mpirun", "--oversubscribe", "-np", "2", sys.executable, str(HELPER), "mwms_step", str(out)])
    res = json.loads(out.read_text())
    assert res["size"] == 2
    assert res["moved"] > 1e-3          # the step changed the weights ...
    assert res["diff_ranks"] == 0.0     # ... identically on both ranks ...
    assert res["diff_single"] < 1e-5    # ... as one process on the whole batch
    assert res["grad_sums"][0] == res["grad_sums"][1]
    assert res["grad_sums"][0] == pytest.approx(res["grad_sum_single"], rel=1e-5)


@pytest.mark.timeout(420)
def test_two_ranks_time_to_accuracy_tiny_converges(tmp_path):
    rec = run_benchmark(tmp_path, "convnet_cifar10-keras", {"data": "learnable", "mode": "time_to_accuracy",
                                                            "target_accuracy": 0.9, "warmup_steps": 0})
    assert rec["status"] == "ok", rec["error"]
    assert all(c["passed"] for c in rec["checks"]), rec["checks"]
    m = rec["metrics"]
    assert m["accuracy"]["value"] >= 0.9 and 1 <= m["epochs_to_accuracy"]["value"] <= 8
    assert m["time_to_accuracy"]["unit"] == "s" and m["time_to_accuracy"]["value"] > 0


@pytest.mark.timeout(420)
def test_two_ranks_cifar10_binary_input_pipeline(tmp_path):
    rec = run_benchmark(tmp_path, "convnet_cifar10-keras", {"data": "cifar10-binary", "dataset_size": 128,
                                                            "epochs": 2, "workers": 2})
    assert rec["status"] == "ok", rec["error"]
    m = rec["metrics"]
    assert m["epoch_time"]["value"] > 0 and m["input_throughput"]["value"] > 0 and m["accuracy"]["unit"] == "1"
    assert rec["info"]["global_batch"] == 32 and len(m["throughput"]["samples"]) == 2 * 4 - 2  # warmup 2 excluded


@pytest.mark.timeout(300)
@pytest.mark.parametrize("precision,extra", [
    ("fp16", {"optimizer": "lars", "lr_warmup_steps": 2, "reference_batch": 8, "lr": 0.05}),
    ("bf16", {"scaling": "strong", "batch_size": 8})])
def test_mixed_precision_runs_on_cpu(tmp_path, precision, extra):
    rec = run_benchmark(tmp_path, "convnet_cifar10-keras", {"data": "synthetic", "steps": 4, "precision": precision,
                                                            **extra}, ranks=1)
    assert rec["status"] == "ok", rec["error"]
    assert rec["metrics"]["throughput"]["precision"] == precision
    note = rec["info"]["precision_note"]
    assert ("EMULATED" in note and "loss scaling" in note) if precision == "fp16" else "mixed_bfloat16" in note


@pytest.mark.timeout(300)
def test_tf32_without_a_gpu_is_skipped_naming_what_it_needs(tmp_path):
    rec = run_benchmark(tmp_path, "convnet_cifar10-keras", {"data": "synthetic", "steps": 2, "precision": "tf32"},
                        ranks=1)
    assert rec["status"] == "skipped" and "tf32 needs an NVIDIA GPU" in rec["error"] and not rec["metrics"]


@pytest.mark.timeout(300)
def test_raising_rank_fails_the_run_with_its_error(tmp_path):
    rec = run_benchmark(tmp_path, "convnet_cifar10-keras", {"data": "synthetic", "steps": 2, "warmup_steps": 0,
                                                            "fail_at_step": 1})
    assert rec["status"] == "failed"
    assert "rank 1" in rec["error"] and "injected failure at step 1" in rec["error"]


@pytest.mark.timeout(420)
def test_horovod_tensorflow_trains_in_sync(tmp_path):
    if not horovod_tf_importable():
        pytest.skip("horovod.tensorflow is not importable (Horovod built without TensorFlow support)")
    rec = run_benchmark(tmp_path, "convnet_cifar10-keras", {"data": "synthetic", "steps": 4, "backend": "horovod",
                                                            "compression": "fp16"})
    assert rec["status"] == "ok", rec["error"]
    assert rec["info"]["backend"] == "horovod" and rec["info"]["strategy"].startswith("horovod.tensorflow")
    assert all(c["passed"] for c in rec["checks"]), rec["checks"]


@pytest.mark.timeout(300)
def test_horovod_backend_without_horovod_tensorflow_fails_clearly(tmp_path):
    if horovod_tf_importable():
        pytest.skip("horovod.tensorflow is importable here: test_horovod_tensorflow_trains_in_sync runs instead")
    rec = run_benchmark(tmp_path, "convnet_cifar10-keras", {"data": "synthetic", "steps": 2, "backend": "horovod"})
    assert rec["status"] == "failed"
    assert "backend 'horovod' needs Horovod built with TensorFlow support" in rec["error"]


@pytest.mark.timeout(900)
def test_snakemake_campaign_runs_resnet50_keras_two_ranks_in_sync(tmp_path):
    """resnet50-keras at the tiny preset on 2 ranks (mpirun, MWMS over RING), planned, rendered,
    run and tabulated by Snakemake through the local profile."""
    cfg = {"campaign": "keras", "preset": "tiny", "benchmarks": [
        {"name": "resnet50-keras", "sweep": {"ranks_per_node": [2]}, "params": {"steps": 3, "warmup_steps": 1}}]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--profile",
           str(ROOT / "profiles" / "local"), "--config", f"site={ROOT}/profiles/local/site.yaml", "--configfile",
           str(tmp_path / "config.yaml")]
    env = {**child_env(), "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}"}
    code, out, err = run_child(cmd, timeout=840, cwd=tmp_path, env=env, check=False)
    assert code == 0, out[-3000:] + err[-3000:]
    run_id = "resnet50-keras.tiny.fp32.n1r2t1"
    rec = json.loads((tmp_path / "results/local/records" / f"{run_id}.json").read_text())
    assert rec["status"] == "ok", rec["error"]
    assert rec["framework"] == "tensorflow" and rec["benchmark"] == "resnet50-keras" and rec["layout"]["ranks"] == 2
    checks = {c["name"]: c for c in rec["checks"]}
    assert checks["weights_in_sync"]["passed"] and checks["gradients_in_sync"]["passed"], checks
    info = rec["info"]
    assert info["parameters"] == 25_557_032 and info["global_batch"] == 8
    assert info["strategy"] == "tf.distribute.MultiWorkerMirroredStrategy(RING)" and info["backend"] == "ring"
    assert info["tensorflow"] and info["keras"].startswith("3.")
    thr, step = rec["metrics"]["throughput"], rec["metrics"]["step_time"]
    assert thr["unit"] == "images/s" and len(thr["samples"]) == 3
    assert thr["value"] == pytest.approx(8 * 3 / sum(step["samples"]))  # global images / slowest rank's time
    summary = (tmp_path / "results/local/tables/summary.md").read_text()
    assert f"| {run_id} | resnet50-keras |" in summary and "| throughput |" in summary


@pytest.mark.timeout(300)
def test_torchrun_two_ranks_without_mpi(tmp_path, monkeypatch):
    """No MPI: TF_CONFIG's ports are gathered over init_torch's Gloo group (torchrun's rendezvous)."""
    from dataclasses import replace

    from exabench.execute import execute
    from exabench.campaign.render import RunPaths, write_run_files
    from exabench.campaign.plan import expand
    from exabench.campaign.site import load_site
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}")
    site = replace(load_site(ROOT / "profiles" / "local" / "site.yaml"), launcher="torchrun")
    config = {"campaign": "test", "preset": "tiny", "repeats": 1, "timeout_s": 240, "benchmarks": [
        {"name": "convnet_cifar10-keras", "params": {"data": "synthetic", "steps": 4},
         "sweep": {"ranks_per_node": [2]}}]}
    (run,) = expand(config, site)
    paths = RunPaths(tmp_path / "results", run.run_id)
    write_run_files(run, site, paths)
    assert "torchrun" in paths.script.read_text()
    rec = execute(paths.spec)
    assert rec["status"] == "ok", rec["error"]
    assert rec["info"]["strategy"] == "tf.distribute.MultiWorkerMirroredStrategy(RING)"
    assert all(c["passed"] for c in rec["checks"]), rec["checks"]
