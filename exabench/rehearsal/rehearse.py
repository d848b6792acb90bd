"""`exabench rehearse --profile profiles/<site>`: a site's documented path, run here.

In a scratch copy of the workflow, with the stand-ins first on PATH: `snakemake --profile
profiles/<site> bundle`, then each bundle script submitted as the site file says (`bsub script`,
`qsub script`), then the plain `snakemake --profile profiles/<site>` that aggregates the records,
then its `acceptance` target; then `every_node_script`, its every-node job(s) submitted the same way,
and `node_check`. The campaign is the site's own (profiles/<site>/campaign.yaml) at
scale=rack, preset=tiny unless told otherwise. The report (rehearsal.md) says what was submitted,
what each stand-in accepted or refused and why, the runs and their records, the node-hours the real
campaign would request, and the verdicts.

A Slurm site takes the same path through the real Slurm SLURM_CONF names (the loopback cluster):
its sbatch and srun are stand-ins that check the site's lines, map them to that cluster and hand
them to the real commands (exabench.rehearsal.slurm); every_node_script is left out there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from exabench.campaign.allocation import submit_line
from exabench.campaign.site import Site, load_site
from exabench.errors import ExabenchError
from exabench.rehearsal import slurm
from exabench.rehearsal.report import render, shown
from exabench.rehearsal.rules import ENV
from exabench.rehearsal.standins import environment, write_bin

WORKFLOW = ("Snakefile", "workflow", "profiles", "config", "requirements.txt", "requirements.lock")
# node_hours_budget=0: a rehearsal charges nothing; the report gives what the real campaign would ask.
# preset_sizes: each run at the preset's sizes (a site campaign's batch 256 or 64GB a node would take
# this machine hours, or its memory), the campaign's own values kept in each record and the report.
DEFAULTS = ("scale=rack", "preset=tiny", "node_hours_budget=0", "preset_sizes=True")
EVERY_NODE_NODES = 1  # the every-node job's allocation here: this one host
SPEC = re.compile(r"--spec (\S+)/spec\.json")


@dataclass
class Step:
    command: list
    returncode: int
    seconds: float
    output: str


@dataclass
class Rehearsal:
    site: Site
    work: Path
    ranks: int   # the most ranks a launch starts here
    steps: list = field(default_factory=list)
    submitted: list = field(default_factory=list)    # (script, Step)
    verdicts: list = field(default_factory=list)     # the steps that judge (acceptance, node_check)
    summary: object = None
    here: object = None       # a Slurm site's: the loopback cluster it ran on (slurm.Here)
    images: list = field(default_factory=list)   # placeholder image files (a Slurm site that builds its own)

    @property
    def results(self) -> Path:
        return self.work / "results" / self.site.name


def _site(profile: str) -> Site:
    site_file = Path(profile) / "site.yaml"
    if not site_file.is_file():
        raise ExabenchError(f"--profile {profile}: no site.yaml there; valid: a site profile folder such as "
                            "profiles/summit")
    site = load_site(site_file)
    if site.submit != "bundles" and site.scheduler != "slurm":
        raise ExabenchError(f"--profile {profile}: site {site.name} has no scheduler to rehearse (scheduler: "
                            f"{site.scheduler or 'none'}); valid here: a bundle site (summit, summitdev, titan, theta, "
                            "polaris, aurora) or a Slurm site (frontier, perlmutter, cori-knl, stampede2, "
                            "dgx-superpod, slurm-local)")
    return site


def through_slurm(site: Site) -> bool:
    """A Slurm site is rehearsed through the real Slurm of this machine; the others through stand-ins."""
    return site.scheduler == "slurm"


# Open MPI between the loopback cluster's "nodes", which share one host (profiles/slurm-local/site.yaml):
# TCP over lo, no shared-memory segments (two nodes' ranks on one host collide in vader's).
LOOPBACK_MPI = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo",
                "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def placeholder_images(site: Site, results: Path) -> list[Path]:
    """Empty files where the site's built images go: no image is built here (the ranks run on this
    machine's Python), and the campaign's render job waits for them on a site that builds its own."""
    from exabench.containers import STACKS, runtimes
    from exabench.containers.runtime import built_image_path, runtime
    if runtime(site) not in runtimes.names(builds_sif=True) or (site.container or {}).get("image"):
        return []
    made = sorted({built_image_path(site, stack, results) for stack in STACKS})
    for path in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return made


def check_inputs(profile: str, work: Path, checkout: Path, configfile: str | None) -> None:
    """Refuse, before anything is emptied, a --work folder whose removal would lose the user's files
    (the checkout, a folder holding it, a file, a folder no rehearsal made) and a --configfile that
    cannot be read: each names the option, its value and what is valid."""
    work, checkout = work.resolve(), checkout.resolve()
    valid = "a new folder, or one an earlier rehearsal made (default: results/rehearsal/<site>)"
    if checkout == work or checkout.is_relative_to(work):
        raise ExabenchError(f"--work {work}: holds the exabench checkout {checkout}, which would be emptied; "
                            f"valid: {valid}")
    if work.exists() and not work.is_dir():
        raise ExabenchError(f"--work {work}: is not a folder; valid: {valid}")
    if work.is_dir() and any(work.iterdir()) and not (work / "Snakefile").is_file():
        raise ExabenchError(f"--work {work}: a folder no rehearsal made (it has no copy of the workflow), which "
                            f"would be emptied; valid: {valid}")
    if configfile is not None:
        from exabench.config import load_yaml
        load_yaml(configfile)  # missing, a folder, unreadable, not YAML: ConfigError naming the file


def copy_profile(profile: str, checkout: Path, work: Path) -> None:
    """A profile folder outside the checkout's profiles/ (a copy the user edited) replaces the one of
    its name in the rehearsal's workflow, so that its site file and campaign are the ones rehearsed."""
    src, own = Path(profile).resolve(), work / "profiles" / Path(profile).resolve().name
    if src != (checkout / "profiles" / src.name).resolve():
        shutil.copytree(src, own, dirs_exist_ok=True)


