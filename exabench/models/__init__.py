"""Model definitions not found in torchvision: the MLPerf-HPC networks (built from the references'
settings) and the Caffe-era image classifiers."""
