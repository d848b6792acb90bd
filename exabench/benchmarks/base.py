"""What every benchmark declares: typed, documented parameters with presets per
scale, a run that returns metrics with units, and sanity checks kept apart from
the metrics (a run whose checks fail is `failed`, not fast)."""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from exabench.errors import ConfigError

PRESETS = ("tiny", "small", "full")
SCALING_MODES = ("strong", "weak")


def param(default: Any, doc: str, choices: tuple | None = None, minimum: float | None = None,
          maximum: float | None = None):
    """A benchmark parameter: its default, what it means, and what values are valid (a `maximum`
    where a larger value cannot be run, rather than run until the time-out)."""
    return field(default=default, metadata={"doc": doc, "choices": choices, "minimum": minimum, "maximum": maximum})


@dataclass
class Metric:
    """One figure of a run: its value, unit, the samples behind it and their spread."""

    value: float
    unit: str
    samples: list[float] = field(default_factory=list)
    precision: str | None = None
    higher_is_better: bool = True
    description: str = ""

    def to_dict(self) -> dict:
        d = {"value": self.value, "unit": self.unit, "samples": list(self.samples),
             "higher_is_better": self.higher_is_better}
        if self.samples:
            d["stats"] = spread(self.samples)
        if self.precision:
            d["precision"] = self.precision
        if self.description:
            d["description"] = self.description
        return d


def spread(samples: list[float]) -> dict:
    s = sorted(samples)
    n = len(s)
    q = statistics.quantiles(s, n=4, method="inclusive") if n >= 2 else [s[0]] * 3
    return {"n": n, "median": statistics.median(s), "mean": statistics.fmean(s),
            "std": statistics.stdev(s) if n >= 2 else 0.0, "min": s[0], "max": s[-1],
            "q1": q[0], "q3": q[2], "iqr": q[2] - q[0]}


@dataclass
class Check:
    """A sanity check: what was checked, whether it held, and the numbers behind it."""

    name: str
    passed: bool
    detail: str = ""


# A training loss this many times the larger of its first value and the loss of guessing (the
# cross-entropy of a uniform prediction, ln(classes)) has diverged: the logits blew up. A healthy
# run at a high learning rate without warmup overshoots by a few tenths (ResNet-50 on an H100 at
# lr 0.1: mean 6.33 then 7.05 over 30 steps), never by an order of magnitude.
DIVERGENCE_FACTOR = 10.0


def training_loss_checks(losses: list[float], classes: int, convergence: bool) -> tuple[list[Check], dict]:
    """(checks, trend) of a training loss. Every run: the loss is finite and does not diverge
    (DIVERGENCE_FACTOR). A throughput run measures speed, and a few dozen steps at a high rate
    without warmup may raise the loss before it falls, so there "the loss falls" is reported in
    `trend`, never judged: it must not reject a speed figure. A convergence run (it trains
    until a quality target) is long enough to show it, and keeps it as a check."""
    half = max(1, len(losses) // 2)
    first, last = statistics.fmean(losses[:half]), statistics.fmean(losses[-half:])
    finite = all(math.isfinite(x) for x in losses)
    bound = DIVERGENCE_FACTOR * max(losses[0] if finite else 0.0, math.log(classes))
    worst = max(losses) if finite else math.nan
    checks = [Check("loss_finite", finite, f"losses {losses[0]:.4g} .. {losses[-1]:.4g}"),
              Check("loss_bounded", finite and worst <= bound,
                    f"largest loss {worst:.4g}, bound {bound:.4g} ({DIVERGENCE_FACTOR:g} x max(first loss, "
                    f"ln {classes} classes))")]
    trend = {"first_half_mean": first, "second_half_mean": last, "falls": last < first, "steps": len(losses)}
    if convergence:
        checks.append(Check("loss_falls", last < first, f"mean loss first half {first:.4f}, second half {last:.4f}"))
    return checks, trend


@dataclass
class Outcome:
    metrics: dict[str, Metric]
    checks: list[Check] = field(default_factory=list)
    info: dict = field(default_factory=dict)  # extra facts for the record (e.g. device, model size)
    skipped: str | None = None  # why the run cannot happen here (e.g. Horovod not installed): status `skipped`

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]


