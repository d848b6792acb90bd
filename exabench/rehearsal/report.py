"""The rehearsal's report (rehearsal.md): per site, each script submitted, what each stand-in
accepted or refused and why, the runs and their records, the node-hours the real campaign would
request, the verdicts, and the scaling to this machine made visible."""

from __future__ import annotations

import shlex
from collections import Counter

from exabench.markdown import table


# A decision's details, in this order: the job as asked (and as rehearsed, on a Slurm site), the launch's ranks.
DETAILS = ("job", "queue", "nodes", "minutes", "tasks", "ranks", "nodes_here", "tasks_here", "ranks_here", "threads",
           "threads_here", "exit", "note")


def _cell(text) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def _tail(text: str, lines: int = 3) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def shown(command: list) -> str:
    """A step's command as the user types it (`snakemake ...`, not `python -m snakemake ...`)."""
    if command[:2] == ["bash", "-c"]:  # a submission as typed, `bsub < job.sh`
        return command[2]
    return shlex.join(command[2:] if command[1:2] == ["-m"] else command)


def scaling(r) -> str:
    """How the site's jobs were scaled to this machine."""
    if r.here is None:
        return ("Scaled to this machine: each batch job runs here at once on this one host (its header's node count "
                "is checked, and kept in EXABENCH_REHEARSAL_NODES; the every-node job is rendered for the one node "
                "this host is: acceptance_nodes=1); each launch starts at most "
                f"{r.ranks} rank(s) of those it asks for (the table's ranks vs ranks_here), "
                "through mpirun, each rank with this machine's CPUs shared among them as its threads (threads vs "
                "threads_here: OMP_NUM_THREADS and EXABENCH_MAX_THREADS); container images are not built here, so "
                "programs run on this machine's Python.")
    h = r.here
    images = f" (placeholder files: {', '.join(p.name for p in r.images)})" if r.images else ""
    return (f"Scaled to this machine: each batch script went to the real Slurm here (partition {h.partition}: "
            f"{h.nodes} node(s) of {h.cpus} CPUs and {h.memory_mb} MB, {h.minutes} min at most) through `sbatch`, "
            "one after another (each job's end awaited, asked every second), after its #SBATCH lines were checked "
            "as the site asked for them; the "
            "table gives each job as asked (nodes, tasks) and as rehearsed (nodes_here, tasks_here), at most "
            f"{r.ranks} task(s) a job, and each srun or ibrun line its ranks and threads as asked and as started "
            "(the CPUs here shared among the ranks of a node). What the "
            "loopback cluster cannot give is changed or removed after the check (below); the Slurm executor "
            "checks its jobs every 3 s here, not after the 40 s its plugin waits by default. Container images are "
            f"not built or pulled here{images}: programs run on this machine's Python.")


def render(r, s) -> str:
    """The report of rehearsal `r` with its summary `s` (exabench.rehearsal.rehearse.Summary)."""
    decisions, planned, records = s.decisions, s.planned, s.records
    statuses = Counter(records.get(run, "no record") for run in planned)
    seconds = sum(step.seconds for step in r.steps)
    out = [f"# Rehearsal of site {r.site.name}", "",
           f"Verdict: **{'rehearsed' if s.ok else 'NOT rehearsed'}**: {len(r.submitted)} script(s) submitted, "
           f"{len(s.refused)} refusal(s), {len(planned)} run(s) planned, {len(planned) - len(s.missing)} with a record "
           f"({', '.join(f'{n} {s}' for s, n in sorted(statuses.items())) or 'none'}); "
           f"{s.node_hours:,.1f} node-hours the real campaign would request; {seconds:,.0f} s here.", "",
           scaling(r), "", "## Commands", ""]
    out += table(["command", "exit", "seconds", "last lines"],
                 [[f"`{_cell(shown(st.command))}`", st.returncode,
                   f"{st.seconds:.0f}", _cell(_tail(st.output))] for st in r.steps])
    out += ["", "## Submit and launch stand-ins", ""]
    out += table(["tool", "verdict", "what", "details"],
                 [[d["tool"], d["verdict"], _cell(d["what"])[:160],
                   _cell(d.get("why") or ", ".join(f"{k} {d[k]}" for k in DETAILS if k in d))]
                  for d in decisions])
    mapped = dict.fromkeys((d["tool"], change) for d in decisions for change in d.get("mapped", ()))
    if mapped:   # what the loopback cluster could not give, changed after the site's rules were checked
        out += ["", "## Mapped to the loopback cluster", ""]
        out += table(["tool", "change (why)"], [[tool, _cell(change)] for tool, change in mapped])
    out += ["", "## Runs and their records", ""]
    out += ["Each run at the preset's sizes (preset_sizes): where the campaign asks more, its own value is given "
            "beside the one run here (the record keeps both: params and resized). A weak-scaling analytics run "
            "holds its size per node for the nodes its ranks here fill, not for the nodes asked (its record's "
            "rows say how many).", ""]
    out += table(["run", "record", "sizes: the campaign's -> here"],
                 [[run, records.get(run, "**no record**"),
                   _cell(", ".join(f"{k} {own} -> {here}" for k, (own, here) in s.resized.get(run, {}).items()))]
                  for run in planned])
    out += ["", "## Verdicts", "",
            "What these verdicts cover: this machine's figures (at the rehearsal's preset, tiny unless set), "
            f"judged against {r.site.name}'s references by the site's own acceptance and node check. They show "
            "that the verdicts, JUnit files and drain lists are made on this path, not how the machine performs: "
            "a FAIL or a drained node below is this machine measured against another one's figures.", ""]
    for name in ("verdicts.md", "nodes.md"):   # acceptance against the references; every-node check
        path = r.results / "acceptance" / name
        text = path.read_text().strip() if path.exists() else f"(no {name} written)"
        if name == "verdicts.md" and not path.exists() and not any("acceptance" in st.command for st in r.steps):
            text = (f"(acceptance not run: site {r.site.name} has no references file, so no figure of this path is "
                    "judged against a published one; the every-node check below judges the nodes against each other)")
        out += [text.removeprefix("# ").replace("\n# ", "\n### "), ""]
    return "\n".join(out)
