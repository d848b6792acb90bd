"""Micro-benchmarks: GEMM, convolutions, RNN (DeepBench shapes), all-reduce and file reads."""
