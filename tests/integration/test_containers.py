"""Containers: recipes parsed and linted with spython, pins checked against the project's,
generated Dockerfiles in sync, rendered exec lines per site profile, digest pinning, SIF
layout, and a real SIF build of the `cpu` stack by Snakemake without Apptainer (debootstrap +
chroot, mksquashfs, siftool) run with Charliecloud's ch-run, with the OCI image, enroot's
squashfs (what Pyxis runs) and podman-hpc's migrated store made from it by the rules, each by the
command docs/containers.md shows."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from helpers_containers import missing_tools_or_userns
from helpers_docs import run_documented

from exabench import __version__, containers
from exabench.containers.runtime import _literal_prefix
from exabench.config import validate
from exabench.errors import ConfigError
from exabench.execute import execute
from exabench.campaign.render import RunPaths, render_script, write_run_files
from exabench.campaign.plan import Run, expand
from exabench.records.record import provenance
from exabench.campaign.site import load_site, resolve_layout

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted(p.parent.name for p in (REPO / "profiles").glob("*/site.yaml"))
CONTAINER_PROFILES = [n for n in PROFILES
                      if load_site(REPO / "profiles" / n / "site.yaml").container.get("runtime", "none") != "none"]
ROOT = Path("/scratch/exabench/results")
GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


def project_pins() -> dict[str, str]:
    pins = {}
    for name in ("requirements.lock", "requirements.txt"):
        for line in (REPO / name).read_text().splitlines():
            m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line.strip())
            if m:
                pins[containers.normalise(m.group(1))] = m.group(2)
    return pins


# --- recipes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", containers.STACKS)
def test_recipe_parses_with_spython_and_lints_clean(stack):
    rec = containers.parse_recipe(containers.recipe_path(stack))
    assert containers.lint_recipe(rec.path) == []
    assert rec.stack == stack and rec.labels["org.exabench.version"] == __version__
    assert ("exabench", "/opt/exabench/exabench") in rec.files
    assert rec.environment["PYTHONPATH"] == "/opt/exabench"
    assert {"base", "core", "check"} <= set(rec.layers)
    assert rec.commands(("check",)) and all("import exabench" in c or "-m exabench.containers verify-gpu-arch" in c
                                            for c in rec.commands(("check",)))


@pytest.mark.parametrize("stack", containers.STACKS)
def test_recipe_pins_match_the_projects_pins(stack):
    rec = containers.parse_recipe(containers.recipe_path(stack))
    if "org.exabench.legacy" in rec.labels:  # an older release on purpose: its labels match its own pins (lint)
        assert rec.labels["org.exabench.torch"].split("+")[0] != project_pins()["torch"]
        assert containers.lint_recipe(rec.path) == []
        return
    pins, project = rec.pins(), project_pins()
    project.setdefault("tensorflow", project["tensorflow-cpu"])  # the CUDA stack's name for the same release
    checked = {name: ver for name, ver in pins.items() if name in project}
    assert {"numpy", "mpi4py", "pyyaml", "jsonschema"} <= set(checked)
    assert {n: (v, project[n]) for n, v in checked.items() if v != project[n]} == {}
    for pkg in ("torch", "torchvision", "tensorflow", "mpi4py"):
        label = rec.labels.get(f"org.exabench.{pkg}")
        assert label in ("none", project[pkg]), f"{stack}: label {pkg}={label}, project pins {project[pkg]}"


@pytest.mark.parametrize("stack", containers.STACKS)
def test_generated_dockerfile_matches_the_recipe(stack):
    committed = containers.dockerfile_path(stack).read_text()
    assert committed == containers.dockerfile(containers.recipe_path(stack)), \
        "regenerate with: python -m exabench.containers dockerfiles"
    rec = containers.parse_recipe(containers.recipe_path(stack))
    runs = [line[4:] for line in committed.splitlines() if line.startswith("RUN ")]
    assert runs == rec.commands()  # one RUN per %post command, same order, nothing lost
    assert f"FROM {rec.base} " in committed


def test_the_documented_dockerfiles_command_writes_the_committed_dockerfiles(tmp_path):
    """`python -m exabench.containers dockerfiles` as docs/containers.md shows it, in a copy of the package
    and the recipes (`python -m` imports the package of the folder it starts in, so the checkout's own
    Dockerfiles are not touched): it writes every stack's Dockerfile, each the committed one."""
    shutil.copytree(REPO / "exabench", tmp_path / "exabench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "containers", tmp_path / "containers", ignore=shutil.ignore_patterns("*.Dockerfile"))
    res = run_documented("python -m exabench.containers dockerfiles", cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == [f"containers/{stack}.Dockerfile" for stack in containers.STACKS]
    for stack in containers.STACKS:
        written = (tmp_path / "containers" / f"{stack}.Dockerfile").read_text()
        assert written == containers.dockerfile_path(stack).read_text(), \
            f"{stack}: regenerate with: python -m exabench.containers dockerfiles"


def test_lint_names_each_problem(tmp_path):
    bad = tmp_path / "cpu.def"
    bad.write_text("Bootstrap: docker\nFrom: debian:latest\n\n%labels\n    org.exabench.stack cpu\n\n"
                   "%post\n    # exabench-layer: base\n    cd /opt\n    /opt/venv/bin/pip install numpy \\\n"
                   "        torch==2.14.1\n")
    problems = "\n".join(containers.lint_recipe(bad))
    assert "label org.exabench.version missing" in problems and "not pinned to a tag" in problems
    assert "'cd /opt' does not stand alone" in problems and "'numpy' is not pinned" in problems


# --- exec lines per site ---------------------------------------------------------------------

def _run(site, benchmark="resnet50", framework="pytorch"):
    return Run(run_id="probe", benchmark=benchmark, suite="x", framework=framework, preset="tiny", params={},
               layout=resolve_layout(site, nodes=1), timeout_s=600)


def _exec_argv(line: str, runtime: str) -> list[str]:
    """The runtime's words and the program: from its command (a wrapper) or its first launcher option."""
    argv = shlex.split(line)
    word = {"apptainer": "apptainer", "singularity": "singularity", "podman-hpc": "podman-hpc",
            "shifter": "shifter", "charliecloud": "ch-run", "pyxis": "--container-image=",
            "cscs-edf": "--environment="}[runtime]
    return argv[next(i for i, w in enumerate(argv) if w == word or (word.endswith("=") and w.startswith(word))):]


def _mounts(opts: list[str]) -> set[str]:
    """The host paths a runtime's words mount (--bind=, --volume=, Pyxis' --container-mounts=a:a,b:b)."""
    out = {o.split("=", 1)[1].split(":")[0] for o in opts if o.startswith(("--bind=", "--volume="))}
    for o in opts:
        if o.startswith("--container-mounts="):
            out |= {m.split(":")[0] for m in o.split("=", 1)[1].split(",")}
    return out


def _env(opts: list[str]) -> dict[str, str]:
    """The variables a runtime's words set (--env=K=V, --set-env=K=V, or `env K=V ...` before the program)."""
    out = dict(o.split("=", 2)[1:] for o in opts if o.startswith(("--env=", "--set-env=")))
    if "env" in opts:
        out.update(w.split("=", 1) for w in opts[opts.index("env") + 1:])
    return out


@pytest.mark.parametrize("name", CONTAINER_PROFILES)
def test_rendered_exec_line_per_site(name):
    s = load_site(REPO / "profiles" / name / "site.yaml")
    c = s.container
    _, line = render_script(_run(s), s, RunPaths(ROOT / name, "probe"))
    argv = _exec_argv(line, c["runtime"])
    assert shlex.split(line)[0] == {"local": "python3"}.get(s.launcher, s.launcher)  # launcher outside
    assert argv[-5:] == ["python3", "-m", "exabench.runner", "--spec", f"{ROOT}/{name}/runs/probe/spec.json"]
    opts = argv[:-5]
    if c.get("gpu_flag"):
        modules = [m for o in opts if o.startswith("--module=") for m in o[9:].split(",")]  # Shifter's
        assert c["gpu_flag"] in opts or c["gpu_flag"].lstrip("-") in modules
    else:
        assert not {"--nv", "--rocm", "--gpu"} & set(opts)
    binds = _mounts(opts)
    assert f"{ROOT}/{name}" in binds and set(c.get("binds", [])) <= binds
    for key in ("pfs", "node_local"):
        if s.storage.get(key):
            assert _literal_prefix(s.storage[key]) in binds | {""}
    env = _env(opts)
    assert env["EXABENCH_CONTAINER_RUNTIME"] == c["runtime"] and env["EXABENCH_RUN_ID"] == "probe"
    assert env["OMP_NUM_THREADS"] == str(resolve_layout(s, nodes=1).threads_per_rank)
    assert all(env[k] == str(v) for k, v in c.get("env", {}).items())
    image = env["EXABENCH_CONTAINER_IMAGE"]
    assert image in argv or f"--image=docker:{image}" in argv or f"--container-image={image}" in argv
    if not c.get("image"):  # built from the recipes under results/<site>/images
        stack = {"amd": "pytorch-rocm", "nvidia": "pytorch-cuda"}.get(s.node.gpu_vendor, "cpu")
        stack = {"summit": "pytorch-cuda11-ppc64le"}.get(name, stack)  # POWER9 + V100: CUDA 11 on ppc64le
        assert image == f"{ROOT}/{name}/images/{stack}.sif" and env["EXABENCH_CONTAINER_STACK"] == stack


def _site_with(name: str, tmp_path, **node) -> "object":
    """A shipped site with node fields replaced (arch, gpu arch), written and loaded as a user's file."""
    import yaml
    raw = yaml.safe_load((REPO / "profiles" / name / "site.yaml").read_text())
    gpu = node.pop("gpu", None)
    raw["node"].update(node)
    if gpu:
        raw["node"]["gpu"] = {**raw["node"].get("gpu", {}), **gpu}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_site(path)


def test_each_site_gets_an_image_built_for_its_nodes(tmp_path):
    summit = load_site(REPO / "profiles/summit/site.yaml")
    assert (summit.node.arch, summit.node.gpu_arch) == ("ppc64le", "7.0")
    assert containers.stack_for(summit, "pytorch") == "pytorch-cuda11-ppc64le"
    assert containers.stack_for(summit, "tensorflow") == "pytorch-cuda11-ppc64le"  # Open-CE carries both
    assert containers.image_mismatch(summit, "pytorch-cuda") == (
        "it is built for x86_64, aarch64, the nodes are ppc64le; its framework ships GPU kernels for 7.5 8.0 8.6 "
        "9.0 10.0 12.0, not the nodes' 7.0 (Tesla V100-SXM2-16GB)")
    # V100 or K80 on x86_64 (BNL, Maverick): the CUDA 11 stack; Grace-Hopper (aarch64, 9.0): the current one.
    assert containers.stack_for(_site_with("polaris", tmp_path, gpu={"arch": "7.0"}), "pytorch") == "pytorch-cuda11"
    assert containers.stack_for(_site_with("polaris", tmp_path, gpu={"arch": "3.7"}), "pytorch") == "pytorch-cuda11"
    gh = _site_with("polaris", tmp_path, arch="aarch64", gpu={"arch": "9.0"})
    assert containers.stack_for(gh, "pytorch") == "pytorch-cuda" and containers.image_mismatch(gh, "pytorch-cuda") == ""
    # Ada (8.9) runs Ampere 8.6 kernels; TensorFlow's PTX for 9.0 runs on Blackwell.
    assert containers.gpu_arch_supported(["8.0", "8.6"], "8.9") and not containers.gpu_arch_supported(["8.6"], "9.0")
    assert containers.gpu_arch_supported(["9.0+"], "12.0") and containers.gpu_arch_supported(["gfx90a"], "gfx90a")
    assert not containers.gpu_arch_supported(["gfx90a", "gfx942"], "gfx908")


@pytest.mark.parametrize("node, stack, says", [
    ({"arch": "ppc64le"}, "pytorch-cuda", "built for x86_64, aarch64, the nodes are ppc64le"),
    ({"gpu": {"arch": "7.0"}}, "pytorch-cuda", "not the nodes' 7.0"),
    ({"gpu": {"arch": "3.5"}}, "pytorch-cuda11", "not the nodes' 3.5"),
    ({"arch": "aarch64"}, "tensorflow-cuda", "built for x86_64, the nodes are aarch64"),
])
def test_a_pinned_stack_that_cannot_run_stops_the_plan(tmp_path, node, stack, says):
    """A site that names its stack gets it or an error naming site file, image and mismatch, at plan time."""
    from exabench.campaign.plan import expand
    from exabench.config import validate
    from exabench.errors import ConfigError
    s = _site_with("polaris", tmp_path, **node)
    s = dataclasses.replace(s, container={**s.container, "stack": stack})
    config = validate({"benchmarks": [{"name": "tensorflow" in stack and "resnet50-keras" or "resnet50"}]},
                      "config", "c.yaml")
    with pytest.raises(ConfigError) as err:
        expand(config, s, "c.yaml")
    assert str(s.path) in str(err.value) and f"containers/{stack}.def" in str(err.value) and says in str(err.value)


def test_stack_follows_gpu_vendor_and_framework():
    polaris = load_site(REPO / "profiles/polaris/site.yaml")
    assert containers.stack_for(polaris, "tensorflow") == "tensorflow-cuda"
    assert containers.stack_for(polaris, "mpi4py-numpy") == "pytorch-cuda"
    assert containers.stack_for(load_site(REPO / "profiles/frontier/site.yaml"), "pytorch") == "pytorch-rocm"
    assert containers.stack_for(load_site(REPO / "profiles/theta/site.yaml"), "pytorch") == "cpu"


def test_local_profile_stays_native(tmp_path):
    s = load_site(REPO / "profiles/local/site.yaml")
    _, line = render_script(_run(s, "kmeans", "mpi4py-numpy"), s, RunPaths(tmp_path, "probe"))
    assert "apptainer" not in line and "EXABENCH_CONTAINER" not in line
    assert shlex.split(line)[-4:-2] == ["-m", "exabench.runner"]
    rec = provenance("a", "b", ["h"])
    assert rec["container"]["runtime"] is None and "numpy" in rec["packages"]


# --- digests ---------------------------------------------------------------------------------

def _pinned_site(tmp_path, image: Path, digest: str = ""):
    raw = yaml.safe_load((REPO / "profiles/polaris/site.yaml").read_text())
    raw["container"] = {**raw["container"], "image": str(image), "digest": digest}
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_site(path)


def test_pinned_digest_verified_and_mismatch_refused(tmp_path):
    image = tmp_path / "img.sif"
    image.write_bytes(b"pretend squashfs " * 1000)
    good = containers.file_digest(image)
    s = _pinned_site(tmp_path, image, good)
    _, line = render_script(_run(s), s, RunPaths(tmp_path / "r", "probe"))
    assert f"--env=EXABENCH_CONTAINER_DIGEST={good}" in line and "--env=EXABENCH_CONTAINER_VERIFIED=1" in line
    assert containers.recorded_digest(image) == good
    image.write_bytes(b"another image")  # changed after it was pinned
    os.utime(image, (image.stat().st_atime, containers.digest_file(image).stat().st_mtime + 5))
    with pytest.raises(containers.ContainerError, match=r"container.digest.*does not match .*refusing to run"):
        render_script(_run(s), s, RunPaths(tmp_path / "r", "probe"))


def test_image_changed_after_rendering_refuses_to_start(tmp_path):
    from exabench.execute import execute
    from exabench.campaign.render import write_run_files

    image = tmp_path / "img.sif"
    image.write_bytes(b"pretend squashfs " * 1000)
    s = _pinned_site(tmp_path, image, containers.file_digest(image))
    paths = RunPaths(tmp_path / "r", "probe")
    write_run_files(_run(s), s, paths)
    marker = tmp_path / "launched"
    paths.script.write_text(f"#!/usr/bin/env bash\ntouch {marker}\n")  # would show that the job started
    image.write_bytes(b"rebuilt image")  # replaced between rendering and the job's start
    os.utime(image, (image.stat().st_atime, containers.digest_file(image).stat().st_mtime + 5))
    rec = execute(paths.spec)
    assert rec["status"] == "failed" and "at job start" in rec["error"] and "refusing to run" in rec["error"]
    assert not marker.exists()


def test_uri_digest_must_agree_with_the_pin(tmp_path):
    d1, d2 = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    s = _pinned_site(tmp_path, Path("/x"), d2)
    s = dataclasses.replace(s, container={**s.container, "image": f"docker://reg.example/exabench/cpu@{d1}"})
    with pytest.raises(containers.ContainerError, match="does not match container.image"):
        render_script(_run(s), s, RunPaths(tmp_path / "r", "probe"))
    s = dataclasses.replace(s, container={**s.container, "digest": d1})
    _, line = render_script(_run(s), s, RunPaths(tmp_path / "r", "probe"))
    assert f"EXABENCH_CONTAINER_DIGEST={d1}" in line


def test_directory_digest_follows_content_not_times(tmp_path):
    img = tmp_path / "img"
    (img / "bin").mkdir(parents=True)
    (img / "bin" / "x").write_text("hello")
    (img / "lnk").symlink_to("bin/x")
    d = containers.directory_digest(img)
    os.utime(img / "bin" / "x", (0, 0))
    assert containers.directory_digest(img) == d
    (img / "bin" / "x").write_text("hellp")
    assert containers.directory_digest(img) != d


def test_provenance_reads_the_container_the_exec_line_named(monkeypatch):
    monkeypatch.setenv("EXABENCH_CONTAINER_RUNTIME", "apptainer")
    monkeypatch.setenv("EXABENCH_CONTAINER_IMAGE", "/i/cpu.sif")
    monkeypatch.setenv("EXABENCH_CONTAINER_DIGEST", "sha256:" + "c" * 64)
    monkeypatch.setenv("EXABENCH_CONTAINER_STACK", "cpu")
    monkeypatch.setenv("EXABENCH_CONTAINER_VERIFIED", "1")
    c = provenance("a", "b", ["h"])["container"]
    assert c == {"runtime": "apptainer", "image": "/i/cpu.sif", "stack": "cpu", "digest": "sha256:" + "c" * 64,
                 "digest_verified": True}


def test_build_command_and_snakemake_plan_images(tmp_path):
    s = load_site(REPO / "profiles/frontier/site.yaml")
    assert containers.build_argv(s, "pytorch-rocm", "/i/p.sif") == [
        "apptainer", "build", "--fakeroot", "--force", "/i/p.sif", str(REPO / "containers/pytorch-rocm.def")]
    raw = yaml.safe_load((REPO / "profiles/local/site.yaml").read_text())
    raw["container"] = {"runtime": "apptainer", "image_dir": str(tmp_path / "images")}
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(raw))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    smk = [sys.executable, "-m", "snakemake", "--profile", "profiles/local"]
    res = subprocess.run([*smk, "--config", f"site={tmp_path / 'site.yaml'}", "-n", "containers"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "container_image" in res.stdout and str(tmp_path / "images" / "cpu.sif") in res.stdout
    res = subprocess.run([*smk, "-n", "containers"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and "container_image" not in res.stdout  # native: nothing to build
    # A pyxis site without container.image: SIF -> OCI image -> enroot's squashfs, per stack its runs need.
    raw = yaml.safe_load((REPO / "profiles/dgx-superpod/site.yaml").read_text())
    raw["container"] = {"runtime": "pyxis", "image_dir": str(tmp_path / "images")}
    (tmp_path / "pyxis.yaml").write_text(yaml.safe_dump(raw))
    res = subprocess.run([*smk, "--config", f"site={tmp_path / 'pyxis.yaml'}", "-n", "containers"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    jobs = dict(re.findall(r"^(container_\w+)\s+(\d+)$", res.stdout, re.M))
    assert jobs == {"container_image": "2", "container_oci": "2", "container_sqsh": "2"}, res.stdout[-2000:]
    assert f"output: {tmp_path}/images/pytorch-cuda.sqsh, {tmp_path}/images/pytorch-cuda.sqsh.sha256" in res.stdout


# --- SIF layout (Apptainer's, read back) ---------------------------------------------------------

needs_sif_tools = pytest.mark.skipif(not (shutil.which("mksquashfs") and shutil.which("siftool")),
                                     reason="mksquashfs and siftool not installed (apt-get install -y "
                                            "squashfs-tools siftool)")


def _siftool(*args) -> str:
    return subprocess.run(["siftool", *args], check=True, capture_output=True, text=True, timeout=60).stdout


def _tiny_rootfs(root: Path) -> Path:
    """A root file system with the host's shell at /bin/sh the way Debian lays it out (usrmerge links)."""
    (root / "usr" / "bin").mkdir(parents=True)
    shutil.copy(os.path.realpath("/bin/sh"), root / "usr" / "bin" / "dash")
    (root / "usr" / "bin" / "sh").symlink_to("dash")
    (root / "bin").symlink_to("usr/bin")
    (root / "etc").mkdir()
    (root / "etc" / "resolv.conf").write_text("nameserver 10.0.0.1\n")  # the build host's: must not stay
    return root


@needs_sif_tools
def test_sif_has_apptainers_descriptors_and_metadata(tmp_path):
    import datetime as dt
    rec = containers.parse_recipe(containers.recipe_path("cpu"))
    root = _tiny_rootfs(tmp_path / "rootfs")
    arch = containers.rootfs_arch(root)
    assert arch == GO_ARCH[os.uname().machine]
    now = dt.datetime(2026, 3, 5, 7, 8, 9, tzinfo=dt.timezone.utc)
    labels = containers.build_labels(rec.labels, rec.header(), arch, now, ["base", "core"])
    definition = rec.definition(("base", "core"))
    meta = containers.write_singularity_dir(root, definition, rec.section("environment"), rec.section("runscript"),
                                            labels)
    sd = root / ".singularity.d"
    assert (sd / "Singularity").read_text() == definition and (root / "etc" / "resolv.conf").read_text() == ""
    assert (sd / "labels.json").read_text().startswith('{\n\t"org.exabench.arch": "x86_64",\n')  # Go's MarshalIndent
    assert json.loads((sd / "labels.json").read_text()) == labels
    assert labels["org.opencontainers.image.created"] == "2026-03-05T07:08:09Z"
    assert labels["org.label-schema.build-date"] == "Thursday_5_March_2026_7:8:9_UTC"
    assert labels["org.label-schema.usage.singularity.deffile.from"] == rec.base
    env = (sd / "env" / "90-environment.sh").read_text()
    assert env.startswith("#!/bin/sh\n")
    assert env.endswith("\n\nexport PATH=/opt/venv/bin:$PATH\nexport PYTHONPATH=/opt/exabench\n")
    assert os.readlink(root / "environment") == ".singularity.d/env/90-environment.sh"
    assert os.readlink(root / "singularity") == ".singularity.d/runscript"
    assert sorted(p.name for p in (sd / "env").iterdir()) == ["01-base.sh", "90-environment.sh", "99-base.sh"]
    assert meta == {"data": {"attributes": {
        "environment": {"/.singularity.d/env/90-environment.sh": env.rstrip("\n")}, "labels": labels,
        "runscript": '#!/bin/sh\n\nexec /opt/venv/bin/python -m exabench "$@"', "deffile": definition.rstrip("\n")}},
        "type": "container"}

    image = tmp_path / "images" / "t.sif"
    containers.assemble_sif(root, image, definition, meta, arch)
    sif = containers.read_sif(image)
    assert sif.launch_script == b"#!/usr/bin/env run-singularity\n" and sif.version == "01" and sif.arch == arch
    assert [(d.id, d.data_type, d.group, d.link, d.name) for d in sif.descriptors] == [
        (1, "deffile", 1, 0, ""), (2, "generic-json", 1, 0, "inspect-metadata.json"), (3, "partition", 1, 0, "")]
    part = sif.primary_partition()
    assert (part.fs_type, part.part_type, part.arch, part.offset % 4096) == ("squashfs", "primary-system", arch, 0)
    assert _siftool("dump", "1", str(image)) == definition
    assert json.loads(_siftool("dump", "2", str(image))) == meta
    # The partition is a squashfs of the root file system, extracted byte for byte.
    squashfs = containers.extract_partition(image, tmp_path / "t.squashfs")
    assert squashfs.stat().st_size == part.size
    listing = subprocess.run(["unsquashfs", "-l", str(squashfs)], capture_output=True, text=True, check=True).stdout
    assert "squashfs-root/.singularity.d/labels.json" in listing and "squashfs-root/usr/bin/dash" in listing
    assert [p.name for p in image.parent.iterdir()] == ["t.sif"]  # no temp files left beside it


def test_partial_definition_names_what_it_left_out():
    rec = containers.parse_recipe(containers.recipe_path("cpu"))
    assert rec.definition() == rec.path.read_text()
    partial = rec.definition(("base", "core", "check"))
    assert partial.splitlines()[0] == ("# exabench: built with %post layers base, core, check; left out: analytics, "
                                       "frameworks")
    assert "torch==" not in partial and "h5py==" not in partial and "mpi4py==4.1.2" in partial
    assert "%runscript" in partial and "org.exabench.torch 2.14.1" in partial
    with pytest.raises(ConfigError, match="%post layers"):
        rec.definition(("base", "gpu"))


@pytest.mark.skipif(shutil.which("apptainer") is not None, reason="apptainer is installed here")
def test_a_cuda_stack_without_apptainer_says_only_apptainer_builds_it(tmp_path):
    site = load_site(REPO / "profiles/polaris/site.yaml")
    with pytest.raises(containers.ContainerError, match="'apptainer' is not installed here") as caught:
        containers.build_image(site, "pytorch-cuda", tmp_path / "images" / "p.sif", tmp_path / "build.log")
    assert "a debian:bookworm-* base (this recipe's is nvidia/cuda:" in str(caught.value)
    assert not (tmp_path / "images").exists() and not (tmp_path / "build.log").exists()


def test_not_a_sif_file_is_named(tmp_path):
    bad = tmp_path / "x.sif"
    bad.write_bytes(b"\0" * 200)
    with pytest.raises(containers.ContainerError, match="x.sif.*is not a SIF file"):
        containers.read_sif(bad)


def test_unknown_build_layer_names_the_site_key(tmp_path):
    from exabench.containers.build import site_layers
    raw = yaml.safe_load((REPO / "profiles/local/site.yaml").read_text())
    raw["container"] = {"runtime": "apptainer", "layers": ["base", "cuda"]}
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(raw))
    rec = containers.parse_recipe(containers.recipe_path("cpu"))
    with pytest.raises(ConfigError, match=r"container.layers.*layers of cpu.def: base, core"):
        site_layers(load_site(tmp_path / "site.yaml"), rec)


# --- the real thing --------------------------------------------------------------------------

def _real_build_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (debootstrap and the chroot build of %post)"
    return missing_tools_or_userns({"debootstrap": "debootstrap", "mksquashfs": "squashfs-tools", "siftool": "siftool",
                                    "ch-run": "charliecloud-runtime", "unshare": "util-linux", "mpirun": "openmpi-bin"})


def _build_args(work: Path) -> tuple[str, ...]:
    """The real build's workflow, campaign and site (the local profile's site with runtime apptainer)."""
    return ("--snakefile", str(REPO / "Snakefile"), "--configfile", str(work / "config.yaml"), "--config",
            f"site={work / 'build-site.yaml'}")


@pytest.fixture(scope="module")
def real_cpu_images(tmp_path_factory):
    """One real build of containers/cpu.def for this module: Snakemake's container_image rule makes
    the SIF without Apptainer (the base, core and check layers: the frameworks layer, 5 GB of torch
    + TensorFlow, and analytics are left out here), and its container_oci rule the OCI image of the
    SIF's root file system. Yields (work folder, images folder, the site as a dict, the digests of
    the SIF and the OCI image as built: the SIF test changes the SIF afterwards)."""
    reason = _real_build_skip_reason() or missing_tools_or_userns({"umoci": "umoci", "unsquashfs": "squashfs-tools"})
    if reason:
        pytest.skip(reason)
    os.environ.setdefault("USER", "root")  # ch-run refuses to start without $USER
    work = tmp_path_factory.mktemp("real-cpu")
    images = Path(os.environ.get("EXABENCH_CI_IMAGE_DIR", work / "images"))
    raw = yaml.safe_load((REPO / "profiles/local/site.yaml").read_text())
    raw["node"]["cores_per_socket"] = 2
    raw["container"] = {"runtime": "apptainer", "image_dir": str(images), "layers": ["base", "core", "check"]}
    (work / "build-site.yaml").write_text(yaml.safe_dump(raw))
    (work / "config.yaml").write_text(yaml.safe_dump(
        {"timeout_s": 300, "benchmarks": [{"name": "kmeans", "preset": "tiny", "sweep": {"ranks_per_node": [2]}}]}))
    (work / "containers").symlink_to(REPO / "containers")  # the rule's input, relative to its directory
    (work / "profiles").symlink_to(REPO / "profiles")  # the documented commands' profiles/<site>
    # docs/containers.md's two commands: the SIFs the planned runs need, then their OCI images.
    for command, extra in (("snakemake --profile profiles/<site> containers", ("--forcerun", "container_image")),
                           ("snakemake --profile profiles/<site> oci_images", ())):
        res = run_documented(command, *_build_args(work), *extra, fill={"<site>": "local"}, cwd=work, timeout=1400)
        logs = work / "logs" / raw["name"] / "containers"
        assert res.returncode == 0, res.stderr[-2000:] + "".join(p.read_text()[-3000:] for p in logs.glob("*.log"))
    yield work, images, raw, {kind: containers.recorded_digest(images / f"cpu.{kind}") for kind in ("sif", "oci")}
    if "EXABENCH_CI_IMAGE_DIR" not in os.environ:
        shutil.rmtree(images, ignore_errors=True)  # about 500 MB; pytest keeps old tmp dirs


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_real_cpu_sif_built_by_snakemake_runs_kmeans_and_records_its_digest(tmp_path, real_cpu_images):
    """The SIF siftool reads back as Apptainer's layout; K-Means tiny runs on 2 ranks from its
    squashfs partition (host mpirun -> ch-run per rank); the record carries the SIF's digest."""
    work, images, raw, _ = real_cpu_images
    raw, sif = dict(raw), images / "cpu.sif"
    log = work / "logs" / raw["name"] / "containers" / "cpu.log"
    assert "apptainer is not installed here: building" in log.read_text()
    digest = containers.recorded_digest(sif)
    assert digest == containers.file_digest(sif)

    # What siftool, the format's reference tool, reads: Apptainer's three objects, in its order.
    listing = _siftool("list", str(sif)).splitlines()
    rows = [[cell.strip() for cell in line.split("|")] for line in listing if re.match(r"^\d+\s+\|", line)]
    arch = GO_ARCH[os.uname().machine]
    assert [(r[0], r[1], r[4]) for r in rows] == [("1", "1", "Def.FILE"), ("2", "1", "JSON.Generic"),
                                                  ("3", "1", f"FS (Squashfs/*System/{arch})")]
    info = _siftool("info", "3", str(sif))
    assert re.search(r"Filesystem Type:\s+Squashfs", info) and re.search(r"Partition Type:\s+\*System", info)
    assert re.search(rf"Architecture:\s+{arch}\b", info)
    assert re.search(rf"Primary Architecture:\s+{arch}\b", _siftool("header", str(sif)))
    definition = _siftool("dump", "1", str(sif))
    assert "From: debian:bookworm" in definition and "# exabench-layer: core" in definition
    assert "tensorflow-cpu" not in definition  # the definition says what was built: no frameworks layer
    layout = containers.read_sif(sif)
    assert layout.launch_script == b"#!/usr/bin/env run-singularity\n" and os.access(sif, os.X_OK)
    assert [d.name for d in layout.descriptors] == ["", "inspect-metadata.json", ""]
    metadata = json.loads(_siftool("dump", "2", str(sif)))["data"]["attributes"]
    assert metadata["deffile"] == definition.rstrip("\n")
    assert metadata["labels"]["org.exabench.stack"] == "cpu" and metadata["labels"]["org.exabench.layers"] == \
        "base,core,check"
    assert metadata["labels"]["org.label-schema.build-arch"] == arch
    assert "export PYTHONPATH=/opt/exabench" in metadata["environment"]["/.singularity.d/env/90-environment.sh"]

    # Run from the SIF: ch-run gets its squashfs partition; the record names the SIF and its digest.
    raw["container"] = {"runtime": "charliecloud", "image": str(sif), "digest": digest}
    (tmp_path / "run-site.yaml").write_text(yaml.safe_dump(raw))
    site = load_site(tmp_path / "run-site.yaml")
    config = validate({"timeout_s": 300, "benchmarks": [{"name": "kmeans", "preset": "tiny",
                                                         "sweep": {"ranks_per_node": [2]}}]}, "config", "c.yaml")
    [run] = expand(config, site, "c.yaml")
    paths = RunPaths(tmp_path / "results" / "ci", run.run_id)
    write_run_files(run, site, paths)
    line = json.loads(paths.spec.read_text())["launch_line"]
    assert shlex.split(line)[0] == "mpirun" and f"{sif}.squashfs" in shlex.split(line)
    record = execute(paths.spec)
    assert record["status"] == "ok", (record.get("error"), (paths.run_dir / "output.log").read_text()[-3000:])
    assert record["provenance"]["container"] == {"runtime": "charliecloud", "image": str(sif), "stack": "cpu",
                                                 "digest": digest, "digest_verified": True}
    # The image's own Python environment ran the benchmark, not the host's venv (which has torch).
    assert "torch" not in record["provenance"]["packages"] and record["provenance"]["packages"]["numpy"] == "2.4.6"
    assert record["layout"]["ranks"] == 2 and record["metrics"]

    # Its /.singularity.d/env scripts, sourced in order as Apptainer's action script does, set up its Python.
    out = subprocess.run(["ch-run", f"{sif}.squashfs", "--", "/.singularity.d/actions/exec", "sh", "-c",
                          'command -v python3; echo "$PYTHONPATH"'], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["/opt/venv/bin/python3", "/opt/exabench"], out.stderr

    # The same SIF, changed after it was pinned, is refused before anything runs.
    with open(sif, "ab") as f:
        f.write(b"x")
    with pytest.raises(containers.ContainerError, match="refusing to run"):
        write_run_files(run, site, paths)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_real_cpu_oci_image_runs_a_kmeans_campaign_and_its_records_carry_the_oci_digest(real_cpu_images):
    """The OCI image Snakemake made of the SIF's root file system: a Snakemake campaign (K-Means
    tiny, 2 ranks) on a site with `runtime: charliecloud` and the OCI image pinned by its digest;
    every rank runs in the root file system umoci unpacked from it, and the record and the tidy
    table name the OCI image, its digest and the runtime."""
    work, images, raw, built = real_cpu_images
    layout, digest = images / "cpu.oci", built["oci"]
    assert digest == containers.oci_digest(layout)
    manifest = json.loads((layout / "blobs/sha256" / digest.split(":")[1]).read_text())
    assert manifest["annotations"]["org.exabench.from-sif"] == built["sif"]
    config = json.loads((layout / "blobs/sha256" / manifest["config"]["digest"].split(":")[1]).read_text())
    assert config["config"]["Labels"]["org.exabench.layers"] == "base,core,check"
    assert "PYTHONPATH=/opt/exabench" in config["config"]["Env"]

    site = dict(raw, name="oci", container={"runtime": "charliecloud", "image": str(layout), "digest": digest,
                                             "env": {"OMPI_MCA_btl_vader_single_copy_mechanism": "none"}})
    (work / "oci-site.yaml").write_text(yaml.safe_dump(site))
    res = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--profile",
                          str(REPO / "profiles/local"), "results/oci/tables/results.csv", "--configfile",
                          str(work / "config.yaml"), "--config", f"site={work / 'oci-site.yaml'}"], cwd=work,
                         capture_output=True, text=True, timeout=800, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr[-3000:]
    [path] = (work / "results/oci/records").glob("*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "ok" and record["layout"]["ranks"] == 2 and record["metrics"]
    assert record["provenance"]["container"] == {"runtime": "charliecloud", "image": str(layout), "stack": "cpu",
                                                 "digest": digest, "digest_verified": True}
    assert "torch" not in record["provenance"]["packages"]  # the image's Python ran it, not the host's venv
    job = (work / "results/oci/runs" / record["run_id"] / "job.sh").read_text()
    assert f"{layout}.bundle/rootfs" in job
    table = pd.read_csv(work / "results/oci/tables/results.csv")
    assert table[["container_runtime", "container_image", "container_digest"]].drop_duplicates().values.tolist() \
        == [["charliecloud", str(layout), digest]]

    # `exabench reproduce` of the campaign's archive checks the image: this one, or it refuses.
    def exabench(*args):
        return subprocess.run([sys.executable, "-m", "exabench", *args], cwd=work, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    packed = exabench("archive", "--results", "results/oci", "--out", "oci.tar.gz", "--site", "oci-site.yaml")
    assert packed.returncode == 0, packed.stderr
    same = exabench("reproduce", "oci.tar.gz", "--out", "r1", "--image", str(layout))
    assert same.returncode == 0 and f"ran in: charliecloud cpu image {digest}: 1 run(s)" in same.stdout, same.stdout
    other = exabench("reproduce", "oci.tar.gz", "--out", "r2", "--image", str(images / "cpu.sif"))
    assert other.returncode == 1 and f"container differs: {record['run_id']}: ran image digest {digest}; the " \
        f"image {images / 'cpu.sif'} given to reproduce has sha256:" in other.stdout, other.stdout


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_cpu_sqsh_made_by_snakemake_from_the_oci_image_runs_the_images_exabench(
        real_cpu_images):
    """Enroot's squashfs of the cpu stack's OCI image (what a Pyxis site runs), made by Snakemake's
    container_sqsh rule from the module's OCI image (that rule only: the SIF test changed the SIF
    afterwards, which must not rebuild the OCI image): its sha256 recorded beside it, and the squashfs
    file itself run by ch-run (no unpacking): /etc/rc, with only /etc/environment's variables set, as
    enroot sets them, starts the image's python3, which imports the image's exabench."""
    work, images, raw, built = real_cpu_images
    sqsh, layout = images / "cpu.sqsh", images / "cpu.oci"
    res = run_documented("snakemake --profile profiles/<site> sqsh_images", *_build_args(work), "--allowed-rules",
                         "sqsh_images", "container_sqsh", fill={"<site>": "local"}, cwd=work, timeout=500)
    assert res.returncode == 0, res.stderr[-3000:]
    digest = containers.recorded_digest(sqsh)
    assert digest == containers.file_digest(sqsh) and containers.oci_digest(layout) == built["oci"]
    rc = subprocess.run(["unsquashfs", "-cat", str(sqsh), "etc/rc"], capture_output=True, text=True, check=True,
                        timeout=60).stdout
    assert rc.startswith(f"# enroot-provenance: oci:cpu:{__version__}@{built['oci']}\n"), rc[:300]
    # Made again from the same OCI digest, the same bytes: test_oci.py's small image proves it (each
    # conversion of this one costs about 25 s).

    (work / "sqsh-mount").mkdir()
    inside = ("set -a; . /etc/environment; set +a; exec /bin/sh /etc/rc python3 -c "
              "'import sys, exabench; print(sys.executable, exabench.__file__)'")
    out = subprocess.run(["ch-run", f"--mount={work / 'sqsh-mount'}", "--unset-env=*", str(sqsh), "--", "/bin/sh",
                          "-c", inside], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout) == (0, "/opt/venv/bin/python3 /opt/exabench/exabench/__init__.py\n"), \
        out.stderr[-2000:]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_cpu_podman_hpc_store_made_by_snakemake_from_the_oci_image_holds_its_root_file_system(
        real_cpu_images):
    """podman-hpc's migrated image store of the cpu stack's OCI image (what `podman-hpc run` reads from its
    SQUASH_DIR), made by Snakemake's container_podman_hpc rule from the module's OCI image (that rule only,
    as for the .sqsh): the image named as podman-hpc names it, the store's digest recorded beside it, and
    its squash holding the image's Python and exabench."""
    from exabench.containers.digests import directory_digest
    work, images, raw, built = real_cpu_images
    store = images / "cpu.podman-hpc"
    res = run_documented("snakemake --profile profiles/<site> podman_hpc_images", *_build_args(work),
                         "--allowed-rules", "podman_hpc_images", "container_podman_hpc", fill={"<site>": "local"},
                         cwd=work, timeout=500)
    assert res.returncode == 0, res.stderr[-3000:]
    # Snakemake leaves .snakemake_timestamp in a directory() output after the rule recorded the store's
    # digest: the digest leaves that marker out, so the folder as Snakemake leaves it keeps its digest.
    assert (store / ".snakemake_timestamp").exists()
    assert containers.recorded_digest(store) == directory_digest(store)
    assert containers.oci_digest(images / "cpu.oci") == built["oci"]  # made from the module's OCI image
    [image] = json.loads((store / "overlay-images/images.json").read_text())
    assert image["names"] == [f"localhost/exabench/cpu:{__version__}"], image["names"]
    [squash] = (store / "overlay/l").glob("*.squash")
    listing = subprocess.run(["unsquashfs", "-l", "-d", "", str(squash)], capture_output=True, text=True, check=True,
                             timeout=300).stdout.split()
    assert {"/opt/venv/bin/python3", "/opt/exabench/exabench/__init__.py"} <= set(listing)
