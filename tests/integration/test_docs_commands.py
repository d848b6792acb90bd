"""Every command README.md and docs/*.md show works as written: Snakemake commands plan (dry run,
from the repository root), `exabench` commands parse (and the ones that read no results run),
scripts named exist. A command with a placeholder (<site>, my.yaml) is left out, and so is one
that only runs where its machine is (make, the loopback Slurm's start and stop)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"```(?:bash|sh|console)?\n(.*?)```", re.S)
PLACEHOLDER = re.compile(r"<[a-z-]+>|\bmy\.yaml\b|\[|\.\.\.")
RUNS_NOTHING = ("list", "plan", "launch-lines")  # exabench commands that need no results to run


def documented_commands() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if re.match(r"^(snakemake|exabench|python -m exabench|python bench/)\b", line) and "&&" not in line:
                    out.append((doc.name, line))
    return out


COMMANDS = documented_commands()
# The commands as written; one with a placeholder to fill in (<site>, my.yaml, [--option]) is only counted.
RUNNABLE = [c for c in COMMANDS if not PLACEHOLDER.search(c[1])]


def test_the_docs_show_commands():
    assert len(COMMANDS) > 30 and len(RUNNABLE) > 25 and any(c.startswith("snakemake") for _, c in RUNNABLE)


@pytest.mark.integration
@pytest.mark.parametrize("doc, command", [c for c in RUNNABLE if c[1].startswith("snakemake")],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 90 else None)
def test_a_documented_snakemake_command_plans(doc, command):
    argv = shlex.split(command)[1:]
    argv = [a for a in argv if a != "--report" and not a.endswith("report.html")]  # a report needs the results
    res = subprocess.run([sys.executable, "-m", "snakemake", *argv, "-n", "--quiet", "rules"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{doc}: {command}\n" + (res.stdout + res.stderr)[-3000:]


@pytest.mark.parametrize("doc, command", [c for c in RUNNABLE if "exabench" in c[1].split()[0:3]],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 90 else None)
def test_a_documented_exabench_command_parses(doc, command):
    from exabench.cli import build_parser
    argv = shlex.split(command)
    argv = argv[3:] if argv[:3] == ["python", "-m", "exabench"] else argv[1:]
    build_parser().parse_args(argv)  # SystemExit (argparse's error) fails the test
    if argv[0] in RUNS_NOTHING:
        res = subprocess.run([sys.executable, "-m", "exabench", *argv], cwd=REPO, capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, f"{doc}: {command}\n{res.stderr[-3000:]}"


@pytest.mark.parametrize("doc, command", [c for c in RUNNABLE if c[1].startswith("python bench/")],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 90 else None)
def test_a_documented_script_exists_and_takes_its_options(doc, command):
    argv = shlex.split(command)
    script = REPO / argv[1]
    assert script.is_file(), f"{doc}: {command}: no {argv[1]}"
    res = subprocess.run([sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(REPO), **__import__("os").environ})
    assert res.returncode == 0, res.stderr[-2000:]
    for option in (a.split("=")[0] for a in argv[2:] if a.startswith("--")):
        assert option in res.stdout, f"{doc}: {command}: {script.name} has no {option}"
