"""The result record (the one contract everything else reads), atomic writes and provenance."""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

from exabench import __version__
from exabench.errors import ExabenchError
from exabench.io import atomic_write_text

SCHEMA = "exabench.result/1"
# The layout fields every table keys runs by (the record's `layout` has these and more).
LAYOUT = ("nodes", "ranks_per_node", "threads_per_rank", "gpus_per_rank")
STATUSES = ("ok", "failed", "timeout", "skipped")
# What a table shows for a file in records/ that is not a valid record (never a record's own status).
CORRUPT = "corrupt"
# A run id's layout token (.n<nodes>r<ranks per node>t<threads>[g<gpus>][.rep<n>]).
_LAYOUT_IN_ID = re.compile(r"\.n(\d+)r(\d+)t(\d+)(?:g(\d+))?(?:\.rep(\d+))?$")

# The environment a record keeps is an allow-list of the variables that describe how a run ran:
# these names (thread counts, devices, the job's layout as the scheduler and launcher give it) ...
ENV_ALLOW = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
             "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "EXABENCH_RUN_ID", "EXABENCH_MAX_THREADS", "HOSTNAME",
             "SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_NTASKS", "SLURM_CPUS_PER_TASK",
             "SLURM_JOB_NUM_NODES", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_CPUS_ON_NODE",
             "SLURM_GPUS_PER_TASK", "SLURM_GPUS_PER_NODE", "SLURM_CPU_BIND", "SLURM_DISTRIBUTION",
             "SLURM_JOB_PARTITION", "SLURM_CLUSTER_NAME", "LSB_JOBID", "LSB_HOSTS", "LSB_MCPU_HOSTS",
             "LSB_DJOB_NUMPROC", "PBS_JOBID", "PBS_NUM_NODES", "PBS_NUM_PPN", "NCPUS", "COBALT_JOBID",
             "COBALT_JOBSIZE", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE",
             "MPI_LOCALNRANKS", "LMOD_FAMILY_COMPILER", "LOADEDMODULES"}
# ... and the tuning namespaces of the libraries a run's speed depends on. Launcher-internal
# variables (OMPI_MCA_orte_*, PMIX_*) are noise and may carry session keys: MPI tuning reaches a
# record through the site's `env`, which the run spec lists (allowed_env's `extra`).
ENV_ALLOW_PREFIXES = ("NCCL_", "UCX_", "FI_", "MPICH_", "HOROVOD_", "CUDA_", "HIP_", "MIOPEN_", "OMP_", "KMP_",
                      "GOMP_", "MKL_")
# Within those, a name that may hold a credential is withheld whatever the prefix or the allow-list
# says (NCCL_PASS, UCX_PASSPHRASE, CUDA_APIKEY, MPICH_PWD): a secret-looking word anywhere in the
# name (NCCL_IB_CRED, UCX_SESS_ID),
ENV_DENY = re.compile(r"PASS|PWD|SECRET|TOKEN|KEY|CRED|PRIVATE|AUTH|COOKIE|SESS|CERT|BEARER|JWT|CRYPT|CIPHER|VAULT",
                      re.I)
# or a part of the name (split at `_`, `-`, `.` and digits) that starts like one of these
# abbreviations, which are too short to look for inside words (FI_TOK, X_PRIV_2, UCX_SIGNATURE,
# NCCL_IB_OTP, FI_CXI_PIN, UCX_SIG). Withholding a harmless tuning variable costs its value only:
# the record still names it, as it names every variable it does not keep (environment_withheld).
ENV_DENY_PART = re.compile(r"(TOK|PRIV|SALT|NONCE|PSK|HMAC|SIG|OTP|PIN|PEM)", re.I)
PACKAGES = ("numpy", "torch", "torchvision", "tensorflow-cpu", "tensorflow", "mpi4py", "h5py", "pandas",
            "horovod", "snakemake", "scikit-learn")


class RecordError(ExabenchError, ValueError):
    """A file that is not a valid result record: names the file, the key and what is wrong."""


@functools.cache
def _schema() -> dict:
    """The record schema (package data: the runner reads it inside a container, no checkout around)."""
    from importlib import resources

    import yaml

    # libyaml's loader where PyYAML has it: every run's execution reads the schema (10x the pure-Python parse)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(resources.files("exabench.records").joinpath("record.schema.yaml").read_text(), Loader=loader)


