"""The commands README.md and docs/*.md show, the registry that names the test running each one
(tests/docs_commands.yaml), and `run_documented`, through which a test runs a documented command as a
user types it: in bash, from the folder it is given, with this checkout's package first on the path."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
REGISTRY = Path(__file__).parent / "docs_commands.yaml"
FENCE = re.compile(r"^[ \t]*```[a-z]*\n(.*?)^[ \t]*```", re.S | re.M)  # a fence in a list item is indented
# What a user types: the pipeline, the package's commands, the repository's scripts. `exabench/` (a
# folder in a tree) and `exabench: ...` (a message a command prints) are not commands.
COMMAND = re.compile(r"^((snakemake|exabench|python -m exabench|python -c|make)(?=[\s.]|$)|python bench/|bash scripts/|"
                     r"bash results/)")
# Options that plan instead of run: a documented command runs without them unless its documented form has one.
DRY = {"-n", "--dry-run", "--dryrun", "--summary", "--detailed-summary", "--list-target-rules"}


@dataclass(frozen=True)
class Documented:
    doc: str       # README.md, docs/clusters.md
    line: int
    command: str   # as shown, continuation lines joined, a trailing comment dropped


def _indented_blocks(text: str):
    """Markdown's other code block: lines indented 4 spaces and more (6 in a list item), after a blank line,
    outside fences (the docs show commands this way too). Yields (first line number, lines). A prose list's
    continuation lines are indented 2 or 3 and follow text, not a blank line; COMMAND filters what is left."""
    fenced = set()
    for block in FENCE.finditer(text):
        fenced.update(range(text[:block.start()].count("\n"), text[:block.end()].count("\n") + 1))
    lines, i = text.split("\n"), 1
    while i < len(lines):
        if i in fenced or not lines[i].startswith("    ") or lines[i - 1].strip():
            i += 1
            continue
        start = i
        while i < len(lines) and i not in fenced and lines[i].startswith("    "):
            i += 1
        yield start + 1, lines[start:i]


def documented_commands() -> list[Documented]:
    out = []
    for doc in DOCS:
        text = doc.read_text()
        blocks = [(text[:b.start(1)].count("\n") + 1, b.group(1).split("\n")) for b in FENCE.finditer(text)]
        for first, lines in blocks + list(_indented_blocks(text)):
            i = 0
            while i < len(lines):
                at, line = first + i, lines[i]
                while line.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
                line = re.sub(r"\s+#.*$", "", line).strip()
                line = re.sub(r"^\$\s+", "", line)
                for part in (p.strip() for p in line.split(" && ")):
                    if COMMAND.match(part):
                        out.append(Documented(str(doc.relative_to(REPO)), at, " ".join(part.split())))
    return out


RAN: list[tuple[str, str]] = []  # (test, command) of every run_documented call in this session


def registry() -> list[dict]:
    return yaml.safe_load(REGISTRY.read_text())["commands"]


def entries_running(runs: str) -> list[dict]:
    """The registry's entries whose test runs `runs` (several documented commands may share one run)."""
    return [e for e in registry() if "test" in e and e.get("runs", e["command"]) == runs]


def _env(extra: dict | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # snakemake, exabench, python
    env.update(extra or {})
    return env


def run_documented(command: str, *extra: str, fill: dict | None = None, cwd: Path = REPO, env: dict | None = None,
                   timeout: int = 300) -> subprocess.CompletedProcess:
    """Run a documented command as typed (bash -c: globs and quotes are the shell's), its placeholders
    (<site>) filled from `fill` and `extra` arguments appended. Refused unless the registry names the
    calling function as the test of this command, unless every appended argument is explained (`why`),
    and when an appended argument only plans (-n) where the documented form does not."""
    entries = entries_running(command)
    assert entries, f"{REGISTRY.name}: no entry runs `{command}`"
    caller = sys._getframe(1).f_code
    # A function defined inside the test (test_x.<locals>.run) runs it for the test.
    where = f"{Path(caller.co_filename).resolve().relative_to(REPO)}::{caller.co_qualname.split('.<locals>')[0]}"
    for entry in entries:
        assert entry["test"] == where, f"`{command}` is registered to {entry['test']}, but {where} runs it"
        assert not (DRY & set(extra)) - set(shlex.split(entry["command"])), \
            f"`{command}` run with {extra}: a dry run is not a run"
        assert not extra or entry.get("why"), f"{REGISTRY.name}: `{entry['command']}` is run with {extra}: say why"
    RAN.append((where, command))
    line = command
    for placeholder, value in (fill or {}).items():
        line = line.replace(placeholder, value)
    assert not re.search(r"<[a-z-]+>", line), f"`{line}`: a placeholder is not filled"
    line = " ".join([line, *(shlex.quote(a) for a in extra)])
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=_env(env), capture_output=True, text=True,
                          timeout=timeout)


def not_run_by(test: str) -> list[str]:
    """The commands the registry names `test` for that it has not run in this session."""
    ran = {command for where, command in RAN if where == test}
    return sorted({e.get("runs", e["command"]) for e in registry() if e.get("test") == test} - ran)