class Benchmark:
    """Subclass, set the class attributes, define `Params` and `run`."""

    name: ClassVar[str]
    suite: ClassVar[str]
    framework: ClassVar[str]
    launcher_needs: ClassVar[str] = "any"  # "mpi" when the workload itself calls MPI
    Params: ClassVar[type]
    presets: ClassVar[dict[str, dict]] = {}
    id_params: ClassVar[tuple[str, ...]] = ()  # always shown in run ids (e.g. precision)

    # Facts about the workload, written into its plan entry and every record ("workload"), so
    # that tables, verdicts and models read them from there and name no benchmark themselves.
    headline: ClassVar[str] = "throughput"  # the metric a table or summary shows for a run
    # The metrics its records carry (`name.*` a family: `time.*` for time.<size>), so that a config
    # naming one to judge (every_node.verdict.metrics) is checked when the campaign is planned, not
    # found missing by the verdict; (): not declared (any name is taken).
    metric_names: ClassVar[tuple[str, ...]] = ()
    scaling: ClassVar[str] = "strong"  # how the problem grows with the workers; a `scaling` parameter wins
    # Its collectives: `pattern`, and where the local scaling check models them, the `backend`, the
    # message `regime` and the `timed_metric` whose time is one unit of the work the pattern models.
    communication: ClassVar[dict] = {"pattern": "none"}
    data_parallel: ClassVar[bool] = False  # replicas of one model, each on its share of the data
    task: ClassVar[str | None] = None  # the task its framework twins share (default: its name)

    def run(self, params, ctx) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def workload(cls, params) -> dict:
        """The facts of this workload for one run (its `scaling` parameter, where it has one, wins)."""
        scaling = getattr(params, "scaling", cls.scaling)
        if scaling not in SCALING_MODES:
            raise ValueError(f"{cls.name}: scaling {scaling!r}; valid: {', '.join(SCALING_MODES)}")
        return {"headline": cls.headline, "scaling": scaling, "communication": dict(cls.communication),
                "data_parallel": cls.data_parallel, "task": cls.task or cls.name}

    @classmethod
    def known_metrics(cls) -> tuple[str, ...]:
        """Its declared metrics and the energy ones any record may carry; () where it declares none."""
        if not cls.metric_names:
            return ()
        from exabench.energy.summary import ENERGY_METRICS, PER_JOULE
        return cls.metric_names + ENERGY_METRICS + (cls.headline + PER_JOULE,)

    @classmethod
    def has_metric(cls, name: str) -> bool:
        known = cls.known_metrics()
        return not known or any(name == k or (k.endswith(".*") and name.startswith(k[:-1]) and name != k[:-1])
                                for k in known)

    # -- parameters ---------------------------------------------------------
    @classmethod
    def param_fields(cls) -> dict[str, dataclasses.Field]:
        return dict(_param_fields(cls.Params))

    @classmethod
    def resolve_params(cls, preset: str, overrides: dict, file: str, where: str):
        """Defaults <- preset <- overrides, each key and value checked."""
        values = dict(cls.presets.get(preset, {}))
        values.update(overrides)
        fields = _param_fields(cls.Params)
        hints = _type_hints(cls.Params)
        for key, value in values.items():
            if key not in fields:
                raise ConfigError(file, f"{where}.{key}", value, f"parameters of '{cls.name}': " + ", ".join(fields),
                                  "is not a parameter")
            values[key] = _check_value(hints[key], fields[key], value, file, f"{where}.{key}")
        try:
            return cls.Params(**values)
        except ConfigError as exc:  # a parameter's own check (its __post_init__): name the user's file and entry
            raise ConfigError(file, f"{where}.{exc.key}", exc.value, exc.valid, exc.problem) from None


@functools.cache
def _param_fields(params_cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(params_cls)}


@functools.cache
def _type_hints(params_cls: type) -> dict:
    """The Params' annotations, evaluated once per class (a 10,000-run plan asked 12,500 times)."""
    return typing.get_type_hints(params_cls)


def _check_value(hint, fld: dataclasses.Field, value, file: str, key: str):
    meta = fld.metadata
    kind = hint if isinstance(hint, type) else typing.get_origin(hint)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if not ok:
        raise ConfigError(file, key, value, f"{getattr(kind, '__name__', kind)} ({meta.get('doc', '')})")
    if kind is float and not math.isfinite(value):  # NaN passes every bound below
        raise ConfigError(file, key, value, f"a finite float ({meta.get('doc', '')})")
    if meta.get("choices") and value not in meta["choices"]:
        raise ConfigError(file, key, value, "one of " + ", ".join(map(repr, meta["choices"])))
    if meta.get("minimum") is not None and value < meta["minimum"]:
        raise ConfigError(file, key, value, f">= {meta['minimum']} ({meta.get('doc', '')})")
    if meta.get("maximum") is not None and value > meta["maximum"]:
        raise ConfigError(file, key, value, f"<= {meta['maximum']} ({meta.get('doc', '')})")
    return value
