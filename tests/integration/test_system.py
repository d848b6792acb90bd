"""The system description in every record (exabench/records/system.py), checked against what this
machine reports through other tools (lscpu, uname, free, mpirun, nvidia-smi), and its place in the
record schema: every field present, null where unknown, never absent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from exabench.records import system
from exabench.records.record import SCHEMA, check_record, failed_record, now_iso


@pytest.fixture(scope="module")
def desc():
    return system.describe()


def _lscpu() -> dict[str, str]:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}).stdout
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


def test_every_field_is_present(desc):
    assert tuple(desc) == system.TOP_KEYS
    assert tuple(desc["cpu"]) == system.CPU_KEYS
    assert tuple(desc["gpus"]) == system.GPU_KEYS
    assert tuple(desc["os"]) == system.OS_KEYS
    assert tuple(desc["mpi"]) == system.MPI_KEYS
    assert tuple(desc["container"]) == system.CONTAINER_KEYS
    for nic in desc["network"]:
        assert set(nic) == {"name", "kind", "speed_mbps", "driver"}


@pytest.mark.skipif(shutil.which("lscpu") is None, reason="lscpu not installed")
def test_cpu_matches_lscpu(desc):
    ls = _lscpu()
    cpu = desc["cpu"]
    assert cpu["model"] == ls["Model name"]
    assert cpu["architecture"] == ls["Architecture"]
    assert cpu["sockets"] == int(ls["Socket(s)"])
    assert cpu["cores_per_socket"] == int(ls["Core(s) per socket"])
    assert cpu["threads_per_core"] == int(ls["Thread(s) per core"])
    assert cpu["threads"] == int(ls["CPU(s)"]) == os.cpu_count()
    assert cpu["cores"] == cpu["sockets"] * cpu["cores_per_socket"]
    if "NUMA node(s)" in ls:
        assert cpu["numa_nodes"] == int(ls["NUMA node(s)"])


def test_memory_kernel_and_distribution_match_the_machine(desc):
    free = subprocess.run(["free", "-b"], capture_output=True, text=True).stdout.splitlines()
    total = int(free[1].split()[1])
    assert desc["memory_gb"] == pytest.approx(total / 1e9, abs=0.01)
    assert desc["os"]["kernel"] == subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    with open("/etc/os-release") as f:
        assert f'"{desc["os"]["distribution"]}"' in f.read()


def test_network_lists_the_visible_interfaces(desc):
    names = sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    assert [n["name"] for n in desc["network"] if n["kind"] != "rdma"] == names


def test_gpus_match_nvidia_smi_or_are_none(desc):
    gpus = desc["gpus"]
    if shutil.which("nvidia-smi"):
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True).stdout.split("\n")
        names = [n.strip() for n in names if n.strip()]
        assert gpus["count"] == len(names) and gpus["model"] == names[0] and gpus["driver"]
        assert desc["sources"]["gpus"] == "nvidia-smi"
    elif shutil.which("rocm-smi") is None:
        assert gpus["count"] == 0 and gpus["model"] is None and gpus["driver"] is None
        assert desc["sources"]["gpus"] is None


def test_mpi_matches_mpirun_version(desc):
    if shutil.which("mpirun") is None:
        assert desc["mpi"] == {"implementation": None, "version": None, "library": None}
        return
    first = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    assert desc["mpi"]["library"] == first
    assert desc["mpi"]["version"] and desc["mpi"]["version"] in first


@pytest.mark.parametrize("text, implementation, version", [
    ("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/", "Open MPI", "4.1.4"),
    ("Open MPI v5.0.3, package: Open MPI builder, ident: 5.0.3, repo rev: v5.0.3", "Open MPI", "5.0.3"),
    ("MPICH Version:\t4.1.2\nMPICH Release date:\tWed Jun  7 15:22:45 CDT 2023", "MPICH", "4.1.2"),
    ("HYDRA build details:\n    Version:                                 4.0\n", "MPICH", "4.0"),
    ("MPI VERSION    : CRAY MPICH version 8.1.28.2 (ANL base 3.4a2)", "Cray MPICH", "8.1.28.2"),
    ("Intel(R) MPI Library 2021.10 for Linux* OS", "Intel MPI", "2021.10"),
    ("MVAPICH2 Version      :\t2.3.7", "MVAPICH", "2.3.7"),
    ("", None, None),
])
def test_mpi_strings_of_each_implementation(text, implementation, version):
    got = system.parse_mpi(text)
    assert (got["implementation"], got["version"]) == (implementation, version)


def test_frameworks_are_the_installed_versions(desc):
    from importlib import metadata
    import platform
    assert desc["frameworks"]["python"] == platform.python_version()
    assert desc["frameworks"]["numpy"] == metadata.version("numpy")
    assert "tensorflow" in desc["frameworks"]  # null when not installed, never absent


def test_fingerprint_follows_hardware_not_software(desc):
    other = json.loads(json.dumps(desc))
    other["os"]["kernel"] = "9.9.9"
    other["mpi"]["version"] = "99"
    assert system.fingerprint(other) == desc["fingerprint"]
    other["cpu"]["cores"] = (desc["cpu"]["cores"] or 1) * 2
    assert system.fingerprint(other) != desc["fingerprint"]


def test_every_record_carries_it_and_the_schema_holds_it(tmp_path):
    spec = {"run_id": "kmeans.tiny.n1r1t1", "benchmark": "kmeans", "suite": "s", "framework": "f",
            "campaign": "c", "preset": "tiny", "repeat": 1, "params": {}, "swept": {}, "site": "local",
            "layout": {"nodes": 1, "ranks_per_node": 1, "ranks": 1, "threads_per_rank": 1, "gpus_per_rank": 0},
            "launch_line": "x"}
    rec = failed_record(spec, "failed", "boom", now_iso(), now_iso())
    assert rec["schema"] == SCHEMA
    assert rec["provenance"]["system"] == system.system_description()
    check_record(rec, "r.json")
    del rec["provenance"]["system"]["gpus"]["driver"]  # absent, not null: refused
    with pytest.raises(ValueError, match="provenance.system.gpus"):
        check_record(rec, "r.json")
