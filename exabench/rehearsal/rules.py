"""The centres' documented rules, as data (rules/<book>.yaml), and the refusal that cites one.

A rule book holds one tool's options and its rules; each rule has the centre's words (`says`) and
the page they come from (`source`). A stand-in refuses by naming a rule of its book, never with
words of its own, so every refusal carries its source.

The rehearsal's state travels in the environment, set by exabench.rehearsal.standins:
EXABENCH_REHEARSAL_SITE (the site file), _LOG (one JSON line per stand-in decision), _STATE (a
folder for the jobs in flight), _RANKS (the most ranks a launch starts here), _JOB and _NODES (set
for the script of an accepted batch job: its id and the nodes its header asked for).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from exabench.errors import ExabenchError

BOOKS = Path(__file__).resolve().parent / "rules"
ENV = "EXABENCH_REHEARSAL_"


@dataclass(frozen=True)
class Rule:
    name: str
    says: str
    source: str


class Refused(ExabenchError):
    """What the centre would refuse: the tool, what broke the rule, the rule's words and source."""

    def __init__(self, tool: str, rule: Rule, detail: str):
        self.tool, self.rule, self.detail = tool, rule, detail
        super().__init__(f"{tool}: refused: {detail}: {rule.says} (rule '{rule.name}', source: {rule.source})")


@lru_cache(maxsize=None)
def book(name: str) -> dict:
    return yaml.safe_load((BOOKS / f"{name}.yaml").read_text())


def rule(book_name: str, name: str) -> Rule:
    entry = book(book_name)["rules"][name]
    return Rule(name, entry["says"], entry["source"])


def refuse(book_name: str, name: str, detail: str) -> Refused:
    return Refused(book(book_name)["tool"], rule(book_name, name), detail)


def setting(name: str, default: str = "") -> str:
    return os.environ.get(ENV + name, default)


def log_event(tool: str, verdict: str, what: str, **extra) -> None:
    """Append one decision to the rehearsal's log (nothing where no rehearsal set one)."""
    path = setting("LOG")
    if not path:
        return
    line = json.dumps({"time": time.time(), "tool": tool, "verdict": verdict, "what": what, **extra})
    with open(path, "a") as f:
        f.write(line + "\n")


def real_command(name: str) -> str:
    """The real command (Slurm's sbatch and srun), found on PATH past the stand-ins' folder."""
    bin_dir = setting("BIN")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir)
    found = shutil.which(name, path=path)
    if found is None:
        raise ExabenchError(f"the rehearsal of a Slurm site runs the real {name}, and this machine has none on PATH; "
                            "valid: the loopback Slurm (bash scripts/slurm-local.sh start)")
    return found