@functools.cache
def _validator():
    """The authority on the schema, which also explains a failure (key, value, what is valid)."""
    import jsonschema

    return jsonschema.Draft202012Validator(_schema())


@functools.cache
def _fast_check():
    """The same schema compiled to Python (fastjsonschema, where installed: the host's tools have it,
    the images need not): about 30x faster than _validator, which reading 10,000 records for a table
    would spend 10 s in. Its keywords (type, const, enum, pattern, minLength, properties, required,
    items, additionalProperties) mean the same in its draft 7 as in 2020-12; tests/unit/test_record_check.py
    holds the two to the same verdicts. A record it refuses is judged, and explained, by _validator."""
    try:
        import fastjsonschema
    except ImportError:
        return None
    compiled = fastjsonschema.compile(_schema())

    def valid(record) -> bool:
        try:
            compiled(record)
            return True
        except fastjsonschema.JsonSchemaException:
            return False
    return valid


def check_record(record, path: str | Path) -> None:
    """Raise RecordError naming `path`, the first failing key and what is valid."""
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        got = record.get("schema") if isinstance(record, dict) else type(record).__name__
        raise RecordError(f"{path}: not an exabench result record (schema {got!r}, want {SCHEMA!r})")
    fast = _fast_check()
    error = None if fast is not None and fast(record) else \
        min(_validator().iter_errors(record), key=lambda e: list(e.absolute_path), default=None)
    if error is not None:
        from exabench.config import key_path
        shown = repr(error.instance)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise RecordError(f"{path}: key '{key_path(error.absolute_path)}' = {shown} is not a valid record "
                          f"field: {error.message} (schema: exabench/records/record.schema.yaml)")
    if record.get("status") == "ok":  # JSON's NaN and Infinity pass the schema's `number`
        for name, metric in sorted((record.get("metrics") or {}).items()):
            value = metric.get("value") if isinstance(metric, dict) else None
            if isinstance(value, float) and not math.isfinite(value):
                raise RecordError(f"{path}: key 'metrics.{name}.value' = {value!r} in a record with status 'ok'; "
                                  "valid: a finite number (a run that measured no number did not succeed)")


def write_record(record: dict, path: str | Path, archive_dir: str | Path | None = None) -> None:
    """Write the record atomically, once it is valid; also keep an append-only copy so no result is
    ever lost when a run is repeated (Snakemake removes a job's outputs before re-running it)."""
    text = json.dumps(record, indent=2, sort_keys=True, default=str) + "\n"
    check_record(json.loads(text), path)  # as a reader will see it
    atomic_write_text(path, text)
    if archive_dir:
        stamp = record.get("provenance", {}).get("end_time") or now_iso()
        name = re.sub(r"[^0-9A-Za-z]", "", stamp) + ".json"
        target = Path(archive_dir) / name
        if not target.exists():
            atomic_write_text(target, text)


# Folders whose files are named by their record's run id (records/<run_id>.json, records/nodes/...).
RECORD_FOLDERS = ("records", "nodes")


def error_dir(run_dir: Path) -> Path:
    """Where a run's ranks write their error files (rank<N>.txt), which a failed record's error quotes."""
    return Path(run_dir) / "errors"


def peek_record(path: str | Path) -> dict | None:
    """A record's content with its format and status checked but not the rest (about 15x cheaper
    than read_record, and no schema library to import: the progress line reads every planned record
    after each run, 10,000 of them in a large campaign); None for a file that is not a record of this
    format, or not one of the allowed statuses."""
    try:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, ValueError):  # missing, unreadable, torn or not UTF-8 (UnicodeDecodeError is a ValueError)
        return None
    if not isinstance(rec, dict) or rec.get("schema") != SCHEMA or rec.get("status") not in STATUSES:
        return None
    return rec


def record_status(path: str | Path) -> str | None:
    """peek_record's status."""
    rec = peek_record(path)
    return rec["status"] if rec else None


