"""CosmoFlow: the reference network's size, the data formats (TFRecord and HDF5) and their
readers, and a real 2-rank training run to the MAE target with a compliant MLPerf log."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from exabench.data import cosmo, tfrecord
from exabench.data.tfrecord import CorruptFileError


def test_full_size_network_has_the_reference_parameter_count():
    import torch
    from exabench.models.cosmoflow import CosmoFlow

    with torch.device("meta"):  # shapes only: no memory, no arithmetic
        model = CosmoFlow(128, conv_size=32, kernel_size=3)
        # count_params() of the reference's own Keras model (tests/golden/cosmoflow_reference.json)
        assert sum(p.numel() for p in model.parameters()) == 8_907_556
        out = model(torch.empty(4, 4, 128, 128, 128))
    assert out.shape == (4, 4)


def test_output_equals_the_reference_models_with_the_same_weights():
    """tests/golden/cosmoflow_reference.json: the reference's Keras model run once outside this tree
    on seeded weights and a seeded input; the same weights (moved to PyTorch's layouts) and input
    give the same four outputs per sample here."""
    import json
    from pathlib import Path

    import torch
    from exabench.models.cosmoflow import CosmoFlow

    golden = json.loads((Path(__file__).parents[1] / "golden" / "cosmoflow_reference.json").read_text())
    size = golden["sample_size"]
    model = CosmoFlow(size, conv_size=golden["conv_size"], dropout=0.5).eval()
    state = model.state_dict()
    assert {name for _, name, _ in golden["weight_map"]} == set(state)
    rng = np.random.default_rng(golden["weights_seed"])
    for _, name, shape in golden["weight_map"]:  # drawn in the reference's order and shapes
        if len(shape) == 1:
            value = 0.1 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) * float(np.prod(shape[:-1])) ** -0.5
        value = value.astype(np.float32)
        # Keras kernels: Conv3D (k, k, k, in, out) -> (out, in, k, k, k); Dense (in, out) -> (out, in)
        value = value.transpose(4, 3, 0, 1, 2) if value.ndim == 5 else value.T
        state[name].copy_(torch.from_numpy(np.ascontiguousarray(value)))
    x = np.random.default_rng(golden["input_seed"]).standard_normal((golden["batch"], size, size, size, 4))
    x = torch.from_numpy(x.astype(np.float32).transpose(0, 4, 1, 2, 3).copy())  # channels last -> first
    with torch.no_grad():
        y = model(x).double()
    torch.testing.assert_close(y, torch.tensor(golden["output"], dtype=torch.float64), rtol=0, atol=1e-5)


def test_tiny_network_forward_is_bounded_by_1p2():
    import torch
    from exabench.models.cosmoflow import CosmoFlow

    out = CosmoFlow(32, conv_size=4)(torch.full((2, 4, 32, 32, 32), 50.0))
    assert out.shape == (2, 4) and float(out.detach().abs().max()) <= 1.2 + 1e-6
    with pytest.raises(ValueError, match="divisible by 2"):
        CosmoFlow(48)


def test_tfrecord_framing_and_example_round_trip(tmp_path):
    rec = tfrecord.encode_example({"x": b"\x01\x02\x03", "y": np.array([0.5, -1.25], np.float32), "n": [3, -7]})
    for name in ("a.tfrecord", "a.tfrecord.gz"):
        assert tfrecord.write_tfrecords(tmp_path / name, [rec, rec]) == 2
        examples = list(tfrecord.read_examples(tmp_path / name))
        assert len(examples) == 2
        assert examples[0]["x"] == b"\x01\x02\x03"
        assert examples[0]["y"].tolist() == [0.5, -1.25]
        assert examples[0]["n"].tolist() == [3, -7]
    # The masked CRC of TensorFlow's framing, on the CRC-32C check value.
    assert tfrecord.crc32c(b"123456789") == 0xE3069283


def test_generated_set_reads_back_the_same_in_both_formats(tmp_path):
    counts = cosmo.generate(tmp_path, 8, 8, 32, split=2, seed=3)  # one 64^3 universe per split
    assert counts == {"train": 8, "validation": 8}
    tf_refs = cosmo.list_samples(tmp_path / "train", "tfrecord", 32)
    h5_refs = cosmo.list_samples(tmp_path / "train", "hdf5", 32)
    assert len(tf_refs) == len(h5_refs) == 8
    for a, b in zip(tf_refs, h5_refs):
        xa, ya = cosmo.load_sample(a, "tfrecord", 32)
        xb, yb = cosmo.load_sample(b, "hdf5", 32)
        assert xa.dtype == np.int16 and xa.shape == (32, 32, 32, 4)
        assert np.array_equal(xa, xb) and np.array_equal(ya, yb)
    # Learnable: the log-mean of channel c follows target c.
    x, y = cosmo.load_sample(tf_refs[0], "tfrecord", 32)
    logx = cosmo.log_transform(x)
    assert logx.shape == (4, 32, 32, 32)
    assert np.corrcoef(logx.mean(axis=(1, 2, 3)), y)[0, 1] > 0.9


def test_our_tfrecords_are_tensorflows(tmp_path):
    """TensorFlow parses what we write, with the reference's feature spec, and we read what it writes."""
    tf = pytest.importorskip("tensorflow")
    cosmo.generate(tmp_path, 1, 1, 32, seed=5, formats=("tfrecord",))
    path = str(cosmo.list_samples(tmp_path / "train", "tfrecord", 32)[0].path)
    spec = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([4], tf.float32)}
    raw = next(iter(tf.data.TFRecordDataset(path)))
    parsed = tf.io.parse_single_example(raw, spec)
    x_ours, y_ours = cosmo.load_sample(cosmo.SampleRef(path, 0), "tfrecord", 32)
    x_tf = tf.reshape(tf.io.decode_raw(parsed["x"], tf.int16), [32, 32, 32, 4]).numpy()
    assert np.array_equal(x_tf, x_ours) and np.allclose(parsed["y"].numpy(), y_ours)
    theirs = tmp_path / "tf.tfrecord"
    with tf.io.TFRecordWriter(str(theirs)) as w:
        ex = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[x_ours.tobytes()])),
                    "y": tf.train.Feature(float_list=tf.train.FloatList(value=y_ours.tolist())),
                }
            )
        )
        w.write(ex.SerializeToString())
    x2, y2 = cosmo.load_sample(cosmo.SampleRef(str(theirs), 0), "tfrecord", 32)
    assert np.array_equal(x2, x_ours) and np.array_equal(y2, y_ours)


