"""exabench: reproducible deep-learning and analytics benchmarks for supercomputers."""

__version__ = "0.1.0"