def read_record(path: str | Path, check_name: bool = True) -> dict:
    """The valid record in `path`, else RecordError naming the file and what is wrong: not readable,
    not JSON, the wrong shape, or (with `check_name`, in a campaign's records folder) a `run_id` that is
    not the file's name (a record under another run's name would be merged into that run's cell)."""
    try:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}; truncated?)") from None
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not UTF-8 text (a damaged or foreign file)") from None
    except OSError as exc:
        raise RecordError(f"{path}: not readable ({exc.strerror or exc})") from None
    check_record(rec, path)
    if check_name and Path(path).parent.name in RECORD_FOLDERS and rec["run_id"] != Path(path).stem:
        raise RecordError(f"{path}: run_id {rec['run_id']!r} does not match the file name (a record is "
                          f"written as records/<run_id>.json; this one belongs to another run or was renamed)")
    return rec


def corrupt_record(path: str | Path, error: Exception) -> dict:
    """What the tables show for a file that is not a valid record: a `corrupt` row under the run its
    file name names, with the file and the reason. Never written as a record. Its benchmark is the
    run id's first part and its layout the run id's layout token, until a plan entry fills them."""
    run_id = Path(path).stem
    m = _LAYOUT_IN_ID.search(run_id)
    nodes, rpn, threads, gpus, rep = (int(g or 0) for g in m.groups()) if m else (0, 0, 0, 0, 0)
    reason = str(error) if str(error).startswith(str(path)) else f"{path}: {error}"
    return {"run_id": run_id, "benchmark": run_id.split(".", 1)[0], "status": CORRUPT,
            "error": f"corrupt record {reason}; `exabench retry --results {Path(path).parent.parent}` sets it "
                     "aside (kept in attempts/) and the campaign's command then runs the run again",
            "metrics": {}, "params": {}, "swept": {}, "repeat": rep or 1, "corrupt_file": str(path),
            "layout": {"nodes": nodes, "ranks_per_node": rpn, "threads_per_rank": threads, "gpus_per_rank": gpus,
                       "ranks": nodes * rpn}}


