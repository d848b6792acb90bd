"""Adding a launcher is one module: a toy launcher declared here, and nowhere else, is accepted by
the site file of a scheduler it declares (and refused by the others), starts MPI benchmarks when it
says it is MPI, renders its launch line in the job script, stages data in when it can start one
process per node, and places every-node runs on named nodes by its own `on_nodes`."""

from __future__ import annotations

import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from exabench.campaign import launchers
from exabench.campaign.launchers.facts import LauncherFacts
from exabench.campaign.node_sweep import pin_to_nodes
from exabench.campaign.plan import expand
from exabench.campaign.render import RunPaths, render_script
from exabench.campaign.site import load_site
from exabench.config import validate
from exabench.errors import ConfigError
from helpers_sites import FIXED_ROOT, write_site_with


def _argv(site, layout, program, exports=()):
    return ["toyrun", f"--ranks={layout.ranks}", f"--per-node={layout.ranks_per_node}", *program]


def _on_nodes(argv, nodes, ranks_per_node):
    return [argv[0], f"--hosts={','.join(nodes)}", *argv[1:]]


TOY = SimpleNamespace(
    FACTS=LauncherFacts(name="toyrun", schedulers=("slurm",), mpi=True, on_nodes="--hosts=a,b"),
    argv=_argv, on_nodes=_on_nodes)


@pytest.fixture
def toy():
    launchers.register(TOY)
    yield TOY
    launchers.unregister("toyrun")


def test_a_launcher_is_one_module_its_facts_reach_every_list(toy, tmp_path):
    assert "toyrun" in launchers.names(mpi=True) and "toyrun" in launchers.for_scheduler("slurm")
    assert "toyrun" in launchers.placeable() and "toyrun" not in launchers.for_scheduler("pbs")
    site = load_site(write_site_with(tmp_path, "slurm-local", launcher="toyrun"))
    cfg = validate({"campaign": "toy", "preset": "tiny", "timeout_s": 120,
                    "benchmarks": [{"name": "allreduce", "sweep": {"nodes": [2], "ranks_per_node": [2]}}]},
                   "config", "toy.yaml")
    (run, *_) = expand(cfg, site, "toy.yaml")  # an MPI benchmark: the toy says it is MPI
    text, line = render_script(run, site, RunPaths(Path(FIXED_ROOT) / site.name, run.run_id))
    assert line.startswith("toyrun --ranks=4 --per-node=2 ") and line in text
    placed = pin_to_nodes(line, ("c1", "c2"), 2)
    assert placed.startswith("toyrun --hosts=c1,c2 --ranks=4 ") and shlex.split(placed)[-1] == shlex.split(line)[-1]


def test_a_scheduler_the_launcher_does_not_declare_refuses_it(toy, tmp_path):
    with pytest.raises(ConfigError, match=r"key 'launcher' = 'toyrun'.*one of aprun, local, mpiexec, mpirun with scheduler pbs"):
        load_site(write_site_with(tmp_path, "polaris", launcher="toyrun"))


def test_after_unregistering_the_launcher_is_gone(tmp_path):
    launchers.register(TOY)
    launchers.unregister("toyrun")
    assert "toyrun" not in launchers.names() and "toyrun" not in launchers.for_scheduler("slurm")
    with pytest.raises(ConfigError, match="launcher"):
        load_site(write_site_with(tmp_path, "slurm-local", launcher="toyrun"))
