"""Golden launch lines, one per container runtime today's centres run, each on a site whose centre
documents it (the page named on each test): where the runtime sits in the line (a wrapper after the
launcher's options, or the launcher's own options), how the host's MPI and interconnect come in, the
GPU flag, the mounts and the image reference. Profiles are rendered as shipped; the variants
(Perlmutter with Shifter, Alps, Aurora with Apptainer) are site files under tests/data/sites/."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from exabench.campaign.plan import Run
from exabench.campaign.render import RunPaths, render_script
from exabench.campaign.site import load_site, resolve_layout
from helpers_sites import FIXED_ROOT, REPO

SPEC = "python3 -m exabench.runner --spec {root}/runs/probe/spec.json"


def rendered(site_file: str) -> tuple[str, str, str]:
    """(job script, launch line, results root) of a 2-node ResNet-50 run on the site."""
    s = load_site(REPO / site_file)
    run = Run(run_id="probe", benchmark="resnet50", suite="x", framework="pytorch", preset="tiny", params={},
              layout=resolve_layout(s, nodes=2), timeout_s=600)
    root = f"{FIXED_ROOT}/{s.name}"
    text, line = render_script(run, s, RunPaths(Path(root), "probe"))
    return text, line, root


def env_words(root: str, image: str, runtime: str, stack: str, threads: int, extra: dict | None = None) -> list[str]:
    env = {"EXABENCH_CONTAINER_DIGEST": "", "EXABENCH_CONTAINER_IMAGE": image, "EXABENCH_CONTAINER_RUNTIME": runtime,
           "EXABENCH_CONTAINER_STACK": stack, "EXABENCH_CONTAINER_VERIFIED": "0", "EXABENCH_RUN_ID": "probe",
           "MKL_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads), "OMP_PLACES": "cores",
           "OMP_PROC_BIND": "close", "OPENBLAS_NUM_THREADS": str(threads), **(extra or {})}
    return [f"{k}={v}" for k, v in sorted(env.items())]


def test_perlmutter_podman_hpc_wraps_the_program_with_gpu_and_mpi():
    # NERSC "Podman at NERSC" (docs.nersc.gov/development/containers/podman-hpc/overview/):
    # `srun -n 2 podman-hpc run --rm --mpi IMAGE program`; --gpu for the GPU nodes; the image is a
    # migrated one (`podman-hpc migrate`), named as podman names it.
    _, line, root = rendered("profiles/perlmutter/site.yaml")
    image = "localhost/exabench-pytorch-cuda:0.1.0"
    assert line == shlex.join(
        "srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --cpus-per-task=32 --cpu-bind=cores --gpus-per-task=1 "
        "--gpu-bind=closest podman-hpc run --rm --gpu --mpi".split()
        + [f"--volume={root}:{root}", "--volume=/pscratch:/pscratch"]
        + [f"--env={w}" for w in env_words(root, image, "podman-hpc", "pytorch-cuda", 16)]
        + [image] + SPEC.format(root=root).split())


def test_perlmutter_shifter_names_the_image_in_the_header_and_on_the_line():
    # NERSC "How to use Shifter" (docs.nersc.gov/development/containers/shifter/how-to-use/):
    # `#SBATCH --image=docker:image_name:latest`, `srun -n 64 shifter python3 ...`; `--module=gpu`
    # for the GPU libraries and `--module=mpich` for the host's Cray MPICH.
    text, line, root = rendered("tests/data/sites/perlmutter-shifter.yaml")
    image = "docker:registry.nersc.gov/exabench/pytorch-cuda:0.1.0"
    assert f"#SBATCH --image={image}\n" in text
    assert line == shlex.join(
        "srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --cpus-per-task=32 --cpu-bind=cores --gpus-per-task=1 "
        "--gpu-bind=closest shifter".split()
        + [f"--image={image}", "--module=gpu,mpich", f"--volume={root}:{root}", "--volume=/pscratch:/pscratch"]
        + [f"--env={w}" for w in env_words(root, image, "shifter", "pytorch-cuda", 16)]
        + SPEC.format(root=root).split())


def test_dgx_superpod_pyxis_is_srun_options_with_pmix():
    # NVIDIA pyxis wiki "Usage" (github.com/NVIDIA/pyxis/wiki/Usage): srun's own
    # `--container-image=PATH` (a squashfs from `enroot import`) and `--container-mounts=SRC:DST[,...]`;
    # pyxis FAQ: MPI in the container through `srun --mpi=pmix`. No wrapper word and no GPU flag.
    _, line, root = rendered("profiles/dgx-superpod/site.yaml")
    image = "/lustre/fsw/exabench/images/exabench-pytorch-cuda-0.1.0.sqsh"
    assert line == shlex.join(
        "srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=14 --cpu-bind=cores --gpus-per-task=1 "
        "--gpu-bind=closest --mpi=pmix".split()
        + [f"--container-image={image}", f"--container-mounts={root}:{root}", "--no-container-mount-home", "env"]
        + env_words(root, image, "pyxis", "pytorch-cuda", 14) + SPEC.format(root=root).split())


def test_alps_cscs_container_engine_is_one_srun_option_naming_the_environment_file():
    # CSCS "Container Engine" (docs.cscs.ch/software/container-engine/run/): `srun --environment=<EDF>`;
    # the EDF (docs.cscs.ch/software/container-engine/edf/) holds the image and mounts, its annotations
    # the CXI and NCCL hooks: nothing else on the line.
    _, line, root = rendered("tests/data/sites/alps-gh200.yaml")
    edf = "/capstor/store/cscs/exabench/edf/exabench-pytorch-cuda.toml"
    assert line == shlex.join(
        "srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --cpus-per-task=72 --cpu-bind=cores --gpus-per-task=1 "
        "--gpu-bind=closest".split()
        + [f"--environment={edf}", "env"] + env_words(root, edf, "cscs-edf", "pytorch-cuda", 72)
        + SPEC.format(root=root).split())


def test_frontier_apptainer_wraps_the_program_with_rocm_and_the_hosts_cray_mpich():
    # OLCF "Containers on Frontier" (docs.olcf.ornl.gov/software/containers_on_frontier.html): `srun ...
    # apptainer exec --rocm --bind ...` with Cray MPICH, libfabric and libcxi bound from the host and
    # put on LD_LIBRARY_PATH.
    _, line, root = rendered("profiles/frontier/site.yaml")
    image = f"{root}/images/pytorch-rocm.sif"
    ld = "/opt/cray/pe/mpich/default/ofi/gnu/9.1/lib-abi-mpich:/opt/cray/pe/lib64:/opt/cray/libfabric/default/lib64"
    assert line == shlex.join(
        "srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=7 --cpu-bind=threads --gpus-per-task=1 "
        "--gpu-bind=closest apptainer exec --rocm".split()
        + [f"--bind={b}" for b in (root, "/mnt/bb", "/opt/cray", "/var/spool/slurmd", "/usr/lib64/libcxi.so.1")]
        + [f"--env={w}" for w in env_words(root, image, "apptainer", "pytorch-rocm", 7, {"LD_LIBRARY_PATH": ld})]
        + [image] + SPEC.format(root=root).split())


def test_aurora_apptainer_wraps_the_program_after_mpiexec_without_a_gpu_flag():
    # ALCF "Containers on Aurora" (docs.alcf.anl.gov/aurora/containers/containers/): `mpiexec ...
    # apptainer exec --bind ... IMAGE program`, the host's MPICH bound in; Intel GPUs need no flag.
    _, line, root = rendered("tests/data/sites/aurora-apptainer.yaml")
    words = shlex.split(line)
    image = "/lus/flare/projects/exabench/images/pytorch-xpu.sif"
    start = words.index("apptainer")
    assert words[0] == "mpiexec" and words[start:start + 6] == [
        "apptainer", "exec", f"--bind={root}", "--bind=/lus/flare/projects", "--bind=/opt/cray",
        "--bind=/var/run/palsd"]
    assert words[words.index(image):] == [image, *SPEC.format(root=root).split()]
    assert not {"--nv", "--rocm"} & set(words)


def test_launch_lines_command_shows_the_pyxis_form_for_the_dgx_superpod_profile():
    argv = [sys.executable, "-m", "exabench", "launch-lines", "--site", "profiles/dgx-superpod/site.yaml"]
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[1].strip()
    assert first.startswith("srun --nodes=1 ") and " --mpi=pmix --container-image=/lustre/" in first
    assert " --no-container-mount-home env EXABENCH_CONTAINER_DIGEST= " in first
