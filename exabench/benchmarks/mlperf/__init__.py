"""MLPerf-HPC: CosmoFlow and DeepCAM, and the harness that writes and checks their MLPerf logs."""