# The Slurm executor's first status check (and its wait at exit, which joins the sleeping status
# thread) defaults to 40 s: on the loopback cluster, whose jobs last seconds, that is most of a
# rehearsal's time. The rehearsal's copy of the profile polls as the loopback profiles do.
LOOPBACK_POLLING = {"slurm-init-seconds-before-status-checks": 3, "seconds-between-status-checks": 3}


def poll_loopback_quickly(profile_dir: Path) -> None:
    """LOOPBACK_POLLING in the rehearsal's copy of a Slurm site's profile, where it sets none itself."""
    config = profile_dir / "config.yaml"
    own = yaml.safe_load(config.read_text()) or {}
    missing = {k: v for k, v in LOOPBACK_POLLING.items() if k not in own}
    if missing:
        lines = "".join(f"{k}: {v}\n" for k, v in missing.items())
        config.write_text(config.read_text().rstrip("\n") + "\n# exabench rehearse: the loopback cluster's jobs last "
                          "seconds\n" + lines)


def copy_workflow(checkout: Path, work: Path) -> None:
    if not (checkout / "Snakefile").is_file():
        raise ExabenchError(f"{checkout}: no Snakefile; valid: run `exabench rehearse` from the exabench checkout")
    work.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW:
        src = checkout / name
        if src.is_dir():
            shutil.copytree(src, work / name, dirs_exist_ok=True)
        elif src.exists():
            shutil.copy2(src, work / name)


def references(profile_dir: Path, overrides=()) -> Path:
    """The references file the acceptance target judges against: --config references=FILE, else the
    profile's references.yaml (workflow/rules/common.smk)."""
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("references=")]
    return Path(given[-1]) if given else profile_dir / "references.yaml"


