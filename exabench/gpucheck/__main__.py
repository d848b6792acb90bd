"""`python -m exabench.gpucheck`: plan, run and report the GPU check (scripts/gpu_check.sh runs it).

Exit codes: 0 every part run is ok (parts skipped, each named with why, do not fail it); 1 a part
failed or timed out; 2 bad arguments; 3 no GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from exabench.errors import ExabenchError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m exabench.gpucheck", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu-check", help="folder for the site, configs, runs and gpu-check.md")
    p.add_argument("--only", default="", help="comma-separated part names (or prefixes) to run; default all")
    p.add_argument("--dry-run", action="store_true", help="plan and print every run with its launch line; run nothing")
    p.add_argument("--assume-gpu", default="", metavar="NAME",
                   help="plan for this GPU (a torch device name, e.g. 'NVIDIA H100 80GB HBM3') instead of probing")
    p.add_argument("--gpus", type=int, default=1, help="GPU count with --assume-gpu")
    p.add_argument("--cpu-rehearsal", action="store_true",
                   help="run the plan at tiny size on the CPU (tests the code path; not GPU figures)")
    p.add_argument("--quick", action="store_true",
                   help="a few parts within 4 minutes, for a brief GPU loan (--only narrows them further)")
    p.add_argument("--bound", type=float, default=None, metavar="SECONDS",
                   help="stop starting parts that no longer fit in this many seconds (default 600; 240 with "
                        "--quick)")
    return p


def run_bare(part, rehearsal: bool) -> dict:
    """A bare-loop part, as a record-shaped dict the report reads."""
    from exabench.gpucheck import bare, plan
    a = plan.bare_params(part, rehearsal)
    out = bare.run(a["precision"], a["channels_last"], a["batch"], a["image_size"], a["warmup"], a["steps"],
                   a["device"], plan.budget_of(part, rehearsal))
    if "error" in out:
        status = "timeout" if out["error"].startswith("timeout") else "failed"
        return {"status": status, "error": out["error"], "metrics": {}}
    return {"status": "ok", "error": None, "info": out,
            "metrics": {"throughput_per_device": {"value": out["images_per_s"], "unit": "images/s"}}}


def _since_script_start() -> float:
    """Seconds since scripts/gpu_check.sh started (GPU_CHECK_STARTED, epoch seconds), else 0."""
    import os
    try:
        return max(0.0, time.time() - float(os.environ.get("GPU_CHECK_STARTED", "")))
    except ValueError:
        return 0.0


class _Refused(Exception):
    """A reason not to run, for stderr, with the exit status it gives."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def _machine(args) -> dict:
    """The GPUs probed here, or the ones --assume-gpu names (only for a dry run or a rehearsal)."""
    from exabench.gpucheck import probe

    if args.assume_gpu:
        if args.gpus < 1:
            raise _Refused(f"--gpus {args.gpus}: give at least 1")
        info = probe.assumed(args.assume_gpu, args.gpus)
    else:
        info = probe.probe()
        if not info["gpus"]:
            raise _Refused(f"no NVIDIA GPU here ({info['why']}; torch {info['torch']}). Run it on a GPU node "
                           "(docs/gpu-check.md), or give --assume-gpu NAME with --dry-run or --cpu-rehearsal.", 3)
    if info.get("assumed") and not (args.dry_run or args.cpu_rehearsal):
        raise _Refused("--assume-gpu plans for a GPU that is not probed; add --dry-run or --cpu-rehearsal")
    return info


def _chosen_parts(args, info: dict, out: Path) -> list[str]:
    """The --only prefixes (the --quick set within them), checked before anything is written under --out."""
    from exabench.gpucheck import plan

    only = [x.strip() for x in args.only.split(",") if x.strip()]
    names = [p.key for p in plan.parts(info["gpus"], info.get("name", ""))]
    unknown = [k for k in only if not any(n.startswith(k) for n in names)]
    if unknown:
        raise _Refused(f"--only {', '.join(map(repr, unknown))} matches no part; parts: {', '.join(names)}")
    if out.exists() and not out.is_dir():
        raise _Refused(f"--out {out} is a file; give a folder (it is created if missing)")
    if args.quick:
        only = [k for k in plan.QUICK_PARTS if not only or any(k.startswith(o) for o in only)] or ["(none)"]
    return only


