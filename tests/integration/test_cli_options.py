"""An option given to a command reaches the command, wherever its subcommands repeat it (issue 35:
`exabench history --store X list` read results/history.duckdb, the subcommand's default)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exabench.cli import _subparsers, build_parser

ROOT = Path(__file__).resolve().parents[2]


def nested(parser, path=()):
    """(path of command names, parser, its parent) for every subcommand that has a parent command."""
    for child in _subparsers(parser):
        name = next(n for a in parser._actions if isinstance(a, argparse._SubParsersAction)
                    for n, c in a.choices.items() if c is child)
        if path:
            yield path, name, parser, child
        yield from nested(child, (*path, name))


def fillers(parser) -> list[str]:
    """Values for the parser's required arguments, so that it parses."""
    out = []
    for a in parser._actions:
        if a.option_strings and a.required:
            out += [a.option_strings[0], "x"]
        elif not a.option_strings and not isinstance(a, argparse._SubParsersAction) and a.nargs != "?" \
                and a.nargs != "*":
            out.append("x")
    return out


CASES = [(path, name, a.dest, a.option_strings[0], a.nargs == 0, a.default)
         for path, name, parent, child in nested(build_parser())
         for a in parent._actions if a.option_strings and a.dest != "help"
         and any(b.dest == a.dest for b in child._actions)]


def test_there_are_shadowed_options_to_check():
    assert {("history", "--store"), ("history", "--csv"), ("history", "--markdown")} <= {
        (" ".join(p), o) for p, _, _, o, _, _ in CASES}


@pytest.mark.parametrize("path,name,dest,option,flag,default", CASES,
                         ids=[f"{' '.join(c[0])}-{c[1]}-{c[3]}" for c in CASES])
def test_an_option_before_or_after_the_subcommand_is_the_one_used(path, name, dest, option, flag, default):
    ap = build_parser()
    child = dict((n, c) for p, n, _, c in nested(ap) if p == path)[name]
    given = [option] if flag else [option, "GIVEN"]
    want = True if flag else "GIVEN"
    before = ap.parse_args([*path, *given, name, *fillers(child)])
    after = ap.parse_args([*path, name, *given, *fillers(child)])
    assert getattr(before, dest) == want and getattr(after, dest) == want
    neither = ap.parse_args([*path, name, *fillers(child)])  # the parent's default stands
    assert getattr(neither, dest) == default


@pytest.mark.parametrize("sub", [["list"], ["compare", "latest~1", "latest"], ["regress"], []])
def test_history_reads_the_store_it_is_given(tmp_path, sub):
    store = tmp_path / "mine.duckdb"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "exabench", "history", "--store", str(store), *sub],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert str(store) in res.stderr and "results/history.duckdb" not in res.stderr, res.stderr


@pytest.mark.parametrize("argv,says", [
    (["compare", "--out", "{tmp}/tables", "{tmp}/no-such-records"], "no-such-records: no such file or folder"),
    (["accept", "--references", "r.yaml", "--site-name", "x", "--markdown", "{tmp}/a.md", "--csv", "{tmp}/a.csv",
      "--junit", "{tmp}/a.xml", "{tmp}/gone"], "gone: no such file or folder"),
    (["plots", "--out", "{tmp}/p", "--nodes", "{tmp}/gone-nodes", "--", "{tmp}"], "--nodes: record files"),
    (["references", "--from", "{tmp}/gone", "--site-name", "x", "--out", "{tmp}/r.yaml"], "--source: record files"),
    (["history", "regress", "--alpha", "5"], "--alpha 5.0: not valid"),
    (["history", "regress", "--alpha", "0"], "--alpha 0.0: not valid"),
    (["history", "regress", "--last", "-1"], "--last -1: not valid"),
    (["history", "regress", "--min-change", "-0.5"], "--min-change -0.5: not valid"),
    (["references", "--from-history", "--last", "0", "--site-name", "x", "--out", "{tmp}/r.yaml"], "--last 0"),
])
def test_inputs_that_cannot_work_are_refused_before_anything_is_written(tmp_path, argv, says):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "exabench", *argv], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=120)
    assert res.returncode == 2 and says in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no table, plot or store written
