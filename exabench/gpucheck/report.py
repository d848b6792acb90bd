"""gpu-check.md: each part's figure beside its published anchor, the machine and its software, and
what could not be run and why."""

from __future__ import annotations

from exabench.gpucheck.anchors import Anchor, link_bandwidth, peak_tflops, resnet50_images_per_s
from exabench.gpucheck.plan import Part
from exabench.markdown import table


def _figure(part: Part, record: dict) -> tuple[str, float | None, str]:
    """(metric name, value, unit) a part is judged by."""
    metrics = record.get("metrics") or {}
    if part.benchmark in ("resnet50", "bare"):
        name = "throughput_per_device"
    elif part.benchmark == "allreduce":
        name = "busbw" if part.ranks > 1 else "latency_small"
    elif part.benchmark in ("cosmoflow", "deepcam"):
        name = "throughput"
    else:
        name = "tflops"
    m = metrics.get(name)
    return (name, m["value"], m["unit"]) if m else (name, None, "")


def _anchor(part: Part, info: dict) -> Anchor | None:
    name = str(info.get("name", ""))
    precision = part.params.get("precision", "fp32")
    if part.benchmark == "resnet50" and part.ranks == 1:
        return resnet50_images_per_s(name, precision)
    if part.benchmark in ("gemm", "conv", "rnn"):
        return peak_tflops(name, precision)
    if part.benchmark == "allreduce" and part.ranks > 1:
        return link_bandwidth(info.get("links") or {})
    return None


def _mlperf_verdict(record: dict) -> str:
    for check in record.get("checks") or []:
        if check["name"] == "mlperf_compliance":
            return "compliance checker passed" if check["passed"] else "compliance checker FAILED"
    return ""