def test_truncated_and_corrupt_tfrecords_name_the_file(tmp_path):
    cosmo.generate(tmp_path, 2, 1, 32, seed=1, formats=("tfrecord",))
    ref = cosmo.list_samples(tmp_path / "train", "tfrecord", 32)[0]
    data = open(ref.path, "rb").read()
    short = tmp_path / "short.tfrecord"
    short.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match=r"short\.tfrecord: truncated record"):
        cosmo.load_sample(cosmo.SampleRef(str(short), 0), "tfrecord", 32)
    flipped = bytearray(data)
    flipped[1000] ^= 0xFF
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(CorruptFileError, match=r"bad\.tfrecord: data CRC mismatch"):
        cosmo.load_sample(cosmo.SampleRef(str(bad), 0), "tfrecord", 32)
    header = tmp_path / "header.tfrecord"
    header.write_bytes(struct.pack("<Q", 5) + b"\0\0")
    with pytest.raises(CorruptFileError, match=r"header\.tfrecord: truncated record header"):
        list(tfrecord.read_tfrecords(header))
    wrong = tmp_path / "wrong.tfrecord"
    tfrecord.write_tfrecords(wrong, [tfrecord.encode_example({"x": b"12", "y": np.zeros(4, np.float32)})])
    with pytest.raises(CorruptFileError, match=r"wrong\.tfrecord: feature 'x' has 2 bytes"):
        cosmo.load_sample(cosmo.SampleRef(str(wrong), 0), "tfrecord", 32)


def test_truncated_hdf5_universe_names_the_file(tmp_path):
    cosmo.generate(tmp_path, 1, 1, 32, seed=1, formats=("hdf5",))
    path = next((tmp_path / "train").glob("*.h5"))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(CorruptFileError, match=str(path.name)):
        cosmo.list_samples(tmp_path / "train", "hdf5", 32)


