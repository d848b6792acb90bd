"""The benchmarks, one folder per suite (image_classification, analytics, mlperf, micro) and
CANDLE. `REGISTRY`, `register` and `get` live in `registry`; importing this package imports
every benchmark module so that each one registers itself."""

from __future__ import annotations

from exabench.benchmarks.registry import REGISTRY, get, register  # noqa: F401 - the package's API


def _register_all() -> None:
    """Import every module of the suite folders: each registers its benchmarks with `@register`,
    so a new benchmark is one new module and no edit here. Heavy frameworks are imported lazily,
    in run()."""
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        importlib.import_module(info.name)


_register_all()
