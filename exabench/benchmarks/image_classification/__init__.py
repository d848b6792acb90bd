"""Image classification: ResNet-50 and the ConvNets in PyTorch, and their Keras twins."""
