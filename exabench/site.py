"""The site model: one machine's nodes, scheduler and launcher, and the resource
arithmetic that turns a request (nodes, ranks, threads, GPUs) into a layout that
fits a node, or an error naming the limit it breaks."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .config import load_and_validate
from .errors import ConfigError, LayoutError


@dataclass(frozen=True)
class NodeSpec:
    sockets: int
    cores_per_socket: int
    reserved_cores: int = 0
    smt: int = 1
    gpus: int = 0
    memory_gb: float = 0.0

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def usable_cores(self) -> int:
        return self.cores - self.reserved_cores


@dataclass(frozen=True)
class Site:
    name: str
    scheduler: str
    launcher: str
    node: NodeSpec
    max_nodes: int = 1
    python: str = "auto"
    env: dict = field(default_factory=dict)
    description: str = ""
    path: str = ""

    @property
    def python_executable(self) -> str:
        return sys.executable if self.python == "auto" else self.python


def _local_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load_site(path: str | Path) -> Site:
    path = str(path)
    raw = load_and_validate(path, "site")
    node = dict(raw["node"])
    if node["cores_per_socket"] == "auto":
        if raw["scheduler"] != "none":
            raise ConfigError(path, "node.cores_per_socket", "auto",
                              "an integer (auto is for sites with scheduler: none)")
        node["cores_per_socket"] = max(1, _local_cores() // node["sockets"])
    spec = NodeSpec(**node)
    if spec.reserved_cores >= spec.cores:
        raise ConfigError(path, "node.reserved_cores", spec.reserved_cores, f"fewer than the node's {spec.cores} cores")
    return Site(name=raw["name"], scheduler=raw["scheduler"], launcher=raw["launcher"], node=spec,
                max_nodes=raw["max_nodes"], python=raw["python"], env=dict(raw["env"]),
                description=raw["description"], path=path)


@dataclass(frozen=True)
class Layout:
    """How one run is spread over the machine."""

    nodes: int
    ranks_per_node: int
    threads_per_rank: int
    gpus_per_rank: int = 0

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    def to_dict(self) -> dict:
        return {**asdict(self), "ranks": self.ranks}


LAYOUT_KEYS = ("nodes", "ranks_per_node", "threads_per_rank", "gpus_per_rank")


def resolve_layout(site: Site, nodes: int = 1, ranks_per_node: int | None = None,
                   threads_per_rank: int | None = None, gpus_per_rank: int | None = None) -> Layout:
    """Fill in defaults and check the request fits one node of the site.

    Defaults: one rank per GPU (or one per node without GPUs), the usable cores
    shared evenly between the ranks of a node, so ranks never oversubscribe cores.
    """
    n = site.node
    if ranks_per_node is None:
        ranks_per_node = max(1, n.gpus) if gpus_per_rank is None else max(1, n.gpus // max(1, gpus_per_rank))
    if gpus_per_rank is None:
        gpus_per_rank = n.gpus // ranks_per_node if n.gpus else 0
    if threads_per_rank is None:
        threads_per_rank = max(1, n.usable_cores // ranks_per_node)
    if nodes < 1 or nodes > site.max_nodes:
        raise LayoutError(site.name, "nodes", nodes, f"1 to max_nodes = {site.max_nodes}")
    if ranks_per_node < 1:
        raise LayoutError(site.name, "ranks_per_node", ranks_per_node, "at least 1")
    hw_threads = n.usable_cores * n.smt
    if ranks_per_node * threads_per_rank > hw_threads:
        raise LayoutError(site.name, "ranks_per_node x threads_per_rank", ranks_per_node * threads_per_rank,
                          f"{hw_threads} hardware threads per node ({n.usable_cores} usable cores x SMT {n.smt})")
    if gpus_per_rank * ranks_per_node > n.gpus:
        raise LayoutError(site.name, "ranks_per_node x gpus_per_rank", ranks_per_node * gpus_per_rank,
                          f"{n.gpus} GPUs per node")
    return Layout(nodes, ranks_per_node, threads_per_rank, gpus_per_rank)
