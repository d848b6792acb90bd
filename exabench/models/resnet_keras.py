"""Keras versions of two image-classification networks, built to match the PyTorch ones
layer for layer so that the frameworks train the same model:

- ResNet-50 v1.5 as torchvision builds it: no convolution biases, the stride of a
  bottleneck on its 3x3 convolution, BatchNorm eps 1e-5 (momentum 0.1 in torch's
  convention), explicit zero padding as torch pads (TF's "same" pads asymmetrically):
  25,557,032 trainable parameters with the 1000-class head (Keras' count_params() adds
  the 53,120 BatchNorm moving statistics, which torch keeps as buffers, not parameters).
  keras.applications.ResNet50 is v1 (stride on the first 1x1, a bias on every
  convolution, eps 1.001e-5): 25,583,592 trainable, 26,560 more, all convolution biases
  (redundant before BatchNorm); 25,636,712 with the moving statistics.
- Caffe's cifar10_quick ConvNet (exabench.models.convnets.ConvNetCIFAR10), 145,578
  parameters; ceil-mode pooling is TF's "same" pooling at these sizes.

Initialisers follow torch's defaults (Kaiming normal fan_out for ResNet convolutions,
uniform +-1/sqrt(fan_in) for torch's default layers). Images are NHWC (TF's layout).
"""

from __future__ import annotations

RESNET50_BLOCKS = (3, 4, 6, 3)


def _torch_default_init():
    """torch's default Conv/Linear init: weight and bias uniform in +-1/sqrt(fan_in)."""
    from tensorflow import keras
    return keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")


def _bn(name: str):
    from tensorflow import keras
    return keras.layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name=name)


def _conv(filters: int, kernel: int, stride: int, name: str):
    from tensorflow import keras
    kaiming_fan_out = keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")  # torchvision's
    return keras.layers.Conv2D(filters, kernel, strides=stride, use_bias=False, name=name,
                               kernel_initializer=kaiming_fan_out)


def _bottleneck(x, width: int, stride: int, downsample: bool, name: str):
    from tensorflow import keras
    layers = keras.layers
    shortcut = x
    y = layers.ReLU()(_bn(f"{name}_bn1")(_conv(width, 1, 1, f"{name}_conv1")(x)))
    y = layers.ZeroPadding2D(1)(y)
    y = layers.ReLU()(_bn(f"{name}_bn2")(_conv(width, 3, stride, f"{name}_conv2")(y)))  # v1.5: stride here
    y = _bn(f"{name}_bn3")(_conv(width * 4, 1, 1, f"{name}_conv3")(y))
    if downsample:
        shortcut = _bn(f"{name}_down_bn")(_conv(width * 4, 1, stride, f"{name}_down_conv")(x))
    return layers.ReLU()(layers.Add()([y, shortcut]))


def resnet50(num_classes: int = 1000, image_size: int = 224):
    """torchvision.models.resnet50 in Keras (v1.5)."""
    from tensorflow import keras
    layers = keras.layers
    inputs = keras.Input((image_size, image_size, 3))
    x = layers.ZeroPadding2D(3)(inputs)
    x = layers.ReLU()(_bn("bn1")(_conv(64, 7, 2, "conv1")(x)))
    x = layers.MaxPooling2D(3, strides=2)(layers.ZeroPadding2D(1)(x))  # zeros pad like -inf after a ReLU
    for stage, (blocks, width) in enumerate(zip(RESNET50_BLOCKS, (64, 128, 256, 512))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _bottleneck(x, width, stride, block == 0, f"layer{stage + 1}_{block}")
    x = layers.GlobalAveragePooling2D()(x)
    init = _torch_default_init()
    x = layers.Dense(num_classes, kernel_initializer=init, bias_initializer=_fan_in_bias(2048), name="fc")(x)
    return keras.Model(inputs, x, name="resnet50")


def _fan_in_bias(fan_in: int):
    from tensorflow import keras
    bound = fan_in ** -0.5
    return keras.initializers.RandomUniform(-bound, bound)


def convnet_cifar10(num_classes: int = 10, image_size: int = 32):
    """Caffe's cifar10_quick (exabench.models.convnets.ConvNetCIFAR10) in Keras."""
    from tensorflow import keras
    layers = keras.layers
    init = _torch_default_init()

    def conv(filters: int, fan_in: int):
        return layers.Conv2D(filters, 5, padding="same", kernel_initializer=init, bias_initializer=_fan_in_bias(fan_in))

    inputs = keras.Input((image_size, image_size, 3))
    x = layers.MaxPooling2D(3, strides=2, padding="same")(conv(32, 3 * 25)(inputs))
    x = layers.ReLU()(x)
    x = layers.ReLU()(conv(32, 32 * 25)(x))
    x = layers.AveragePooling2D(3, strides=2, padding="same")(x)
    x = layers.ReLU()(conv(64, 32 * 25)(x))
    x = layers.AveragePooling2D(3, strides=2, padding="same")(x)
    side = x.shape[1]
    if side != 4:  # torch's adaptive pool to 4x4, where it is a plain average pool
        if side % 4:
            raise ValueError(f"image_size {image_size}: the Keras ConvNet-CIFAR10 needs a feature map that pools "
                             f"evenly to 4x4 (got {side}x{side}); valid: 32, or sizes giving a multiple of 4")
        x = layers.AveragePooling2D(side // 4)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(64, kernel_initializer=init, bias_initializer=_fan_in_bias(1024))(x)
    x = layers.Dense(num_classes, kernel_initializer=init, bias_initializer=_fan_in_bias(64))(x)
    return keras.Model(inputs, x, name="convnet_cifar10")


def build_model(name: str, num_classes: int, image_size: int):
    builders = {"resnet50": resnet50, "convnet_cifar10": convnet_cifar10}
    if name not in builders:
        raise ValueError(f"Keras model {name!r}: valid are {', '.join(builders)}")
    return builders[name](num_classes, image_size)


def parameter_count(model) -> int:
    """Trainable parameters, as torch counts model.parameters() (BatchNorm statistics excluded)."""
    return sum(_prod(w.shape) for w in model.trainable_weights)


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def training_flops(model) -> float:
    """FLOPs of one training sample counted as torch's FlopCounterMode counts them: 2 x MACs of
    every convolution and dense layer forward, twice that backward (input and weight
    gradients), except the first layer, whose input needs no gradient. Other layers
    (BatchNorm, pooling, activations) are not counted, as torch does not count them."""
    from tensorflow import keras
    total, first = 0.0, True
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kh, kw = layer.kernel_size
            in_c = layer.input.shape[-1] // layer.groups
            _, oh, ow, oc = layer.output.shape
            macs = oh * ow * oc * kh * kw * in_c
        elif isinstance(layer, keras.layers.Dense):
            macs = layer.input.shape[-1] * layer.units
        else:
            continue
        total += 2 * macs * (2 if first else 3)
        first = False
    return total
