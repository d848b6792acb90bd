"""Adding a container runtime is one module: a toy runtime declared here, and nowhere else, is
accepted by a site file naming it (with a launcher and GPU flag it declares, refused with any
other), renders its words between the launcher's options and the program, and is gone, with the
refusal listing the runtimes there are, once unregistered."""

from __future__ import annotations

import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

import exabench.containers.runtimes as runtimes
from exabench.campaign.plan import Run
from exabench.campaign.render import RunPaths, render_script
from exabench.campaign.site import load_site, resolve_layout
from exabench.containers.runtimes.facts import LAUNCHER_OPTIONS, RuntimeFacts, env_words
from exabench.errors import ConfigError
from helpers_sites import FIXED_ROOT, write_site_with


def _argv(site, image, binds, env, mount=None):
    return [f"--toy-image={image}", f"--toy-mounts={','.join(binds)}", *env_words(env)]


TOY = SimpleNamespace(
    FACTS=RuntimeFacts(name="toyrt", position=LAUNCHER_OPTIONS, launchers=("srun",), gpu_flags=("", "--toy-gpu"),
                       image_form="a toy name"),
    argv=_argv)


@pytest.fixture
def toy():
    runtimes.register(TOY)
    yield TOY
    runtimes.unregister("toyrt")


def _site(tmp_path, **changes):
    return load_site(write_site_with(tmp_path, "perlmutter", **{"container": {"runtime": "toyrt", "image": "toy:1"},
                                                                 **changes}))


def test_a_runtime_is_one_module_its_words_reach_the_launch_line(toy, tmp_path):
    site = _site(tmp_path)
    run = Run(run_id="probe", benchmark="resnet50", suite="x", framework="pytorch", preset="tiny", params={},
              layout=resolve_layout(site, nodes=2), timeout_s=600)
    _, line = render_script(run, site, RunPaths(Path(FIXED_ROOT) / site.name, "probe"))
    words = shlex.split(line)
    start = words.index("--toy-image=toy:1")
    assert words[0] == "srun" and all(w.startswith("--") for w in words[1:start])  # after srun's own options
    assert words[start + 1] == f"--toy-mounts={FIXED_ROOT}/perlmutter" and words[start + 2] == "env"
    assert "EXABENCH_CONTAINER_RUNTIME=toyrt" in words
    assert words[-5:] == ["python3", "-m", "exabench.runner", "--spec", f"{FIXED_ROOT}/perlmutter/runs/probe/spec.json"]
    assert "toyrt" in runtimes.names(position=LAUNCHER_OPTIONS) and "toyrt" in runtimes.valid_names()


def test_a_gpu_flag_or_launcher_the_runtime_does_not_declare_refuses_it(toy, tmp_path):
    with pytest.raises(ConfigError, match=r"key 'container.gpu_flag' = '--nv' is not a flag toyrt has; "
                                          r"valid: '' \(none\), '--toy-gpu' with container.runtime toyrt"):
        _site(tmp_path, container={"runtime": "toyrt", "image": "toy:1", "gpu_flag": "--nv"})
    with pytest.raises(ConfigError, match=r"key 'launcher' = 'mpirun' cannot start it; valid: srun with "
                                          r"container.runtime toyrt"):
        _site(tmp_path, launcher="mpirun")


def test_after_unregistering_the_runtime_is_gone(tmp_path):
    runtimes.register(TOY)
    runtimes.unregister("toyrt")
    assert "toyrt" not in runtimes.names()
    with pytest.raises(ConfigError) as err:
        _site(tmp_path)
    assert "key 'container.runtime' = 'toyrt' is not valid; valid: none, apptainer, charliecloud, cscs-edf, " \
           "docker, podman-hpc, pyxis, shifter, singularity" in str(err.value)
