"""The rule files are formatted as snakefmt formats them (`make lint` checks the same), so a diff
of a rule file shows what changed, never a re-indentation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO


def test_the_rule_files_are_snakefmt_formatted():
    snakefmt = Path(sys.executable).parent / "snakefmt"  # pinned in requirements.txt, installed by setup
    assert snakefmt.is_file(), f"{snakefmt} is missing: run `bash scripts/setup.sh` (requirements.lock pins it)"
    res = subprocess.run([str(snakefmt), "--check", "Snakefile", "workflow/rules"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)  # its settings: [tool.snakefmt] in pyproject.toml
    assert res.returncode == 0, f"run `snakefmt Snakefile workflow/rules`:\n{res.stdout}{res.stderr}"[-3000:]
    files = 1 + len(list((REPO / "workflow" / "rules").glob("*.smk")))
    assert f"All {files} file(s) would be left unchanged" in res.stderr + res.stdout  # every rule file was read
