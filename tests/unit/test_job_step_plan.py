"""A job step (an executor plugin's Snakemake for one job, on its compute node) reads the plan the
campaign's start saved, not expanding it again; another config, site file or a damaged file makes it
expand the plan as the campaign did."""

from __future__ import annotations

from pathlib import Path

import pytest

from exabench import pipeline
from exabench.campaign.site import load_site
from exabench.config import validate

REPO = Path(__file__).resolve().parents[2]


def campaign(seeds: int = 3, name: str = "steps") -> dict:
    return validate({"campaign": name, "benchmarks": [{"name": "kmeans", "sweep": {"seed": list(range(1, seeds + 1)),
                                                                                   "ranks_per_node": [1, 2]}}]},
                    "config", "c.yaml")


@pytest.fixture
def site(tmp_path, monkeypatch):
    path = tmp_path / "site.yaml"
    path.write_text((REPO / "profiles" / "local" / "site.yaml").read_text())
    monkeypatch.chdir(tmp_path)  # the saved plan lives in the working directory's .snakemake/
    return load_site(str(path))


def entries(runs: dict) -> dict:
    return {run_id: run.to_dict() for run_id, run in runs.items()}


def no_expansion(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr(pipeline, "expand_plan", lambda *a, **k: calls.append(a) or [])
    return calls


def test_a_job_step_reads_the_saved_plan_and_expands_nothing(site, monkeypatch):
    config = campaign()
    runs = pipeline.campaign_runs(config, site, "c.yaml")
    assert len(runs) == 6
    pipeline.save_plan(runs, config, site)
    calls = no_expansion(monkeypatch)
    step = pipeline.campaign_runs(campaign(), site, "c.yaml", job_step=True)
    assert calls == [] and entries(step) == entries(runs) and list(step) == list(runs)


@pytest.mark.parametrize("change", ["config", "site file", "damaged", "none saved"])
def test_a_job_step_expands_the_plan_when_the_saved_one_is_not_this_campaigns(site, monkeypatch, change):
    config = campaign()
    runs = pipeline.campaign_runs(config, site, "c.yaml")
    if change != "none saved":
        pipeline.save_plan(runs, config, site)
    if change == "config":
        config = campaign(name="another")
    elif change == "site file":
        Path(site.path).write_text(Path(site.path).read_text() + "\n# edited\n")
    elif change == "damaged":
        saved = pipeline._plan_file(site)
        saved.write_bytes(saved.read_bytes()[:200])
    calls = no_expansion(monkeypatch)
    assert pipeline.campaign_runs(config, site, "c.yaml", job_step=True) == {} and len(calls) == 1


def test_the_campaign_itself_always_expands(site, monkeypatch):
    config = campaign()
    pipeline.save_plan(pipeline.campaign_runs(config, site, "c.yaml"), config, site)
    calls = no_expansion(monkeypatch)
    pipeline.campaign_runs(config, site, "c.yaml")
    assert len(calls) == 1


# --- a saved plan another user could have written runs nothing and is not used --------------------

class _Planted:
    """What a planted pickle holds: unpickling it runs `touch marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os
        return os.system, (f"touch {self.marker}",)


def plant(path: Path, payload: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    path.chmod(mode)


def test_a_planted_pickle_runs_no_code_and_is_not_used(site, monkeypatch, capsys):
    import pickle
    marker = Path("planted-code-ran")
    config = campaign()
    payload = pickle.dumps(_Planted(marker.resolve()))
    plant(pipeline._plan_file(site), payload)  # where the job steps read their plan
    plant(pipeline._plan_file(site).with_suffix(".pickle"), payload)  # where they read it before
    calls = no_expansion(monkeypatch)
    assert pipeline.campaign_runs(config, site, "c.yaml", job_step=True) == {} and len(calls) == 1
    assert not marker.exists()
    assert f"{pipeline._plan_file(site)}: not a saved plan" in capsys.readouterr().err


@pytest.mark.parametrize("planted", ["owned by another user", "group-writable", "world-writable", "a link"])
def test_a_saved_plan_another_user_could_write_is_refused_naming_it(site, monkeypatch, planted):
    import os
    config = campaign()
    pipeline.save_plan(pipeline.campaign_runs(config, site, "c.yaml"), config, site)
    path = pipeline._plan_file(site)
    if planted == "owned by another user":
        if os.getuid() != 0:
            pytest.skip("only root can give a file to another user")
        os.chown(path, 65534, 65534)
    elif planted == "group-writable":
        path.chmod(0o620)
    elif planted == "world-writable":
        path.chmod(0o602)
    else:
        real = path.with_name("elsewhere.json")
        path.rename(real)
        path.symlink_to(real.name)
    calls = no_expansion(monkeypatch)
    with pytest.raises(pipeline.ExabenchError, match=rf"^{path}: .*; refused") as refused:
        pipeline.campaign_runs(config, site, "c.yaml", job_step=True)
    assert "\n" not in str(refused.value) and calls == []


def test_the_saved_plan_is_json_only_its_user_can_write(site):
    import json
    import stat
    config = campaign()
    pipeline.save_plan(pipeline.campaign_runs(config, site, "c.yaml"), config, site)
    path = pipeline._plan_file(site)
    assert path.suffix == ".json" and len(json.loads(path.read_text())["runs"]) == 6
    assert not path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)
