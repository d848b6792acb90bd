"""Image-classification workloads: model sizes, the learning-rate rules and LARC, the data
formats, and real 2-rank runs over Gloo (planned, rendered and launched with mpirun)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers_image_classification import ROOT, run_benchmark, run_in_process, write_cifar10_batches_bin

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

# References: torchvision's model docs (ResNet-50, AlexNet, GoogLeNet without aux heads);
# the Caffe prototxts' layer shapes (CaffeNet: bvlc_reference_caffenet; ConvNet: cifar10_quick).
PARAMETER_COUNTS = {"resnet50": (1000, 25_557_032), "alexnet": (1000, 61_100_840),
                    "googlenet": (1000, 6_624_904), "caffenet": (1000, 60_965_224),
                    "convnet_cifar10": (10, 145_578)}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


@pytest.mark.parametrize("name", sorted(PARAMETER_COUNTS))
def test_parameter_count_matches_reference(name):
    from exabench.benchmarks.image_classification.pytorch import build_model
    classes, expected = PARAMETER_COUNTS[name]
    model = build_model(name, classes)
    assert sum(p.numel() for p in model.parameters()) == expected


@pytest.mark.parametrize("name,size", [("convnet_cifar10", 32), ("caffenet", 64), ("googlenet", 64)])
def test_models_take_tiny_images(name, size):
    from exabench.benchmarks.image_classification.pytorch import build_model
    out = build_model(name, 10).eval()(torch.randn(2, 3, size, size))
    assert out.shape == (2, 10)


def test_linear_scaling_and_gradual_warmup():
    from exabench.training.torch_loop import scaled_lr, warmup_factor
    assert scaled_lr(0.1, 8192, 256) == pytest.approx(3.2)  # Goyal et al.: batch 8K
    start = 256 / 8192
    assert warmup_factor(0, 100, start) == pytest.approx(start)
    assert warmup_factor(50, 100, start) == pytest.approx(start + (1 - start) / 2)
    assert warmup_factor(100, 100, start) == 1.0 and warmup_factor(5, 0, start) == 1.0


@pytest.mark.parametrize("clip", [True, False])
def test_larc_update(clip):
    from exabench.training.torch_loop import LARC
    w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))  # ||w|| = 5
    w.grad = torch.tensor([0.6, 0.8])                   # ||g|| = 1
    lr, wd, trust = 0.5, 0.1, 0.02
    opt = LARC(torch.optim.SGD([w], lr=lr, weight_decay=wd), trust_coefficient=trust, clip=clip, eps=0.0)
    local = trust * 5 / (1 + wd * 5)
    factor = min(local / lr, 1.0) if clip else local
    expected = torch.tensor([3.0, 4.0]) - lr * factor * (torch.tensor([0.6, 0.8]) + wd * torch.tensor([3.0, 4.0]))
    opt.step()
    assert torch.allclose(w.detach(), expected, atol=1e-7)
    assert opt.param_groups[0]["weight_decay"] == wd  # restored after the step


def test_precision_names_what_it_does_on_cpu():
    from exabench.training.torch_loop import precision_for
    cpu = torch.device("cpu")
    assert "EMULATED" in precision_for("fp16", cpu).note
    assert precision_for("fp16", cpu).loss_scaling
    assert precision_for("bf16", cpu).autocast_dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="tf32 needs an NVIDIA GPU"):
        precision_for("tf32", cpu)


@pytest.mark.timeout(300)
def test_tf32_on_two_cpu_ranks_is_skipped_by_each_rank_alike(tmp_path):
    """Not `failed`: a retry cannot give a CPU tensor cores (an NCCL allreduce without a GPU is skipped the same
    way); both ranks stop at the same check, so the launch ends and rank 0's record says why."""
    rec = run_benchmark(tmp_path, "convnet_cifar10", {"data": "synthetic", "steps": 2, "precision": "tf32"}, ranks=2)
    assert rec["status"] == "skipped", rec["error"]
    assert "tf32 needs an NVIDIA GPU of compute capability >= 8.0" in rec["error"] and rec["metrics"] == {}


def test_cifar10_binary_round_trip(tmp_path):
    from exabench.data.images import CIFAR_RECORD, CIFAR10Binary, learnable_images, write_cifar10_binary
    path = write_cifar10_binary(tmp_path / "data_batch_1.bin", 20, seed=3)
    assert path.stat().st_size == 20 * CIFAR_RECORD
    images, labels = learnable_images(20, 10, 32, seed=3)
    ds = CIFAR10Binary([path])
    img, label = ds[7]
    assert label == labels[7]
    assert np.array_equal(np.asarray(img).transpose(2, 0, 1), images[7])


