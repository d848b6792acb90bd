"""The campaign stage: the site model (load, validate, resource arithmetic), the plan (config x
site -> runs with stable ids), rendering of batch and launch scripts, node sweeps, and one
launcher module each under `launchers/`."""
