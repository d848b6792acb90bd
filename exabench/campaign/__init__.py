"""The campaign stage: the site model (load, validate, resource arithmetic), the plan (config x
site -> runs with stable ids), rendering of batch and launch scripts, node sweeps, and one
launcher module each under `launchers/`."""

# Imported with the stage, so that each launcher module has declared its schedulers
# (site.LAUNCHERS_BY_SCHEDULER) before any site file is loaded.
from exabench.campaign import launchers  # noqa: F401
