"""`exabench rehearse --profile profiles/<site>` runs a bundle site's documented path here, end to end:
`snakemake --profile ... bundle`, each bundle script through the stand-in submit command (bsub on
Summit's LSF, qsub on Polaris' PBS Pro), the ranks through the stand-in launcher (jsrun, PALS
mpiexec) and mpirun, then the aggregate and acceptance. Every planned run comes back with a record.
(every_node_script is refused on jsrun and PALS mpiexec sites, whose launchers start from the batch
node only: the rehearsal runs it where the launcher has one step across every node.)

The campaign is a small subset of the sites' own (two GEMM runs, on 1 and 2 nodes: two bundles, so
two submissions), not the rack-scale default campaign (132 runs on Summit): a tiny ResNet-50 run
takes a minute on this shared machine, and the suite cannot spend hours per site."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers_compare import env
from helpers_sites import REPO

SMALL_CAMPAIGN = """\
campaign: rehearsal-small
preset: tiny
repeats: 1
timeout_s: 600
benchmarks:
  - name: gemm
    sweep:
      nodes: [1, 2]
      ranks_per_node: [1]
      precision: [fp32]
"""


@pytest.mark.parametrize("name, submit, launcher", [("summit", "bsub", "jsrun"), ("polaris", "qsub", "mpiexec")])
def test_a_bundle_sites_documented_path_is_rehearsed_with_a_record_for_every_planned_run(tmp_path, name, submit,
                                                                                         launcher):
    campaign = tmp_path / "small.yaml"
    campaign.write_text(SMALL_CAMPAIGN)
    work = tmp_path / "rehearsal"
    res = subprocess.run([sys.executable, "-m", "exabench", "rehearse", "--profile", f"profiles/{name}",
                          "--configfile", str(campaign), "--work", str(work)],
                         cwd=REPO, env=env(), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert f"exabench rehearse {name}: rehearsed: 2 script(s) submitted, 0 refused, 2 of 2 planned" in res.stdout
    records = sorted((work / "results" / name / "records").glob("*.json"))
    assert [p.stem for p in records] == ["gemm.tiny.fp32.n1r1t42g1" if name == "summit" else "gemm.tiny.fp32.n1r1t32g1",
                                         "gemm.tiny.fp32.n2r1t42g1" if name == "summit" else "gemm.tiny.fp32.n2r1t32g1"]
    assert all(json.loads(p.read_text())["status"] == "ok" for p in records)
    decisions = [json.loads(line) for line in (work / "state" / "decisions.jsonl").read_text().splitlines()]
    submits = [d for d in decisions if d["tool"] == submit]
    launches = [d for d in decisions if d["tool"] == launcher]
    assert [(d["what"], d["verdict"], d["exit"]) for d in submits] == [
        (f"results/{name}/bundles/rehearsal-small-01-of-02.sh", "accepted", 0),
        (f"results/{name}/bundles/rehearsal-small-02-of-02.sh", "accepted", 0)]
    assert [d["nodes"] for d in submits[:2]] == [1, 2]   # the headers' counts, checked against the queues
    # the bundles' two launches (1 and 2 ranks)
    assert [(d["verdict"], d["exit"]) for d in launches] == [("accepted", 0)] * 2
    assert [d["ranks"] for d in launches[:2]] == [1, 2]
    report = (work / "rehearsal.md").read_text()
    for part in ("Verdict: **rehearsed**", f"`{'bsub <' if submit == 'bsub' else submit} results/{name}/bundles/rehearsal-small-01-of-02.sh`",
                 "## Runs and their records", "node-hours the real campaign would request", "## Verdicts"):
        assert part in report, part
    for judged in ("verdicts.md",):   # the aggregate and acceptance ran
        assert (work / "results" / name / "acceptance" / judged).is_file(), judged


# Every bundle site's default campaign through the stand-ins' checks (directives and launch lines, nothing
# run): test_bundles.py::test_the_documented_bundle_and_every_node_commands_run_for_real_on_every_bundle_site.
