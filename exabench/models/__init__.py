"""Model definitions not found in torchvision."""
