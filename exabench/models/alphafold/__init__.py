"""AlphaFold2 as the MLCommons HPC OpenFold benchmark trains it (exabench.benchmarks.mlperf.openfold)."""

from exabench.models.alphafold.config import AlphaFoldConfig, scaled_config
from exabench.models.alphafold.model import AlphaFold, parameter_count

__all__ = ["AlphaFold", "AlphaFoldConfig", "parameter_count", "scaled_config"]
