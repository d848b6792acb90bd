"""The CosmoFlow 3D CNN in Keras, as the MLCommons reference builds it (models/cosmoflow.py
there), from the same settings as the PyTorch network in exabench.models.cosmoflow."""

from __future__ import annotations


def build_model(sample_size: int, *, conv_size: int, kernel_size: int, fc1_size: int, fc2_size: int, dropout: float,
                l2: float = 0.0, channels: int = 4, targets: int = 4, n_conv_layers: int = 5):
    """The settings the benchmark varies come from its parameters (benchmarks.mlperf.cosmoflow's
    network_settings), with no defaults of their own here that could drift from them; the data's
    shape (4 channels, 4 targets) and the reference's 5 conv layers stay fixed."""
    from tensorflow import keras

    layers = keras.layers
    model = keras.Sequential([keras.Input((sample_size, sample_size, sample_size, channels))])
    for i in range(n_conv_layers):
        model.add(layers.Conv3D(conv_size * 2**i, kernel_size, padding="same"))
        model.add(layers.LeakyReLU(0.3))  # Keras' default slope, named for Keras 2 and 3 alike
        model.add(layers.MaxPool3D(2))
    model.add(layers.Flatten())
    for units in (fc1_size, fc2_size):
        model.add(layers.Dense(units, kernel_regularizer=keras.regularizers.l2(l2)))  # the reference's L2
        model.add(layers.LeakyReLU(0.3))
        model.add(layers.Dropout(dropout))
    model.add(layers.Dense(targets, activation="tanh"))
    model.add(layers.Rescaling(1.2))  # the reference's Lambda(x * 1.2)
    return model


def tfrecord_dataset(files: list[str], sample_size: int, batch_size: int, shuffle_seed: int | None = None):
    """The reference input pipeline: parse `x` (raw int16) and `y` (float32[4]), log(x + 1)."""
    import tensorflow as tf

    shape = [sample_size, sample_size, sample_size, 4]
    spec = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([4], tf.float32)}

    def parse(record):
        parsed = tf.io.parse_single_example(record, spec)
        x = tf.reshape(tf.io.decode_raw(parsed["x"], tf.int16), shape)
        return tf.math.log(tf.cast(x, tf.float32) + 1.0), parsed["y"]

    compression = "GZIP" if files and str(files[0]).endswith(".gz") else None
    ds = tf.data.Dataset.from_tensor_slices([str(f) for f in files])
    if shuffle_seed is not None:
        ds = ds.shuffle(len(files), seed=shuffle_seed, reshuffle_each_iteration=True)
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=compression), cycle_length=4)
    return ds.map(parse).batch(batch_size)
