"""The benchmarks, one folder per suite (image_classification, analytics, mlperf, micro) and
CANDLE. `REGISTRY`, `register`, `get`, `names` and `load_all` live in `registry`. Importing this
package imports no benchmark: `get(name)` imports the one module that declares `name` (found by
reading the sources), so a run loads its own workload and no other."""

from __future__ import annotations

from exabench.benchmarks.registry import REGISTRY, get, load_all, names, register  # noqa: F401 - the package's API
