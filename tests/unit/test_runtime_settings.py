"""A wrong container setting is caught before anything is submitted, in one line naming the site
file, the key, the value and what the site's runtime takes: a runtime that does not exist, a GPU
flag or launcher the runtime lacks, an image in a form it cannot run or none where exabench builds
none, a local image or environment file that is missing, an environment file that does not mount
the results, a bind that is not absolute; and a bind's source missing on the nodes at job start,
before any rank runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exabench.campaign.plan import Run
from exabench.campaign.render import RunPaths, render_script, write_run_files
from exabench.campaign.site import load_site, resolve_layout
from exabench.errors import ConfigError, ContainerError
from exabench.execute import execute
from helpers_sites import write_site_with

PYXIS_IMAGE = "/lustre/fsw/exabench/images/exabench-pytorch-cuda-0.1.0.sqsh"


def _load(tmp_path, base="dgx-superpod", **container):
    path = write_site_with(tmp_path, base, container=container)
    return path, (lambda: load_site(path))


def _run(site):
    return Run(run_id="probe", benchmark="resnet50", suite="x", framework="pytorch", preset="tiny", params={},
               layout=resolve_layout(site, nodes=1), timeout_s=600)


def _refusal(tmp_path, base="dgx-superpod", **container) -> str:
    path, load = _load(tmp_path, base, **container)
    with pytest.raises(ConfigError) as err:
        load()
    assert str(path) in str(err.value)
    return str(err.value).split(": ", 1)[1]


def test_a_gpu_flag_the_runtime_lacks_is_named_with_the_ones_it_has(tmp_path):
    assert _refusal(tmp_path, runtime="pyxis", image=PYXIS_IMAGE, gpu_flag="--nv") == (
        "key 'container.gpu_flag' = '--nv' is not a flag pyxis has; valid: '' (none) with container.runtime pyxis")
    assert _refusal(tmp_path, "perlmutter", runtime="podman-hpc", image="localhost/x:1", gpu_flag="--rocm") == (
        "key 'container.gpu_flag' = '--rocm' is not a flag podman-hpc has; valid: '' (none), '--gpu' with "
        "container.runtime podman-hpc")


def test_a_runtime_that_does_not_exist_is_refused_listing_those_that_do(tmp_path):
    assert _refusal(tmp_path, runtime="enroot", image=PYXIS_IMAGE) == (
        "key 'container.runtime' = 'enroot' is not valid; valid: none, apptainer, charliecloud, cscs-edf, docker, "
        "podman-hpc, pyxis, shifter, singularity")


def test_an_image_the_runtime_cannot_run_or_none_at_all_is_refused(tmp_path):
    assert _refusal(tmp_path, runtime="pyxis", image="/lustre/images/pytorch.sif") == (
        "key 'container.image' = '/lustre/images/pytorch.sif' is not an image pyxis runs; valid: a squashfs file "
        "from `enroot import` or rule container_sqsh (/path/x.sqsh) or an enroot URI "
        "(nvcr.io#nvidia/pytorch:24.01-py3): an absolute path ending .sqsh or .squashfs")
    assert _refusal(tmp_path, runtime="cscs-edf", image="pytorch") == (
        "key 'container.image' = 'pytorch' is not an image cscs-edf runs; valid: an environment definition "
        "file (/path/env.toml) naming the image: an absolute path ending .toml")
    assert _refusal(tmp_path, "perlmutter", runtime="shifter", gpu_flag="--gpu") == (
        "key 'container.image' = '' is empty, and exabench builds no image shifter runs; valid: the image "
        "shifter runs: a pulled image, type:name:tag (docker:name:tag; a bare name:tag is docker:)")
    assert _refusal(tmp_path, "perlmutter", runtime="podman-hpc", gpu_flag="--gpu", image="/images/cpu.sif") == (
        "key 'container.image' = '/images/cpu.sif' is not an image podman-hpc runs; valid: an image migrated with "
        "`podman-hpc migrate`, by name (localhost/name:tag), or the store rule container_podman_hpc makes "
        "(/path/<stack>.podman-hpc): an absolute path ending .podman-hpc")
    _, load = _load(tmp_path, runtime="pyxis", image="nvcr.io#nvidia/pytorch:24.01-py3")  # an enroot URI is fine
    assert load().container["image"] == "nvcr.io#nvidia/pytorch:24.01-py3"


def test_a_launcher_the_runtime_cannot_ride_on_is_refused(tmp_path):
    assert _refusal(tmp_path, "polaris", runtime="pyxis", image=PYXIS_IMAGE) == (
        "key 'launcher' = 'mpiexec' cannot start it; valid: srun with container.runtime pyxis (its container: "
        "launcher options; its image: a squashfs file from `enroot import` or rule container_sqsh (/path/x.sqsh) or "
        "an enroot URI (nvcr.io#nvidia/pytorch:24.01-py3))")


def test_a_bind_that_is_not_an_absolute_path_is_refused(tmp_path):
    message = _refusal(tmp_path, runtime="pyxis", image=PYXIS_IMAGE, binds=["scratch"])
    assert message.startswith("key 'container.binds[0]' = 'scratch' ") and "valid:" in message


def test_a_missing_squashfs_image_stops_the_render_on_the_machine_that_has_its_folder(tmp_path):
    _, load = _load(tmp_path, runtime="pyxis", image=str(tmp_path / "pytorch.sqsh"))
    site = load()
    with pytest.raises(ContainerError) as err:
        render_script(_run(site), site, RunPaths(tmp_path / "results", "probe"))
    assert str(err.value) == (
        f"{tmp_path}/site.yaml: key 'container.image' = '{tmp_path}/pytorch.sqsh' does not exist; valid: a path that "
        "exists on the compute nodes (pyxis mounts or runs it; make it, or correct the site file)")
    (tmp_path / "pytorch.sqsh").write_bytes(b"hsqs")
    assert "--container-image=" in render_script(_run(site), site, RunPaths(tmp_path / "results", "probe"))[1]


def test_a_pyxis_site_without_an_image_runs_the_squashfs_the_rules_make_and_a_missing_one_is_named(tmp_path):
    from exabench.containers import build_argv, needed_images
    images = tmp_path / "images"
    _, load = _load(tmp_path, runtime="pyxis", image="", image_dir=str(images))
    site, results = load(), tmp_path / "results"
    sqsh = images / "pytorch-cuda.sqsh"
    assert needed_images(site, ["pytorch"], results) == [str(sqsh)]  # rule container_sqsh, from the SIF's OCI image
    assert build_argv(site, "pytorch-cuda", images / "pytorch-cuda.sif")[:2] == ["apptainer", "build"]
    # Not on this machine (a script rendered for the cluster): the line names it, as Pyxis takes it.
    assert f"--container-image={sqsh} " in render_script(_run(site), site, RunPaths(results, "probe"))[1]
    images.mkdir()
    with pytest.raises(ContainerError) as err:
        render_script(_run(site), site, RunPaths(results, "probe"))
    assert str(err.value) == (
        f"{tmp_path}/site.yaml: key 'container.image_dir' = '{images}' has no pytorch-cuda.sqsh for container.runtime "
        "pyxis; valid: a folder holding pytorch-cuda.sqsh, which rule container_sqsh makes from the stack's OCI image "
        "(`snakemake --profile profiles/dgx-superpod containers` builds the SIF, its OCI image and the .sqsh), or "
        "container.image naming one: a squashfs file from `enroot import` or rule container_sqsh (/path/x.sqsh) or "
        "an enroot URI (nvcr.io#nvidia/pytorch:24.01-py3)")
    sqsh.write_bytes(b"hsqs")
    (images / "pytorch-cuda.sqsh.sha256").write_text(f"sha256:{'a' * 64}  pytorch-cuda.sqsh\n")
    assert f"--container-image={sqsh} " in render_script(_run(site), site, RunPaths(results, "probe"))[1]


def test_a_podman_hpc_site_without_an_image_runs_the_store_the_rules_make_by_its_squash_dir(tmp_path):
    """podman-hpc's group option --squash-dir names the store rule container_podman_hpc makes (what
    `podman-hpc migrate` writes), and the image is the name its images.json gives it."""
    import json

    from exabench.containers import needed_images
    images = tmp_path / "images"
    _, load = _load(tmp_path, "perlmutter", runtime="podman-hpc", gpu_flag="--gpu", image="", image_dir=str(images))
    site, results = load(), tmp_path / "results"
    store = images / "pytorch-cuda.podman-hpc"
    assert needed_images(site, ["pytorch"], results) == [str(store)]
    # Rendered for the cluster (no store here): the name the rule gives the image.
    line = render_script(_run(site), site, RunPaths(results, "probe"))[1]
    assert f"podman-hpc --squash-dir {store} run --rm --gpu --mpi " in line
    assert " localhost/exabench/pytorch-cuda:0.1.0 python3 -m exabench.runner " in line, line
    images.mkdir()
    with pytest.raises(ContainerError) as err:  # its folder here, the store not built
        render_script(_run(site), site, RunPaths(results, "probe"))
    assert "has no pytorch-cuda.podman-hpc for container.runtime podman-hpc; valid: a folder holding " \
           "pytorch-cuda.podman-hpc, which rule container_podman_hpc makes" in str(err.value)
    (store / "overlay-images").mkdir(parents=True)
    (store / "overlay-images" / "images.json").write_text(json.dumps([{"id": "a" * 64,
                                                                        "names": ["localhost/exabench/gpu:0.2.0"]}]))
    (images / "pytorch-cuda.podman-hpc.sha256").write_text(f"sha256:{'a' * 64}  pytorch-cuda.podman-hpc\n")
    line = render_script(_run(site), site, RunPaths(results, "probe"))[1]
    assert f"podman-hpc --squash-dir {store} run --rm" in line and " localhost/exabench/gpu:0.2.0 " in line


def test_a_cscs_environment_file_must_mount_the_results(tmp_path):
    edf = tmp_path / "env.toml"
    edf.write_text('image = "/capstor/images/pytorch.sqsh"\nmounts = ["/capstor/scratch:/capstor/scratch"]\n')
    _, load = _load(tmp_path, runtime="cscs-edf", image=str(edf))
    site, results = load(), tmp_path / "results"
    with pytest.raises(ContainerError) as err:
        render_script(_run(site), site, RunPaths(results, "probe"))
    assert str(err.value) == (
        f"{tmp_path}/site.yaml: key 'container.image' = '{edf}' does not mount what the run needs; valid: an "
        f"environment file whose mounts include {results} (mounts = [\"{results}:{results}\", ...])")
    edf.write_text('image = "/capstor/images/pytorch.sqsh\n')  # an unclosed string: not TOML
    with pytest.raises(ContainerError, match=r"key 'container.image' = '.*env.toml' cannot be read \(.*\); valid: a "
                                             r"readable file: an environment definition file"):
        render_script(_run(site), site, RunPaths(results, "probe"))
    edf.write_text(f'image = "/capstor/images/pytorch.sqsh"\nmounts = ["{tmp_path}:{tmp_path}"]\n')
    assert f"--environment={edf}" in render_script(_run(site), site, RunPaths(results, "probe"))[1]


def test_a_bind_missing_on_the_nodes_fails_the_run_before_any_rank_starts(tmp_path):
    image = tmp_path / "pytorch.sqsh"
    image.write_bytes(b"hsqs")
    gone = tmp_path / "gone"
    _, load = _load(tmp_path, runtime="pyxis", image=str(image), binds=[str(gone)])
    site, paths = load(), RunPaths(tmp_path / "results", "probe")
    write_run_files(_run(site), site, paths)
    marker = tmp_path / "launched"
    paths.script.write_text(f"#!/usr/bin/env bash\ntouch {marker}\n")
    rec = execute(paths.spec)
    assert rec["status"] == "failed" and not marker.exists()
    assert rec["error"] == (f"{tmp_path}/site.yaml: key 'container.binds' = '{gone}' does not exist; valid: a path "
                            "that exists on the compute nodes (pyxis mounts or runs it; make it, or correct the site "
                            "file)")