def _print_plan(args, info: dict, out: Path, planned, skipped, bound: float, total: int) -> None:
    from exabench.gpucheck import plan

    print(f"gpu check on {info['gpus']} x {info.get('name')}: {len(planned)} runs, budgets {total} s in all; "
          f"bounded at {bound:g} s" + (" (parts that no longer fit are skipped, each named)" if total > bound else "")
          + (" (CPU rehearsal)" if args.cpu_rehearsal else ""))
    for part, run in planned:
        if run is None:
            a = plan.bare_params(part, args.cpu_rehearsal)
            print(f"  {part.key:<22} {plan.budget_of(part, args.cpu_rehearsal):>4} s  bare loop\n      python -m exabench.gpucheck.bare "
                  f"--precision {a['precision']}{' --channels-last' if a['channels_last'] else ''} "
                  f"--batch {a['batch']} --steps {a['steps']} --device {a['device']}")
            continue
        spec = json.loads((out / "results" / "runs" / run.run_id / "spec.json").read_text())
        print(f"  {part.key:<22} {run.timeout_s:>4} s  {run.run_id}\n      {spec['launch_line']}")
    for part, why in skipped:
        print(f"  {part.key:<22} skipped: {why}")


def _run_parts(args, out: Path, planned, skipped, bound: float, started: float) -> list:
    """Each part in turn, unless its budget no longer fits in the bound (then skipped, named)."""
    from exabench.execute import execute
    from exabench.gpucheck import plan

    results = []
    for part, run in planned:
        why = plan.left_for(part, time.monotonic() - started, bound, args.cpu_rehearsal)
        if why:
            print(f"  {part.key:<22} skipped: {why}", flush=True)
            skipped.append((part, why))
            continue
        t0 = time.monotonic()
        if run is None:
            record = run_bare(part, args.cpu_rehearsal)
        else:
            record = execute(out / "results" / "runs" / run.run_id / "spec.json")
        seconds = time.monotonic() - t0
        record = {**record, "budget_s": plan.budget_of(part, args.cpu_rehearsal)}
        print(f"  {part.key:<22} {record['status']:<8} {seconds:6.1f} s", flush=True)
        results.append((part, record, seconds))
    return results


def main(argv: list[str] | None = None) -> int:
    # The bound counts from the start of scripts/gpu_check.sh (its set-up is part of the check), or
    # from here: probing and planning are part of it.
    started = time.monotonic() - _since_script_start()
    args = build_parser().parse_args(argv)
    from exabench.gpucheck import plan, report
    from exabench.io import atomic_write_text

    out = Path(args.out)
    try:
        info = _machine(args)
        only = _chosen_parts(args, info, out)
        planned, skipped = plan.plan(info, out, only, rehearsal=args.cpu_rehearsal)
        if only and not planned and not skipped:
            names = ", ".join(p.key for p in plan.parts(info["gpus"], info.get("name", "")))
            raise _Refused(f"--only {args.only!r} matches no part; parts: {names}")
    except _Refused as exc:
        print(f"gpu check: {exc}", file=sys.stderr)
        return exc.status
    except ExabenchError as exc:
        print(f"gpu check: {exc}", file=sys.stderr)
        return 2
    bound = args.bound or (plan.QUICK_S if args.quick else plan.TOTAL_S)
    total = plan.budget_s([part for part, _ in planned], args.cpu_rehearsal)
    if args.cpu_rehearsal and not args.bound:  # a rehearsal's slow CPU start is not the GPU's: bound it on request
        bound = max(bound, total)
    _print_plan(args, info, out, planned, skipped, bound, total)
    if args.dry_run:
        return 0
    results = _run_parts(args, out, planned, skipped, bound, started)
    text = report.write(results, skipped, info, args.cpu_rehearsal, bound, time.monotonic() - started)
    atomic_write_text(out / "gpu-check.md", text)
    print(f"\nreport: {out / 'gpu-check.md'}")
    return 0 if all(r["status"] == "ok" for _, r, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
