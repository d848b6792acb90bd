"""Adding a scheduler is one module: a toy scheduler declared here, and nowhere else (its facts, its
header template as the module's HEADER text, its way of pinning a job to named nodes), is accepted by
a site file, heads its job scripts and bundles, submits them with its own command, pins node-group
jobs and counts the user's queued jobs its own way, and is refused once it is gone."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from exabench.campaign import allocation, schedulers
from exabench.campaign.node_groups import group_files, node_groups
from exabench.campaign.plan import expand
from exabench.campaign.render import RunPaths, render_bundle, render_script
from exabench.campaign.schedulers.facts import SchedulerFacts
from exabench.campaign.site import load_site, resolve_layout
from exabench.config import validate
from exabench.errors import ConfigError
from exabench.pipeline import job_resources
from helpers_sites import FIXED_ROOT, write_site_with

HEADER = """{% extends "batch/base.sh.j2" %}
{% block header %}
#TOY --nodes={{ req.nodes }} --minutes={{ req.minutes }}{% if req.partition %} --queue={{ req.partition }}{% endif %}

{% for flag in req.extra %}
#TOY {{ flag }}
{% endfor %}
{% endblock %}
"""

TOY = SimpleNamespace(
    FACTS=SchedulerFacts(name="toyq", submit="toysub", directive="#TOY", queue="--queue=Q",
                         node_list='cat "$TOY_NODEFILE"', queued_by_user='toystat --user "$me" --queue "$1"',
                         pin="--hosts=a,b (the toy's manual)", launchers=("mpirun",)),
    HEADER=HEADER,
    pinned=lambda request, site, nodes: {**request, "extra": [*request["extra"], f"--hosts={','.join(nodes)}"]})

CONFIG = {"campaign": "toy", "preset": "tiny", "timeout_s": 120,
          "benchmarks": [{"name": "allreduce", "sweep": {"nodes": [1, 2], "ranks_per_node": [2]}}]}


@pytest.fixture
def toy():
    schedulers.register(TOY)
    yield TOY
    schedulers.unregister("toyq")


def _site(tmp_path):
    return load_site(write_site_with(tmp_path, "slurm-local", scheduler="toyq", launcher="mpirun", submit="bundles"))


def test_a_scheduler_is_one_module_its_facts_reach_headers_bundles_and_submission(toy, tmp_path):
    site = _site(tmp_path)
    runs = expand(validate(CONFIG, "config", "toy.yaml"), site, "toy.yaml")
    text, line = render_script(runs[-1], site, RunPaths(Path(FIXED_ROOT) / site.name, runs[-1].run_id))
    job = allocation.run_job(site, runs[-1])
    assert f"#TOY --nodes=2 --minutes={job.minutes} --queue=debug\n" in text and line.startswith("mpirun ")
    assert "#TOY --nodes=2 " in render_bundle(runs[-1:], site, Path(FIXED_ROOT), "toy-b")
    assert allocation.submit_line(site, "/r/a b.sh") == "toysub '/r/a b.sh'"
    assert job_resources(site, lambda wildcards: runs[-1]) == {}  # no executor plugin: bundles only
    assert allocation.request(site, resolve_layout(site, nodes=2)).alloc_flags == ()  # nothing LSF's


def test_node_group_jobs_are_pinned_sent_and_counted_by_the_toys_own_words(toy, tmp_path):
    site = _site(tmp_path)
    config = validate({**CONFIG, "every_node": {"nodes": ["n1", "n2"], "group": 1}}, "config", "toy.yaml")
    files = {p.name: t for p, t, _ in group_files(expand(config, site, "toy.yaml"), site, tmp_path,
                                                   node_groups(config, site, "toy.yaml"), "toy")}
    assert "#TOY --hosts=n1\n" in files["n1.sh"] and "#TOY --hosts=n2\n" in files["n2.sh"]
    assert 'send() { toysub "$1"; }' in files["submit.sh"]
    assert 'mine() { toystat --user "$me" --queue "$1" | wc -l; }' in files["submit.sh"]


def test_a_site_naming_a_scheduler_without_a_module_is_refused_with_the_valid_ones(tmp_path):
    schedulers.register(TOY)
    schedulers.unregister("toyq")
    assert "toyq" not in schedulers.SCHEDULERS
    with pytest.raises(ConfigError, match=r"key 'scheduler' = 'toyq'.*one of cobalt, lsf, none, pbs, slurm"):
        _site(tmp_path)
