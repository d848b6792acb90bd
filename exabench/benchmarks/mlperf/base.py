"""What every MLPerf-HPC workload shares.

- `MLPerfParams`: the parameters (data staging, the division written to the log, the
  torch.distributed backend and the seeds). A workload's Params class inherits it and names its
  own defaults as class keywords; the shared fields are appended after its own, so they keep
  their place at the end of the parameter list (records, docs).
- `MLPerfBenchmark`: the facts (the score is the time to train to the quality target,
  data-parallel PyTorch with DDP's gradient buckets, the mlperf-hpc suite).
"""

from __future__ import annotations

from typing import ClassVar

from exabench.benchmarks.base import Benchmark, param

BACKENDS = ("auto", "gloo", "nccl", "mpi")


class MLPerfParams:
    """Mixin for a workload's `@dataclass` Params. Class keywords:

    - `seed`: default of `seed` (and of `data_seed`);
    - `data_set`: the data set the closed division requires, named in the division's doc
      (None: the short doc);
    - `staging_timed`: whether the staging copy counts in the time to train (said in the doc);
    - `data_seed`: False where the workload declares its own `data_seed`;
    - `seed_doc`: what `seed` seeds."""

    def __init_subclass__(cls, *, seed: int, data_set: str | None = None, staging_timed: bool = False,
                          data_seed: bool = True, seed_doc: str = "seed of weights and shuffling", **kwargs):
        super().__init_subclass__(**kwargs)
        division_doc = "MLPerf division written to the log"
        if data_set:
            division_doc += f" (closed: only the reference network and target on the {data_set} data set)"
        fields = {
            "stage_dir": ("str", param(
                "", f"node-local directory to copy the data to first{' (timed)' if staging_timed else ''}; "
                "empty: no staging")),
            "division": ("str", param("open", division_doc, choices=("open", "closed"))),
            "backend": ("str", param("auto", "torch.distributed backend (auto: nccl on GPUs, gloo on CPUs)",
                                     choices=BACKENDS)),
        }
        if data_seed:
            # Fixed across a Time To Solution campaign's seeds: the reference's data set does not
            # change with the seed.
            fields["data_seed"] = ("int", param(seed, "seed of the synthetic data set", minimum=1))
        fields["seed"] = ("int", param(seed, seed_doc, minimum=1))
        # Written into the class before @dataclass reads it, so they come after the workload's own.
        annotations = cls.__dict__.get("__annotations__", {})
        for name, (kind, default) in fields.items():
            annotations[name] = kind
            setattr(cls, name, default)
        cls.__annotations__ = annotations


class MLPerfBenchmark(Benchmark):
    """An MLPerf-HPC workload: set `name`, `Params` (an `MLPerfParams`), `presets` and `run`."""

    headline: ClassVar[str] = "time_to_train"  # MLPerf-HPC's score: time to the quality target
    communication: ClassVar[dict] = {"pattern": "ddp-gradient-buckets"}
    data_parallel: ClassVar[bool] = True
    suite: ClassVar[str] = "mlperf-hpc"
    framework: ClassVar[str] = "pytorch"
