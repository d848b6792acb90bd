"""Parsing the workflow loads no table library: every Snakemake process of a campaign (each `run:`
job, each job step on a compute node) imports exabench.pipeline, and pandas and numpy cost 0.8 s of
each start (exabench/lazy.py). They load, whole, at their first use."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas.core.frame", "numpy.linalg", "pyarrow.lib", "matplotlib.pyplot", "duckdb")


def python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_the_pipeline_loads_no_table_library():
    loaded = python("import sys, exabench.pipeline\n"
                    f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    assert loaded == ""


def test_a_lazy_module_loads_whole_at_its_first_use():
    out = python("import sys\n"
                 "from exabench.analysis import runs\n"
                 "before = 'pandas.core.frame' in sys.modules\n"
                 "frame = runs.pd.DataFrame({'a': [1, 2]})\n"
                 "print(before, int(runs.np.sum(frame['a'])), 'pandas.core.frame' in sys.modules)")
    assert out == "False 3 True"


def test_a_module_already_imported_is_returned_as_it_is():
    out = python("import sys, json\n"
                 "from exabench.lazy import lazy_import\n"
                 "print(lazy_import('json') is json)")
    assert out == "True"
