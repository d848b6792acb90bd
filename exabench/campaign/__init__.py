"""The campaign stage: the site model (load, validate, resource arithmetic), the plan (config x
site -> runs with stable ids), rendering of batch and launch scripts, node sweeps, and one
launcher module each under `launchers/`, one scheduler module each under `schedulers/`."""

# Imported with the stage, so that each launcher module has declared its schedulers
# (site.LAUNCHERS_BY_SCHEDULER), and each scheduler module its name (site.SCHEDULER_NAMES), before
# any site file is loaded.
from exabench.campaign import launchers, schedulers  # noqa: F401
