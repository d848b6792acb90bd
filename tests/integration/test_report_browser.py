"""The campaign's HTML page (results/<site>/report/index.html), made from a real default campaign's
records: self-contained (nothing it loads), summary first, and, opened in headless Chromium, it
renders without console errors and each picture's box on the screen shows data."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from exabench.analysis import acceptance, compare, plots
from exabench.analysis.report_page import write_campaign_page
from exabench.io import atomic_write_text
from exabench.records.tidy import load_records, markdown_summary, tidy_table
from helpers_compare import DATA
from helpers_history import history_of
from helpers_png import pixels, shows_data

from conftest import REPO

MEASURED = DATA / "measured" / "local"
# The page's pictures, in its order: the campaign's, a study's, the history's, the cluster acceptance's.
PICTURES = ["Frameworks side by side", "Time-to-accuracy curves", "Sweeps", "Step-time distributions",
            "Study stampede2-strong-scaling: published against reproduced",
            *(f"History of {b}" for b in ("convnet_cifar10", "convnet_cifar10-keras", "kmeans", "resnet50",
                                          "resnet50-keras")),
            "Nodes x tests (robust z)"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# After the page has loaded: every picture's decoded size and its box on the page, and the page's
# height, written into the page for --dump-dom to print (the page itself has no script).
PROBE = """<script>window.addEventListener("load", () => {
  const boxes = [...document.images].map(i => { const r = i.getBoundingClientRect();
    return {alt: i.alt, natural: i.naturalWidth, x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height}; });
  const pre = document.createElement("pre"); pre.id = "probe";
  pre.textContent = JSON.stringify({boxes, height: document.documentElement.scrollHeight});
  document.body.appendChild(pre); });</script>"""


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    """The campaign page as rule campaign_page writes it, from the measured records."""
    res = tmp_path_factory.mktemp("results")
    paths = sorted(str(p) for p in MEASURED.glob("*.json"))
    atomic_write_text(res / "tables" / "summary.md", markdown_summary(tidy_table(load_records(paths)), "local"))
    compare.write_comparison(paths, None, "local", None, res / "tables")
    plots.write_plots(paths, [], None, "local", res / "plots")
    acceptance.write_verdicts(paths, str(REPO / "profiles/local/references.yaml"), None, "local",
                              *(str(res / "acceptance" / n) for n in ("verdicts.md", "verdicts.csv", "junit.xml")))
    tables = [str(res / "tables" / f"{name}.md") for name in compare.table_names(None)]
    out = res / "report" / "index.html"
    indexes = [res / "plots" / plots.INDEX, _study_picture(res), res / "history" / "pictures.json",
               _heat_map(res)]
    # The history of two stored campaigns, the second's K-Means three times slower.
    history_of(tmp_path_factory.mktemp("store"), [lambda b: 1.0, lambda b: 3.0 if b == "kmeans" else 1.0],
               res / "history")
    write_campaign_page("local", str(res / "tables" / "summary.md"), [str(i) for i in indexes], tables,
                        str(res / "acceptance" / "verdicts.md"), str(out))
    return out


def _study_picture(res: Path) -> Path:
    """A study reproduced on its own machine (ConvNet's strong-scaling efficiency within its
    tolerance), drawn as the study_table rule draws it."""
    from exabench.analysis import studies
    from exabench.analysis.study_picture import write_study_picture
    from exabench.campaign.studies import load_catalogue

    def record(run_id, nodes, value):
        return {"run_id": run_id, "benchmark": "convnet_cifar10", "status": "ok", "params": {"scaling": "strong"},
                "layout": {"nodes": nodes, "ranks_per_node": 1, "threads_per_rank": 64, "gpus_per_rank": 0,
                           "ranks": nodes},
                "workload": {"headline": "throughput", "scaling": "strong"},
                "metrics": {"throughput": {"value": value, "unit": "images/s", "higher_is_better": True}}}

    study = load_catalogue()["stampede2-strong-scaling"]
    df = studies.study_table(study, [record("a1", 1, 100.0), record("a4", 4, 220.0)], "stampede2", "stampede2")
    csv = res / "tables" / "study-stampede2-strong-scaling.csv"
    df.to_csv(csv, index=False)
    write_study_picture(csv, res / "plots" / "study-stampede2-strong-scaling.json")
    return res / "plots" / "study-stampede2-strong-scaling.json"


def _heat_map(res: Path) -> Path:
    """The cluster acceptance's heat map of a synthetic 8-node campaign, one slow node, one slow link."""
    from exabench.analysis import node_verdict as nv
    from helpers_node_verdict import _campaign

    out = res / "acceptance" / "cluster" / "plots"
    verdict = nv.judge(*_campaign(slow_node="n03", slow_link="n06"))
    entry = plots.draw("heat_map", "Nodes x tests (robust z)", lambda p: plots.plot_node_heat_map(verdict, p),
                       out / "heat_map.png")
    plots.write_index([entry], out / "index.json")
    return out / "index.json"


def test_the_page_is_self_contained_summary_first(page):
    html = page.read_text()
    # Nothing to fetch: no link, script or stylesheet from elsewhere; the pictures are data URIs.
    assert "http:" not in html and "https:" not in html and "<script" not in html and "<link" not in html
    sources = [s.split('"')[0] for s in html.split(' src="')[1:]]
    assert len(sources) == len(PICTURES) and all(s.startswith("data:image/png;base64,") for s in sources)
    order = [html.index(s) for s in ("<h2>Summary</h2>", "<h2>Pictures</h2>", "<h2>Tables</h2>")]
    assert order == sorted(order)
    assert "<p>9 of 9 runs ok, 0 not ok.</p>" in html
    assert "Verdict: ACCEPTED: 2 of 9 runs judged, none fails; 7 await references from this machine&#x27;s" in html
    assert "<li>Throughput by precision: no workload was run at more than one precision</li>" in html
    assert 'id="table-frameworks"' in html and 'id="table-verdicts"' in html


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (bash scripts/setup.sh --test installs it)")
def test_chromium_renders_the_page_and_every_picture_shows_data(page, tmp_path):
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    url = probed.as_uri()
    dom, log = _chromium(tmp_path, "--dump-dom", "--window-size=1280,800", url)  # laid out as the screenshot is
    assert not [ln for ln in log.splitlines() if ":CONSOLE" in ln], log[-3000:]  # no error, no message at all
    probe = json.loads(dom.split('<pre id="probe">')[1].split("</pre>")[0].replace("&quot;", '"'))
    assert [b["alt"] for b in probe["boxes"]] == PICTURES
    shot = tmp_path / "page.png"
    _, log = _chromium(tmp_path, f"--screenshot={shot}", f"--window-size=1280,{probe['height']}", url)
    img = pixels(shot)
    assert img.shape[:2] == (probe["height"], 1280), log[-3000:]
    for box in probe["boxes"]:
        assert box["natural"] > 0 and box["w"] > 100 and box["h"] > 100, box  # decoded and laid out
        y, x = int(box["y"]), int(box["x"])
        assert shows_data(img[y:y + int(box["h"]), x:x + int(box["w"])]), box["alt"]


def _chromium(tmp_path: Path, *args: str) -> tuple[str, str]:
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--enable-logging=stderr",
           "--v=0", "--force-device-scale-factor=1", "--virtual-time-budget=5000",
           f"--user-data-dir={tmp_path / 'profile'}", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout, res.stderr