def one_label_per_file(n: int) -> dict:
    """data_batch_k.bin holds label k - 1 only, test_batch.bin label 9: a record's label names its file."""
    rng = np.random.default_rng(0)
    files = {f"data_batch_{k}.bin": k - 1 for k in range(1, 6)} | {"test_batch.bin": 9}
    return {name: (rng.integers(0, 256, size=(n, 3, 32, 32)), [label] * n) for name, label in files.items()}


def test_official_cifar10_folder_trains_on_data_batches_and_validates_on_test_batch(tmp_path):
    from exabench.data.images import open_dataset
    batches = one_label_per_file(4)
    folder = write_cifar10_batches_bin(tmp_path, batches)
    for data_dir in (folder, tmp_path):  # the folder itself or the one it was unpacked in
        train = open_dataset("cifar10-binary", data_dir, 32, train=True)
        val = open_dataset("cifar10-binary", data_dir, 32, train=False)
        assert len(train) == 5 * 4 and sorted({int(r[0]) for r in train.records}) == [0, 1, 2, 3, 4]
        assert len(val) == 4 and {int(r[0]) for r in val.records} == {9}
    first_test_image = batches["test_batch.bin"][0][0]
    assert np.array_equal(val.records[0][1:].reshape(3, 32, 32), first_test_image)


@pytest.mark.parametrize("missing,named", [("test_batch.bin", "test_batch.bin"),
                                           ("data_batch_*.bin", "data_batch_1.bin .. data_batch_5.bin")])
def test_cifar10_folder_without_a_split_is_refused_by_name(tmp_path, missing, named):
    from exabench.data.images import open_dataset
    folder = write_cifar10_batches_bin(tmp_path, one_label_per_file(2))
    for f in folder.glob(missing):
        f.unlink()
    with pytest.raises(FileNotFoundError) as err:
        open_dataset("cifar10-binary", folder, 32, train=missing != "test_batch.bin")
    assert str(folder) in str(err.value) and named in str(err.value) and "cifar-10-batches-bin" in str(err.value)


def test_generated_cifar10_set_has_the_official_layout(tmp_path):
    from exabench.data.images import CIFAR_RECORD, write_dataset
    train, val = write_dataset("cifar10-binary", tmp_path / "cifar-10-batches-bin", 50, 12, 10, 32, seed=1)
    assert train == val
    sizes = {f.name: f.stat().st_size for f in train.glob("*.bin")}
    assert sizes == {**{f"data_batch_{k}.bin": 10 * CIFAR_RECORD for k in range(1, 6)},
                     "test_batch.bin": 12 * CIFAR_RECORD}
    assert (train / "batches.meta.txt").read_text().split() [:2] == ["airplane", "automobile"]


@pytest.mark.timeout(300)
def test_run_reads_an_official_cifar10_folder_as_data_dir(tmp_path):
    from exabench.data.images import learnable_images
    train_images, train_labels = learnable_images(160, 10, 32, seed=4)
    batches = {f"data_batch_{k}.bin": (train_images[k - 1::5], train_labels[k - 1::5]) for k in range(1, 6)}
    batches["test_batch.bin"] = learnable_images(32, 10, 32, seed=4, split=1)
    folder = write_cifar10_batches_bin(tmp_path / "data", batches)
    rec = run_in_process(tmp_path, "convnet_cifar10", {"data_dir": str(folder), "epochs": 2, "workers": 0})
    assert rec["status"] == "ok", rec["error"]
    assert 0 <= rec["metrics"]["accuracy"]["value"] <= 1  # measured on test_batch.bin (no val/ folder needed)
    assert sorted(f.name for f in folder.iterdir()) == sorted([*batches, "batches.meta.txt", "readme.html"])


def test_imagenet_folder_is_readable_by_imagefolder(tmp_path):
    from exabench.data.images import open_dataset, write_dataset
    train, val = write_dataset("imagefolder", tmp_path, 24, 8, num_classes=3, size=40, seed=0)
    ds = open_dataset("imagefolder", train, 32, train=True)
    assert len(ds) == 24 and len(ds.classes) == 3
    x, y = ds[0]
    assert x.shape == (3, 32, 32) and 0 <= y < 3
    assert len(open_dataset("imagefolder", val, 32, train=False)) == 8


def test_campaign_configs_plan():
    from exabench.config import load_yaml
    from exabench.campaign.plan import expand
    from exabench.campaign.site import load_site
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    default = [r for r in expand(load_yaml(ROOT / "config" / "config.yaml"), site) if r.benchmark == "resnet50"]
    assert default and default[0].params["precision"] == "fp32" and default[0].params["image_size"] == 64
    runs = expand(load_yaml(ROOT / "config" / "imagenet.yaml"), site)
    names = {r.benchmark for r in runs}
    assert {"resnet50", "alexnet", "googlenet", "caffenet", "convnet_cifar10"} <= names
    assert {r.params["scaling"] for r in runs} == {"weak", "strong"}


