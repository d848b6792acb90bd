"""The GPU check: every CUDA path of exabench run once on one GPU machine, as real runs with real
records, and a report (`gpu-check.md`) that puts each figure beside its published anchor.

It needs no scheduler, no MPI and no network: the runs are planned on a site made for the machine
(launcher torchrun, which ships with torch) and started one by one with `exabench.execute`.
`scripts/gpu_check.sh` is the entry point; docs/gpu-check.md says how to run it.
"""
