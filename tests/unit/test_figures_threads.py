"""Pictures drawn side by side in threads, as Snakemake's local rules draw them (the plots, the history
pictures, the archive's trial rebuild): each PNG is byte for byte the one drawn alone."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from exabench.analysis.plots import plot_allreduce

PACKAGE = Path(__file__).resolve().parents[2] / "exabench"


def _records(k: int) -> list[dict]:
    """An allreduce run per k, its bus bandwidth rising differently: every picture has other data."""
    return [{"run_id": f"allreduce.k{k}.r{r}", "status": "ok",
             "metrics": {f"busbw.{2 ** e}B": {"value": (k + 1) * (r + 1) * e ** 1.5, "unit": "GB/s"}
                         for e in range(3, 20)}}
            for r in range(3)]


def test_pictures_drawn_in_threads_are_those_drawn_alone(tmp_path):
    alone = {k: plot_allreduce(_records(k), tmp_path / f"alone-{k}.png").read_bytes() for k in range(4)}
    assert len(set(alone.values())) == 4
    with ThreadPoolExecutor(4) as pool:
        drawn = list(pool.map(lambda job: plot_allreduce(_records(job[0]), tmp_path / f"t{job[1]}-{job[0]}.png"),
                              [(k, i) for i in range(2) for k in range(4)]))
    for path in drawn:
        k = int(path.stem.rsplit("-", 1)[1])
        assert path.read_bytes() == alone[k], path.name


def test_no_picture_uses_pyplot():
    """pyplot's current figure and figure list are shared by every thread of the process."""
    users = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
             if re.search(r"matplotlib\.pyplot|from matplotlib import pyplot", p.read_text())]
    assert users == []