@pytest.mark.timeout(300)
def test_two_ranks_gloo_real_input_pipeline(tmp_path):
    """CIFAR-10 binary files generated, read by DataLoader workers on 2 ranks, DDP over Gloo."""
    rec = run_benchmark(tmp_path, "convnet_cifar10", {"data": "cifar10-binary", "dataset_size": 256, "epochs": 2,
                                                      "backend": "gloo"})
    assert rec["status"] == "ok", rec["error"]
    assert all(c["passed"] for c in rec["checks"])
    assert rec["layout"]["ranks"] == 2 and rec["info"]["global_batch"] == 32
    m = rec["metrics"]
    assert m["throughput"]["unit"] == "images/s" and m["throughput"]["precision"] == "fp32"
    assert m["throughput_per_device"]["value"] == pytest.approx(m["throughput"]["value"] / 2)
    assert m["epoch_time"]["value"] > 0 and m["input_throughput"]["value"] > 0
    assert m["achieved_flops"]["value"] > 0


@pytest.mark.timeout(300)
def test_two_ranks_gloo_step_equals_single_process_step(tmp_path):
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    cmd = ["mpirun", "--oversubscribe", "-np", "2", sys.executable,
           str(ROOT / "tests" / "helpers_image_classification.py"), "gloo", str(tmp_path)]
    subprocess.run(cmd, env=env, check=True, timeout=240, capture_output=True)
    out = json.loads((tmp_path / "ddp_step.json").read_text())
    assert out["size"] == 2
    assert out["moved"] > 1e-3            # the step changed the weights ...
    assert out["diff_ranks"] == 0.0        # ... identically on both ranks ...
    assert out["diff_single"] < 1e-5       # ... as one process on the concatenated batch
    assert out["grad_norms"][0] == out["grad_norms"][1]


@pytest.mark.timeout(300)
def test_time_to_accuracy_tiny_reaches_target(tmp_path):
    rec = run_in_process(tmp_path, "convnet_cifar10", {"data": "learnable", "mode": "time_to_accuracy",
                                                       "target_accuracy": 0.9, "warmup_steps": 0})
    assert rec["status"] == "ok", rec["error"]
    m = rec["metrics"]
    assert m["accuracy"]["value"] >= 0.9
    assert 1 <= m["epochs_to_accuracy"]["value"] <= 8
    assert m["time_to_accuracy"]["unit"] == "s" and m["time_to_accuracy"]["value"] > 0


@pytest.mark.timeout(300)
def test_nan_loss_marks_run_failed(tmp_path):
    rec = run_in_process(tmp_path, "convnet_cifar10", {"data": "synthetic", "lr": 1e12, "steps": 4})
    assert rec["status"] == "failed"
    assert "loss_finite" in rec["error"]


@pytest.mark.timeout(300)
def test_loss_that_does_not_fall_is_reported_not_judged_in_a_throughput_run(tmp_path):
    rec = run_in_process(tmp_path, "convnet_cifar10", {"data": "synthetic", "lr": 0.0, "steps": 4})
    assert rec["status"] == "ok", rec["error"]
    assert rec["info"]["loss_trend"]["steps"] >= 4  # warmup steps included
    assert "loss_falls" not in {c["name"] for c in rec["checks"]}
    assert {"loss_finite", "loss_bounded", "weights_in_sync"} <= {c["name"] for c in rec["checks"]}


@pytest.mark.timeout(300)
def test_loss_that_does_not_fall_fails_a_time_to_accuracy_run(tmp_path):
    rec = run_in_process(tmp_path, "convnet_cifar10", {"data": "learnable", "mode": "time_to_accuracy",
                                                       "lr": 0.0, "max_epochs": 1, "warmup_steps": 0})
    assert rec["status"] == "failed"
    assert "loss_falls" in rec["error"] or "reached_target" in rec["error"]


@pytest.mark.timeout(300)
def test_lars_bf16_channels_last_strong_scaling(tmp_path):
    rec = run_in_process(tmp_path, "convnet_cifar10", {"data": "synthetic", "batch_size": 8, "scaling": "strong",
                                                       "optimizer": "lars", "precision": "bf16",
                                                       "channels_last": True, "lr": 0.05, "reference_batch": 8,
                                                       "lr_warmup_steps": 2, "steps": 4})
    assert rec["status"] == "ok", rec["error"]
    assert rec["metrics"]["throughput"]["precision"] == "bf16"
    assert rec["info"]["global_batch"] == 8 and rec["info"]["scaling"] == "strong"