def with_plan_entry(stub: dict, entry: dict | None, site: str | None = None) -> dict:
    """A corrupt row with what the plan knows of its run (benchmark, parameters, layout, workload),
    so it lands in its configuration's cell as a visible hole."""
    if not entry:
        return stub
    keep = ("run_id", "status", "error", "metrics", "corrupt_file")
    return {**{k: entry[k] for k in ("benchmark", "suite", "framework", "preset", "repeat", "params", "swept",
                                      "layout", "workload", "campaign") if k in entry},
            "site": site or entry.get("site") or stub.get("site", ""), **{k: stub[k] for k in keep}}


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def allowed_env(environ=None, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """The allow-listed variables (plus `extra` names, e.g. the site's own `env`), minus credentials."""
    return _sorted_env(environ, extra)[0]


def withheld_env(environ=None, extra: tuple[str, ...] = ()) -> list[str]:
    """The names, never the values, of every other variable (not allowed, or looking like a
    credential): a record says they were set, so that a reader comparing two runs sees that one had,
    say, OMPI_MCA_btl or a credential set and the other not."""
    return _sorted_env(environ, extra)[1]


def _sorted_env(environ, extra: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    environ = os.environ if environ is None else environ
    kept, withheld = {}, []
    for k, v in environ.items():
        if (k in ENV_ALLOW or k in extra or k.startswith(ENV_ALLOW_PREFIXES)) and not secret_like(k):
            kept[k] = v
        else:
            withheld.append(k)
    return dict(sorted(kept.items())), sorted(withheld)


def secret_like(name: str) -> bool:
    """A variable name that may hold a credential: never written to a record."""
    return bool(ENV_DENY.search(name)) or any(ENV_DENY_PART.match(part) for part in re.split(r"[_\-.0-9]+", name))


def git_state() -> dict:
    from exabench.config import REPO_ROOT
    try:
        commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip() != ""
        return {"commit": commit or None, "dirty": dirty if commit else None}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def package_versions() -> dict[str, str]:
    from importlib import metadata
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "cpu\t", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware() -> dict:
    hw = {"cpu_model": cpu_model(), "cpus": os.cpu_count(), "machine": platform.machine()}
    if hasattr(os, "getloadavg"):  # how busy the node was when the record was written (1, 5, 15 min)
        hw["load_average"] = [round(x, 2) for x in os.getloadavg()]
    torch = sys.modules.get("torch")  # only describe GPUs if the workload brought torch in
    if torch is not None and torch.cuda.is_available():
        hw["gpu_count"] = torch.cuda.device_count()
        hw["gpu_model"] = torch.cuda.get_device_name(0)
        hw["cuda"] = torch.version.cuda
        hw["hip"] = getattr(torch.version, "hip", None)
    else:
        hw["gpu_count"] = 0
    return hw


def _container_provenance() -> dict:
    # Inside an image the exec line set EXABENCH_CONTAINER_* (runtime, image, stack, digest).
    from exabench.containers import provenance_from_env
    return provenance_from_env() or {"runtime": None, "image": None, "digest": None}


def provenance(start_time: str, end_time: str, hosts: list[str], container: dict | None = None,
               env_names: tuple[str, ...] = (), run_env: dict | None = None) -> dict:
    """Where and with what a run ran. `run_env`: the run's own environment (the spec's `env`), for
    a record written outside the ranks (a failed or timed-out run), where os.environ lacks it."""
    from exabench.records.system import system_description
    environ = {**os.environ, **(run_env or {})}
    return {"exabench_version": __version__, "git": git_state(), "python": sys.version.split()[0],
            "container": container or _container_provenance(),
            "packages": package_versions(), "hosts": sorted(set(hosts)), "hardware": hardware(),
            "environment": allowed_env(environ, extra=env_names),
            "environment_withheld": withheld_env(environ, extra=env_names),
            "start_time": start_time, "end_time": end_time,
            "hostname": socket.gethostname(), "system": system_description()}


def base_record(spec: dict) -> dict:
    """The parts of a record known before the run: what was asked, where and how."""
    return {"schema": SCHEMA, "run_id": spec["run_id"], "benchmark": spec["benchmark"], "suite": spec["suite"],
            "framework": spec["framework"], "campaign": spec["campaign"], "preset": spec["preset"],
            "repeat": spec["repeat"], "params": spec["params"], "swept": spec["swept"], "site": spec["site"],
            "layout": {**spec["layout"], "launch_line": spec["launch_line"]}, "workload": spec.get("workload", {}),
            **({"resized": spec["resized"]} if spec.get("resized") else {})}


def failed_record(spec: dict, status: str, error: str, start_time: str, end_time: str) -> dict:
    assert status in STATUSES
    rec = base_record(spec)
    rec.update({"status": status, "error": error, "metrics": {}, "checks": [],
                "provenance": provenance(start_time, end_time, [socket.gethostname()], _pinned_container(spec),
                                         env_names=tuple(spec.get("env", {})), run_env=spec.get("env") or {})})
    return rec


def _pinned_container(spec: dict) -> dict | None:
    """The image a run written outside its ranks was rendered to run in (the spec's pin: runtime,
    image, digest), so a failed run's record names it too; None when it runs natively."""
    pin = spec.get("container")
    if not pin:
        return None
    return {"runtime": pin.get("runtime"), "image": pin.get("image"), "digest": pin.get("digest"),
            "digest_verified": False}


def record_paths(items) -> list[str]:
    """Record files named directly, or every *.json in a directory (its plan.json aside)."""
    out = []
    for item in items:
        p = Path(item)
        out += sorted(str(f) for f in p.glob("*.json") if f.name != "plan.json") if p.is_dir() else [str(p)]
    return out


def workload_of(rec: dict) -> dict:
    """The workload facts a record or plan entry carries (Benchmark.workload). A record written
    before records carried them gets the neutral ones: no headline, its `scaling` parameter or
    strong, its benchmark as its task, no communication pattern."""
    w = rec.get("workload") or {}
    return {"headline": w.get("headline"),
            "scaling": w.get("scaling") or (rec.get("params") or {}).get("scaling") or "strong",
            "communication": w.get("communication") or {}, "data_parallel": bool(w.get("data_parallel")),
            "task": w.get("task") or rec.get("benchmark")}


def headline_metric(rec: dict) -> str | None:
    """The figure a table shows for a run: its workload's headline where the run has it, else
    throughput, else its first metric by name."""
    metrics = rec.get("metrics") or {}
    want = workload_of(rec)["headline"]
    if want in metrics:
        return want
    if "throughput" in metrics:
        return "throughput"
    return min(metrics) if metrics else None

