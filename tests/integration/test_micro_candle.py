"""CANDLE pilots: the networks, losses and optimizers of ECP-CANDLE Benchmarks release_01
(golden layer lists and parameter counts built from the release's own code, see
tests/golden/candle_release01.json), training that converges on the synthetic data, P3B1's
one-model-per-task scheme, and DDP over 2 real ranks (mpirun, Gloo)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_micro import metric, run_in_process, run_launched

from exabench.benchmarks.candle import MODELS, build_model, keras_categorical_crossentropy, loss_and_correct, \
    make_optimizer

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "candle_release01.json").read_text())
SMALL = {"max_features": 256, "batch_size": 16, "samples_per_rank": 160, "epochs": 2, "val_samples_per_rank": 64}
ACTIVATIONS = {torch.nn.ReLU: "relu", torch.nn.Sigmoid: "sigmoid", torch.nn.Softmax: "softmax"}


def dense_layers(module) -> list[dict]:
    """exabench's Dense layers in order: units, the activation that follows, parameter count."""
    mods = list(module.modules())
    rows = []
    for i, m in enumerate(mods):
        if isinstance(m, torch.nn.Linear):
            act = ACTIVATIONS[type(mods[i + 1])]
            rows.append({"units": m.out_features, "activation": act, "params": m.weight.numel() + m.bias.numel()})
    return rows


def golden_layers(layers) -> list[dict]:
    return [{k: layer[k] for k in ("units", "activation", "params")} for layer in layers]


@pytest.mark.parametrize("model", ["p1b1", "p1b2"])
def test_pilot1_networks_equal_the_release(model):
    gold = GOLDEN[model]
    assert MODELS[model]["features"] == gold["input_width"]
    net = build_model(torch, model, gold["input_width"], device="meta")
    assert dense_layers(net) == golden_layers(gold["layers"])
    assert sum(w.numel() for w in net.parameters()) == gold["total_params"]
    assert MODELS[model]["batch"] == gold["defaults"]["batch_size"]
    assert MODELS[model]["lr"] == (gold["defaults"]["learning_rate"] or 1e-3)  # P1B1: None = Keras' Adam default


def test_p1b1_has_the_bottleneck_and_sigmoid_output():
    assert GOLDEN["p1b1"]["defaults"]["latent_dim"] == MODELS["p1b1"]["latent"] == 2
    assert [r["units"] for r in dense_layers(build_model(torch, "p1b1", 100))] == [2000, 600, 2, 600, 2000, 100]


def test_p3b1_tasks_and_networks_equal_the_release():
    gold = GOLDEN["p3b1"]
    net = build_model(torch, "p3b1", gold["input_width"], device="meta")
    assert list(MODELS["p3b1"]["tasks"].values()) == [t["classes"] for t in gold["tasks"]]
    assert len(net) == len(gold["tasks"]) == 3  # no invented fourth task
    for (name, task_net), task in zip(net.items(), gold["tasks"]):
        assert dense_layers(task_net) == golden_layers(task["layers"]), name
        assert sum(w.numel() for w in task_net.parameters()) == task["total_params"]
    assert sum(w.numel() for w in net.parameters()) == gold["total_params"] == 33_164_419
    # the models share no weights (the release's shared layers never reach its task models)
    assert len({id(w) for w in net.parameters()}) == sum(len(list(m.parameters())) for m in net.values())


def test_weights_are_glorot_uniform_with_zero_biases():
    for model in ("p1b1", "p1b2", "p3b1"):
        assert {r["kernel_init"] for r in GOLDEN[model].get("layers", GOLDEN["p3b1"]["tasks"][0]["layers"])} \
            == {"GlorotUniform"}
    torch.manual_seed(0)
    layer = next(m for m in build_model(torch, "p1b2", 3000).modules() if isinstance(m, torch.nn.Linear))
    limit = math.sqrt(6 / (3000 + 1024))
    assert layer.weight.abs().max() <= limit and layer.weight.abs().max() > 0.99 * limit
    assert not layer.bias.any()


def test_optimizers_equal_the_release():
    p = [torch.nn.Parameter(torch.zeros(2))]
    rms = make_optimizer(torch, "p1b2", p, 1e-3).param_groups[0]
    gold = GOLDEN["p1b2"]["optimizer"]
    assert (gold["class"], rms["alpha"], rms["eps"], rms["momentum"]) == ("RMSprop", gold["rho"], gold["epsilon"], 0)
    sgd = make_optimizer(torch, "p3b1", p, 0.01)
    gold = GOLDEN["p3b1"]["optimizer"]
    assert isinstance(sgd, torch.optim.SGD) and gold["class"] == "SGD"
    assert (sgd.param_groups[0]["momentum"], sgd.param_groups[0]["nesterov"]) == (gold["momentum"], gold["nesterov"])
    assert MODELS["p3b1"]["lr"] == gold["lr"]


