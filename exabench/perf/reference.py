"""The published scaling reference (results/reference/published_scaling.yaml) with checked access:
every value is {value, source} and its source is listed in the file's `sources`. Validation and the
whole-machine projection read the model's machines and workloads from it."""

from __future__ import annotations

from pathlib import Path

import yaml

from exabench.errors import ConfigError, ExabenchError
from exabench.perf.alphabeta import Link, Machine, Workload

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference" / "published_scaling.yaml"
PROJECTED_BANNER = "PROJECTED by exabench's alpha-beta model (not measured)"


class Reference:
    """The reference file, with checked access: every value is {value, source} and its source exists."""

    def __init__(self, path: str | Path = REFERENCE):
        self.path = str(path)
        if not Path(path).is_file():  # the CLI's default is relative to the repository's root
            raise ExabenchError(f"{path}: no such file; valid: the published scaling reference, {REFERENCE} "
                                "(--reference names another)")
        with open(path) as f:
            self.data = yaml.safe_load(f)
        self.sources = self.data.get("sources") or {}
        for section in ("machines", "workloads", "cases"):
            if section not in self.data:
                raise ConfigError(self.path, section, None, "a mapping (see the file's header)", "is missing")

    def value(self, entry: dict, key: str, where: str):
        if key not in entry:
            raise ConfigError(self.path, f"{where}.{key}", None, "{value, source}", "is missing")
        item = entry[key]
        if not isinstance(item, dict) or "value" not in item or "source" not in item:
            raise ConfigError(self.path, f"{where}.{key}", item, "{value: ..., source: <key of sources>}")
        if item["source"] not in self.sources:
            raise ConfigError(self.path, f"{where}.{key}.source", item["source"], ", ".join(self.sources))
        return item["value"]

    def cited(self, entry: dict) -> list[str]:
        """Source keys of every {value, source} item of an entry, estimates marked with *."""
        out = []
        for item in entry.values():
            if isinstance(item, dict) and "source" in item:
                key = item["source"] + ("*" if item.get("estimate") else "")
                if key not in out:
                    out.append(key)
        return out

    def machine(self, name: str) -> Machine:
        m = self._entry("machines", name)
        w = f"machines.{name}"
        v = lambda k: self.value(m, k, w)  # noqa: E731
        return Machine(name, int(v("devices_per_node")),
                       Link(v("intra_alpha_us") * 1e-6, v("intra_bandwidth_GBps") * 1e9),
                       Link(v("inter_alpha_us") * 1e-6, v("inter_bandwidth_GBps") * 1e9), v("algorithm"),
                       self.value(m, "inter_algorithm", w) if "inter_algorithm" in m else "ring",
                       int(v("max_nodes")) if "max_nodes" in m else None)

    def workload(self, name: str) -> Workload:
        e = self._entry("workloads", name)
        w = f"workloads.{name}"
        return Workload(name, float(self.value(e, "gradient_bytes", w)),
                        float(self.value(e, "samples_per_s_per_device", w)),
                        int(self.value(e, "batch_per_device", w)), str(e.get("precision", "fp32")))

    def _entry(self, section: str, name: str) -> dict:
        entries = self.data[section]
        if name not in entries:
            raise ConfigError(self.path, f"{section}.{name}", name, ", ".join(entries), "is not defined")
        return entries[name]