def _run(r: Rehearsal, command: list, env: dict, timeout: int) -> Step:
    # Each step said as it starts and ends (on stderr; the summary is stdout's): a site's default
    # campaign is dozens of submissions, each running its runs here, an hour and more in all.
    print(f"exabench rehearse {r.site.name}: step {len(r.steps) + 1}: {shown(command)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    proc = subprocess.run(command, cwd=r.work, env=env, capture_output=True, text=True, timeout=timeout)
    step = Step(command, proc.returncode, time.monotonic() - start, proc.stdout + proc.stderr)
    r.steps.append(step)
    print(f"exabench rehearse {r.site.name}: step {len(r.steps)}: exit {step.returncode} in {step.seconds:.0f} s",
          file=sys.stderr, flush=True)
    return step


def rehearse(profile: str, work: Path, checkout: Path, configfile: str | None = None, overrides=(),
             ranks: int = 2, timeout: int = 3600) -> Rehearsal:
    """Run the site's path in `work` (a fresh copy of `checkout`'s workflow) and write its report."""
    site = _site(profile)
    check_inputs(profile, work, checkout, configfile)
    # A Slurm site: the cluster SLURM_CONF names (the loopback one), asked first what it has (for the
    # stand-ins' scaling); with none answering, nothing is written.
    here = slurm.probe(dict(os.environ)) if through_slurm(site) else None
    if work.exists():
        shutil.rmtree(work)
    copy_workflow(checkout, work)
    copy_profile(profile, checkout, work)
    r = Rehearsal(site, work, ranks)
    state = work / "state"
    state.mkdir()
    prof = f"profiles/{Path(profile).resolve().name}"
    env = {**os.environ, **environment(str(work / prof / "site.yaml"), state, write_bin(work / "bin"), ranks)}
    package_root = str(Path(__file__).resolve().parents[2])   # the jobs import this same exabench
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    if here is not None:
        r.here = here
        poll_loopback_quickly(work / prof)
        env.update(LOOPBACK_MPI, **{ENV + "HERE": slurm.here_setting(here)})
        r.images = placeholder_images(site, r.results.resolve())
    config = ["--config", f"site={prof}/site.yaml", *DEFAULTS, *overrides]
    # the every-node job for the one node this machine is: its node list is this host (the batch
    # stand-ins' host file), and a job whose list is not its launch lines' count stops (node_worlds)
    every_node = [*config, f"acceptance_nodes={EVERY_NODE_NODES}"]
    files = ["--configfile", str(Path(configfile).resolve())] if configfile else []
    config, every_node = config + files, every_node + files
    snakemake = [sys.executable, "-m", "snakemake", "--profile", prof]
    if _run(r, [*snakemake, "bundle", *config], env, timeout).returncode == 0:
        for script in sorted((r.results / "bundles").glob("*.sh")):
            command = ["bash", "-c", submit_line(site, script.relative_to(work))]  # as typed: `bsub < x.sh`
            r.submitted.append((script, _run(r, command, env, timeout)))
        _run(r, [*snakemake, *config], env, timeout)
        if references(work / prof, overrides).is_file():  # a site without references has nothing to judge against
            r.verdicts.append(_run(r, [*snakemake, "acceptance", *config], env, timeout))
        # Every-node acceptance: the one script (jobs) that runs each single-node run on every node of
        # the allocation, here on this one (one launch across every node: the stand-in launcher checks
        # it, node worlds split its ranks by node); then the nodes' verdict. (A Slurm site's every-node
        # job steps name the site's own nodes; every-node acceptance runs on the loopback cluster
        # itself: tests/integration/test_slurm.py.)
        if not through_slurm(site) and \
                _run(r, [*snakemake, "every_node_script", *every_node], env, timeout).returncode == 0:
            script = r.results / "nodes" / "every-node.sh"
            # several jobs (runs of different allocations): every-node.sh submits them all, run as typed
            several = any((r.results / "nodes").glob("every-node-*-of-*.sh"))
            line = f"bash {script.relative_to(work)}" if several else submit_line(site, script.relative_to(work))
            r.submitted.append((script, _run(r, ["bash", "-c", line], env, timeout)))
            r.verdicts.append(_run(r, [*snakemake, "node_check", *every_node], env, timeout))
    r.summary = write_report(r, work / "rehearsal.md")
    return r


@dataclass
class Summary:
    decisions: list        # every stand-in's decision, in order
    planned: list          # the run ids the submitted scripts execute
    records: dict          # run id -> status of its record
    node_hours: float      # what the accepted submissions would ask of the real machine
    ok: bool = False       # rehearsed: see rehearsed()
    resized: dict = field(default_factory=dict)   # run id -> {parameter: (the campaign's value, the value here)}

    @property
    def refused(self) -> list:
        return [d for d in self.decisions if d["verdict"] == "refused"]

    @property
    def missing(self) -> list:
        return [run for run in self.planned if run not in self.records]

    def rehearsed(self, r: Rehearsal) -> bool:
        """Every step ran (a failing acceptance verdict is a finding, not a broken path), nothing was
        refused, and every planned run has its record."""
        steps = [s for s in r.steps if s not in r.verdicts]
        return bool(self.planned) and all(s.returncode == 0 for s in steps) and not self.refused and not self.missing


def summarize(r: Rehearsal) -> Summary:
    path = r.work / "state" / "decisions.jsonl"
    decisions = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    planned = sorted({Path(m).name for script, _ in r.submitted for m in SPEC.findall(script.read_text())})
    records, resized = {}, {}
    for rec in sorted((r.results / "records").glob("*.json")):
        try:
            data = json.loads(rec.read_text())
        except ValueError:
            records[rec.stem] = "corrupt"
            continue
        records[rec.stem] = data.get("status", "?")
        if data.get("resized"):
            resized[rec.stem] = {k: (v, data.get("params", {}).get(k)) for k, v in data["resized"].items()}
    queues = {q.name: q for q in r.site.queues}
    hours = 0.0
    for d in decisions:   # the nodes a queue charges (Theta's default: 128 at least) x the walltime asked
        if d["tool"] in ("bsub", "qsub", "sbatch") and d["verdict"] == "accepted":
            q = queues.get(d["queue"])
            hours += (q.charged_nodes(d["nodes"]) if q else d["nodes"]) * d["minutes"] / 60
    summary = Summary(decisions, planned, records, hours, resized=resized)
    summary.ok = summary.rehearsed(r)
    return summary


def write_report(r: Rehearsal, path: Path) -> Summary:
    summary = summarize(r)
    path.write_text(render(r, summary))
    return summary