def _number(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def rows(results: list[tuple[Part, dict, float]], info: dict) -> list[list[str]]:
    out = []
    single = {p.key: r for p, r, _ in results}
    for part, record, seconds in results:
        metric, value, unit = _figure(part, record)
        anchor = _anchor(part, info) if record["status"] == "ok" else None
        ratio = f"{value / anchor.value:.2f}" if anchor and value else "-"
        note = _mlperf_verdict(record)
        if part.benchmark == "allreduce" and record["status"] == "ok":
            note = _allreduce_methods(record)
        if part.key.startswith("ddp") and value:
            one = single.get("resnet50-fp16-nhwc")
            base = _figure(part, one)[1] if one and one["status"] == "ok" else None
            if base:
                note = f"per-GPU {value / base:.2f} of the 1-GPU fp16 channels-last run"
        if record["status"] != "ok":
            note = (record.get("error") or "")[:300].replace("|", "/").replace("\n", " ")
        out.append([part.key, part.what, record["status"],
                    f"{_number(value)} {unit}".strip() if value is not None else "-", metric,
                    f"{_number(anchor.value)} {anchor.unit}" if anchor else "no anchor", ratio,
                    f"{seconds:.0f} / {record.get('budget_s', part.timeout_s)}", anchor.source if anchor else "", note])
    return out


def _allreduce_methods(record: dict) -> str:
    """The smallest message's time by each method the record holds, the method named."""
    m = record.get("metrics") or {}
    parts = [f"{label} {m[key]['value']:.3g} us" for key, label in
             (("latency_small", "per op"), ("latency_small_b2b", "back to back (nccl-tests)"),
              ("latency_small_graph", "CUDA graph")) if key in m]
    info = record.get("info") or {}
    if "latency_small_graph" not in m and info.get("cuda_graph"):
        parts.append(f"no graph figure: {info['cuda_graph']}")
    if info.get("one_rank_note"):
        parts.append(info["one_rank_note"])
    return "; ".join(parts)


def overhead_rows(results: list[tuple[Part, dict, float]]) -> list[list[str]]:
    """Per ResNet-50 part with a bare twin that ran: exabench's images/s, the bare loop's, the ratio."""
    by_key = {p.key: (p, r) for p, r, _ in results}
    out = []
    for key, (part, record) in by_key.items():
        if part.benchmark != "resnet50" or part.ranks != 1:
            continue
        twin = by_key.get("bare-" + key.removeprefix("resnet50-"))
        mine = _figure(part, record)[1] if record["status"] == "ok" else None
        theirs = _figure(*twin)[1] if twin and twin[1]["status"] == "ok" else None
        ratio = f"{mine / theirs:.2f}" if mine and theirs else "-"
        out.append([key, _number(mine), _number(theirs), ratio])
    return out


def write(results: list[tuple[Part, dict, float]], skipped: list[tuple[Part, str]], info: dict, rehearsal: bool,
          bound_s: float | None = None, elapsed_s: float | None = None) -> str:
    """The report's Markdown text."""
    lines = ["# GPU check", ""]
    if bound_s is not None and elapsed_s is not None:
        lines += [f"The whole check took {elapsed_s:.0f} s of its {bound_s:g} s bound.", ""]
    if rehearsal:
        lines += ["**CPU rehearsal: the plan ran at tiny size on the CPU. These are not GPU figures and the "
                  "ratios mean nothing; only the code path was exercised.**", ""]
    lines += table(["machine", ""], [
        ["GPU", f"{info.get('gpus')} x {info.get('name', '-')}" + (" (assumed)" if info.get("assumed") else "")],
        ["compute capability", info.get("capability", "-")], ["memory per GPU (GiB)", info.get("memory_GiB", "-")],
        ["driver", info.get("driver", "-")], ["CUDA (torch build)", info.get("cuda", "-")],
        ["cuDNN", info.get("cudnn", "-")], ["NCCL", info.get("nccl", "-")], ["torch", info.get("torch", "-")]])
    lines += ["", "## Figures", ""]
    lines += table(["part", "what", "status", "figure", "metric", "anchor", "ratio", "seconds / budget",
                    "anchor source", "note"], rows(results, info))
    overhead = overhead_rows(results)
    if overhead:
        lines += ["", "## Harness overhead: exabench / bare loop", "",
                  "The same ResNet-50 step in a bare PyTorch loop (exabench.gpucheck.bare), run right after each "
                  "ResNet-50 part: 1.00 means exabench adds nothing; the goal is 0.98 or more.", ""]
        lines += table(["part", "exabench (images/s)", "bare loop (images/s)", "exabench / bare"], overhead)
    not_run = [(p.key, why) for p, why in skipped]
    not_run += [(p.key, f"{r['status']}: see the note above") for p, r, _ in results if r["status"] != "ok"]
    lines += ["", "## Not run, or not ok", ""]
    lines += table(["part", "why"], not_run) if not_run else ["Every part ran and is ok."]
    lines += ["", "## Energy", ""] + table(["part", "timed region (J)", "average (W)", "per joule", "covers",
                                            "method", "or why none"], energy_rows(results))
    lines += ["", "Ratios: figure / anchor. ResNet-50 anchors are NVIDIA's per-GPU figures on real ImageNet "
              "through DALI; here the data are synthetic, so the input pipeline costs nothing. GEMM, convolution "
              "and LSTM anchors are datasheet peaks (the ratio is the fraction of peak). The allreduce anchor is "
              "GPU 0's link bandwidth as nvidia-smi reports it.", ""]
    return "\n".join(lines)


def energy_rows(results: list[tuple[Part, dict, float]]) -> list[list[str]]:
    """Each part's energy over its timed region, from its record (docs/energy.md), or why there is none."""
    out = []
    for part, record, _ in results:
        energy = record.get("energy") or {}
        timed = energy.get("timed") or {}
        metrics = record.get("metrics") or {}
        per_j = next((m for name, m in metrics.items() if name.endswith("_per_joule")), None)
        methods = sorted({s["method"] for s in energy.get("sources") or []})
        why = timed.get("reason") or energy.get("reason") or ("" if energy else "the record has no energy section")
        out.append([part.key, _number(timed.get("joules")), _number(timed.get("watts")),
                    f"{per_j['value']:.4g} {per_j['unit']}" if per_j else "-", "+".join(timed.get("covers") or []),
                    ", ".join(methods), why.replace("|", "/")])
    return out