def test_p1b1_adam_is_keras_adam():
    """Two steps of Keras 2's update, p -= lr sqrt(1-b2^t)/(1-b1^t) m / (sqrt(v) + 1e-7), by hand."""
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 1e-9], dtype=torch.float64))
    opt = make_optimizer(torch, "p1b1", [w], 1e-3)
    grads = [np.array([0.5, -1e-6, 3.0]), np.array([-0.25, 2e-6, 1.0])]
    ref, m, v = w.detach().numpy().copy(), 0.0, 0.0
    for t, g in enumerate(grads, start=1):
        w.grad = torch.tensor(g)
        opt.step()
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        ref = ref - 1e-3 * math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m / (np.sqrt(v) + 1e-7)
    np.testing.assert_allclose(w.detach().numpy(), ref, rtol=1e-12)


def test_p1b2_loss_is_keras_crossentropy_plus_hidden_l2():
    """Keras 2: categorical cross-entropy of the sigmoid outputs (scaled to sum 1, clipped) plus
    1e-5 x (sum of squares of each hidden kernel and of each hidden activation over the batch);
    the output layer has no penalty."""
    assert GOLDEN["p1b2"]["loss"] == "categorical_crossentropy"
    assert [(r["kernel_l2"], r["activity_l2"]) for r in GOLDEN["p1b2"]["layers"]] == [(1e-5, 1e-5)] * 3 + [(None, None)]
    torch.manual_seed(1)
    net = build_model(torch, "p1b2", 40).double()
    x, y = torch.rand(6, 40, dtype=torch.float64), torch.tensor([0, 3, 9, 1, 1, 5])
    loss, correct = loss_and_correct(torch, "p1b2", net(x), y, net)
    hs, h = [], x.numpy()
    for layer in [seq[0] for seq in net.hidden] + [net.out[0]]:
        h = 1 / (1 + np.exp(-(h @ layer.weight.detach().numpy().T + layer.bias.detach().numpy())))
        hs.append(h)
    *hs, out = hs
    p = np.clip(out / out.sum(1, keepdims=True), 1e-7, 1 - 1e-7)
    ce = -np.log(p[np.arange(6), y.numpy()]).mean()
    kernels = sum((seq[0].weight.detach().numpy() ** 2).sum() for seq in net.hidden)
    expected = ce + 1e-5 * (kernels + sum((a ** 2).sum() for a in hs))
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)  # the loss is taken in float32
    assert float(loss.detach()) != pytest.approx(ce, rel=1e-6)  # and the penalty is not negligible here
    assert correct == int((out.argmax(1) == y.numpy()).sum())
    # the clip: a zero probability costs -log(1e-7), not infinity
    zero = keras_categorical_crossentropy(torch, torch.tensor([[0.0, 1.0]]), torch.tensor([0]))
    assert float(zero) == pytest.approx(-math.log(1e-7), rel=1e-5)


@pytest.mark.parametrize("model", ["p1b1", "p1b2", "p3b1"])
def test_one_rank_trains(tmp_path, model):
    rec = run_in_process(tmp_path, "candle", {"model": model, **SMALL})
    assert rec["status"] == "ok", rec["error"]
    assert all(c["passed"] for c in rec["checks"])
    assert metric(rec, "throughput") > 0 and rec["metrics"]["throughput"]["unit"] == "samples/s"
    assert metric(rec, "val_loss") < rec["info"]["val_loss_before"]
    assert rec["info"]["features"] == min(256, MODELS[model]["features"])
    if model != "p1b1":
        assert {c["name"] for c in rec["checks"]} >= {"accuracy_above_chance"}
        assert 0 <= metric(rec, "accuracy") <= 1


def test_p3b1_trains_each_task_in_turn_on_its_own_data(tmp_path):
    rec = run_in_process(tmp_path, "candle", {"model": "p3b1", "max_features": 0, "batch_size": 0,
                                              "samples_per_rank": 40, "epochs": 1, "warmup_steps": 1,
                                              "val_samples_per_rank": 16})
    info = rec["info"]
    assert info["batch_size"] == 10 and info["features"] == 400 and info["parameters"] == 33_164_419
    assert info["tasks"] == ["primary_site", "laterality", "histological_grade"]
    assert info["steps"] == 3 * 4  # one epoch: each task's 40 rows in batches of 10, the tasks in turn
    assert len(rec["metrics"]["accuracy"]["samples"]) == 3


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_two_ranks_ddp(tmp_path):
    rec = run_launched(tmp_path, "candle", {"model": "p1b2", **SMALL}, ranks=2)
    assert rec["status"] == "ok", rec["error"]
    assert rec["info"]["global_batch"] == 32 and rec["info"]["backend"] == "gloo"
    assert metric(rec, "accuracy") >= 0.15
