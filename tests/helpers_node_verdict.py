"""Synthetic every-node campaigns for the node verdict's tests: records laid out as the every-node
group jobs write them (exabench.campaign.node_jobs's plan), carrying only what the verdict reads."""

from __future__ import annotations

from exabench.analysis import node_verdict as nv
from exabench.campaign.node_groups import pair_rounds

NODES = [f"n{i:02d}" for i in range(1, 9)]
# A clean cluster's spread: each node's figure a few per cent off the median, deterministically.
WOBBLE = [1.00, 0.97, 1.03, 0.99, 1.02, 0.98, 1.01, 0.96]


def _record(run_id: str, bench: str, metric: str, value: float, unit: str, hib: bool = True, status: str = "ok"):
    return {"run_id": run_id, "benchmark": bench, "status": status, "error": None if status == "ok" else "boom",
            "metrics": {metric: {"value": value, "unit": unit, "samples": [], "higher_is_better": hib}} if status == "ok"
            else {}, "workload": {"headline": metric}}


def _campaign(slow_node=None, slow_link=None, down=(), failing=None, rounds=3):
    """(planned, records): STREAM and GEMM per node, ping-pong and allreduce per pair of `rounds` rounds."""
    planned, records = [], {}
    for i, node in enumerate(NODES):
        for bench, metric, unit, base in (("stream", "triad_gbs", "GB/s", 10.0), ("gemm", "tflops", "TFLOP/s", 0.1)):
            run_id = f"{bench}.tiny.n1r1t1.node-{node}"
            p = {"group": node, "kind": "node", "round": 0, "nodes": [node], "run_id": run_id,
                 "configuration": f"{bench}.tiny.n1r1t1", "benchmark": bench, "record": "-"}
            if node in down:
                p["status"] = f"{nv.DOWN} ({node}: down*)"
            else:
                value = base * WOBBLE[i] / (3 if node == slow_node else 1)
                records[run_id] = _record(run_id, bench, metric, value, unit,
                                          status="failed" if node == failing else "ok")
            planned.append(p)
    for r, pairs in enumerate(pair_rounds(NODES, rounds)):
        for a, b in pairs:
            for bench, metric in (("pingpong", "bandwidth"), ("allreduce", "busbw")):
                run_id = f"{bench}.tiny.n2r1t1.node-{a}..{b}"
                p = {"group": f"{a}..{b}", "kind": "pair", "round": r + 1, "nodes": [a, b], "run_id": run_id,
                     "configuration": f"{bench}.tiny.n2r1t1", "benchmark": bench, "record": "-"}
                if {a, b} & set(down):
                    p["status"] = f"{nv.DOWN} ({' '.join(n for n in (a, b) if n in down)}: down*)"
                else:
                    wobble = WOBBLE[NODES.index(a)] * WOBBLE[NODES.index(b)]
                    value = 0.2 * wobble / (8 if slow_link in (a, b) else 1) / (1.5 if slow_node in (a, b) else 1)
                    records[run_id] = _record(run_id, bench, metric, value, "GB/s")
                planned.append(p)
    return planned, records


def _stopped_by_n03(nodes, n03_error: str, exit_code: int = 1):
    """A campaign whose STREAM run on `nodes` was stopped by n03's failure in one launch across every node."""
    planned, records = _campaign()
    for node in nodes:
        records[f"stream.tiny.n1r1t1.node-{node}"].update(
            status="failed", metrics={}, error=f"not run: stopped with the launch across every node (exit {exit_code}) "
                                               "before this node's run recorded: node(s) n03 failed")
    records["stream.tiny.n1r1t1.node-n03"].update(status="failed", metrics={}, error=n03_error)
    return planned, records