@pytest.mark.timeout(300)
def test_tiny_preset_reaches_the_target_on_two_ranks(tmp_path):
    """Real: mpirun -np 2, Gloo DDP, staging to a 'node-local' directory, HDF5 input."""
    from helpers_mlperf import make_spec, run_mpi

    data = tmp_path / "data"
    p = __import__("exabench.benchmarks.mlperf.cosmoflow", fromlist=["x"]).CosmoFlow.presets["tiny"]
    cosmo.generate(data, p["n_train"], p["n_validation"], p["sample_size"], seed=42)
    spec = make_spec(
        tmp_path,
        "cosmoflow",
        "tiny",
        {"data_dir": str(data), "data_format": "hdf5", "stage_dir": str(tmp_path / "local")},
        ranks=2,
    )
    rec = run_mpi(spec, 2)
    checks = {c["name"]: c for c in rec["checks"]}
    assert rec["status"] == "ok", rec["error"]
    assert checks["quality_target_reached"]["passed"] and checks["mlperf_compliance"]["passed"]
    assert rec["metrics"]["eval_mae"]["value"] <= 0.124
    assert rec["metrics"]["throughput"]["unit"] == "samples/s" and rec["metrics"]["time_to_train"]["value"] > 0
    assert rec["metrics"]["staging_time"]["value"] > 0
    log = open(rec["info"]["mlperf_log"]).read()
    assert '"key": "staging_start"' in log and '"key": "eval_error"' in log
    from exabench.benchmarks.mlperf.harness import compliance_check

    assert compliance_check(rec["info"]["mlperf_log"])[0]


def test_keras_network_has_the_reference_parameter_count():
    pytest.importorskip("tensorflow")
    from exabench.benchmarks.mlperf.cosmoflow import CosmoFlowParams, network_settings
    from exabench.models.cosmoflow_keras import build_model

    # Built as the benchmark builds it: its default parameters are the reference's network.
    assert build_model(128, **network_settings(CosmoFlowParams())).count_params() == 8_907_556
    small = network_settings(CosmoFlowParams(conv_size=4))
    tiny = build_model(32, **small)
    assert tiny.output_shape == (None, 4)
    # The reference's l2 regularises the two hidden Dense kernels only.
    regularised = [
        type(layer).__name__
        for layer in build_model(32, **small, l2=0.01).layers
        if getattr(layer, "kernel_regularizer", None) is not None
    ]
    assert regularised == ["Dense", "Dense"]


def test_l2_penalty_is_the_references_hidden_dense_kernels_only():
    import torch
    from exabench.models.cosmoflow import CosmoFlow

    model = CosmoFlow(32, conv_size=4)
    hidden = [m.weight for m in model.head if isinstance(m, torch.nn.Linear)][:2]
    assert [tuple(w.shape) for w in hidden] == [(128, 4 * 16), (64, 128)]  # 64 channels x 1 voxel
    assert float(model.l2_penalty()) == pytest.approx(sum(float(w.square().sum()) for w in hidden), rel=1e-6)


@pytest.mark.timeout(300)
def test_keras_version_runs_from_the_same_config_and_logs(tmp_path):
    """One process, one epoch: the run goes through the MLPerf flow; missing the target in
    one epoch is reported as a failed check, not hidden."""
    pytest.importorskip("tensorflow")
    import json

    from helpers_mlperf import make_spec

    from exabench import runner
    from exabench.training.distributed import World

    data = tmp_path / "data"
    cosmo.generate(data, 16, 8, 32, seed=7, formats=("tfrecord",))
    spec = json.loads(
        make_spec(tmp_path, "cosmoflow-keras", "tiny", {"data_dir": str(data), "max_epochs": 1}, ranks=1).read_text()
    )
    rec = runner.run(spec, World(0, 1, 0, 1, "single", False))
    assert rec["framework"] == "tensorflow" and rec["info"]["parameters"] > 0
    assert rec["metrics"]["epochs"]["value"] == 1 and rec["metrics"]["throughput"]["value"] > 0
    checks = {c["name"]: c["passed"] for c in rec["checks"]}
    assert checks["loss_finite"]
    assert checks["quality_target_reached"] == (rec["metrics"]["eval_mae"]["value"] <= 0.124)
    log = open(rec["info"]["mlperf_log"]).read()
    for key in ("init_stop", "run_start", "epoch_start", "eval_error", "run_stop", "opt_base_learning_rate"):
        assert f'"key": "{key}"' in log
