"""The networks of the MLPerf-HPC workloads (PyTorch), built from the reference's settings."""
