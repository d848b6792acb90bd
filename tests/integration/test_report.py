"""Plots from the golden records and a real default campaign's (byte-stable, holes marked, each
showing data, none drawn that the records do not support), and Snakemake's HTML report of a
finished tiny campaign with the campaign page, the tables and their captions."""

from __future__ import annotations

import json

import pytest

from exabench.analysis import pictures, plots, runs
from exabench.analysis.acceptance import node_outliers
from exabench.analysis.figures import NothingToDraw
from exabench.analysis.frameworks import framework_table
from exabench.records.tidy import load_records
from helpers_compare import DATA, PLAN, finished_campaign, record_paths, scratch_copy, snakemake
from helpers_png import drawn_in, pixels, shows_data

PNG = b"\x89PNG\r\n\x1a\n"
MEASURED = DATA / "measured" / "local"  # a real `make run` of the default campaign (README.md there)


@pytest.fixture(scope="module")
def inputs():
    records = load_records(record_paths())
    return runs.run_table(records, runs.load_plan(PLAN), "local"), records, \
        load_records(sorted((DATA / "nodes").glob("*.json")))


def test_all_plots_written_and_byte_stable(inputs, tmp_path):
    runs, records, nodes = inputs
    first = plots.all_plots(runs, records, nodes, tmp_path / "a")
    second = plots.all_plots(runs, records, nodes, tmp_path / "b")
    assert [e["name"] for e in first] == list(plots.PLOTS)
    drawn = [e["file"] for e in first if e["file"]]
    assert drawn == ["frameworks.png", "sweeps.png", "scaling.png", "precision.png", "allreduce.png", "nodes.png"]
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(drawn)  # no placeholder for the others
    for name in drawn:
        a, b = tmp_path / "a" / name, tmp_path / "b" / name
        assert a.read_bytes()[:8] == PNG and shows_data(pixels(a)), name
        assert a.read_bytes() == b.read_bytes(), name


def test_the_default_campaigns_pictures_show_what_it_measured(tmp_path):
    # A real `make run` of config/config.yaml: PyTorch beside TensorFlow, time to accuracy, K-Means at
    # three k. Those four pictures are drawn, each showing data; the five others are named with why not.
    recs = load_records(sorted(str(p) for p in MEASURED.glob("*.json")))
    summary = plots.write_plots(sorted(str(p) for p in MEASURED.glob("*.json")), [], None, "local", tmp_path)
    assert summary.startswith("4 plots -> ") and summary.endswith("not drawn: 5")
    index = (tmp_path / "index.md").read_text()
    assert "- [Frameworks side by side](frameworks.png)" in index
    assert "- Throughput by precision: not drawn, no workload was run at more than one precision" in index
    assert "- Scaling against ideal: not drawn, no workload was run at more than one size (same" in index
    for name in ("frameworks", "time_to_accuracy", "sweeps", "step_times"):
        assert shows_data(pixels(tmp_path / f"{name}.png")), name
    # Frameworks: the table's figure per stack with the range of its per-step samples around it.
    table = framework_table(runs.run_table(recs))
    panels = pictures.framework_panels(table, {r["run_id"]: r for r in recs})
    resnet = next(p for p in panels if p["title"].startswith("resnet50 (tiny)") and "throughput" in p["ylabel"])
    assert [b["label"] for b in resnet["bars"]] == ["pytorch+native", "tensorflow+native"]
    for bar in resnet["bars"]:
        assert bar["err"][0] > 0 and bar["err"][1] > 0  # six timed steps each: a spread, not a bare bar
    assert any("time to accuracy 0.9" in p["ylabel"] for p in panels)
    # Time to accuracy: each framework's accuracy per epoch, the last at the target.
    curves = pictures.accuracy_curves(recs)
    assert sorted(c["label"].split()[0] for c in curves) == ["pytorch", "tensorflow"]
    assert all(c["accuracy"][-1] >= c["target"] == 0.9 and len(c["wall"]) == len(c["accuracy"]) for c in curves)
    # The K-Means sweep as one line over k; step times of the six runs that time their steps.
    [sweep] = pictures.sweep_series(recs)
    assert (sweep["benchmark"], sweep["key"], [line["x"] for line in sweep["lines"]]) == ("kmeans", "k", [[2, 3, 4]])
    steps = pictures.step_times(recs)  # six runs time their steps, the three K-Means runs their iterations
    assert {k: len(v) for k, v in steps.items()} == {
        ("local", "convnet_cifar10", "step_time"): 4, ("local", "resnet50", "step_time"): 2,
        ("local", "kmeans", "time"): 3}


def test_allreduce_points_from_records(inputs):
    _, records, _ = inputs
    pts = plots.allreduce_points(records)
    assert list(pts.sort_values("bytes")["bytes"]) == [8, 1024, 131072, 1048576]
    assert pts.set_index("bytes").loc[1048576, "busbw"] == 2.5


def test_empty_inputs_draw_no_placeholder_but_say_why(tmp_path):
    empty = runs.pd.DataFrame()
    for draw in (lambda p: plots.plot_scaling(empty, p), lambda p: plots.plot_allreduce([], p),
                 lambda p: plots.plot_nodes(node_outliers([]), p), lambda p: pictures.plot_sweeps([], p),
                 lambda p: pictures.plot_time_to_accuracy([], p), lambda p: pictures.plot_step_times([], p)):
        with pytest.raises(NothingToDraw, match=r"^no "):
            draw(tmp_path / "x.png")
    assert not list(tmp_path.iterdir())


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_snakemake_html_report(tmp_path_factory, tmp_path):
    campaign = scratch_copy(finished_campaign(tmp_path_factory), tmp_path / "c")
    res = snakemake(campaign, "--report", "results/local/report.html")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    html = (campaign / "results/local/report.html").read_text()
    for caption in ("The campaign on one page", "Per site: the headline figure"):
        assert caption in html, caption
    pages = report_pages(html)
    assert "index.html" in pages  # the campaign page, its pictures inline: scaling (one campaign is no history)
    page = (campaign / "results/local/report/index.html").read_text()
    assert '<figure id="scaling">' in page and '<figure id="history">' not in page
    assert "<li>History of each series: no series was run by two or more stored campaigns" in page
    # Tables are HTML tables in the report, not CSV downloads; the verdicts are among them.
    assert not [name for name in pages if name.endswith(".csv")]
    site_table = pages["site.html"][0]
    assert site_table[0][:3] == ["site", "benchmark", "point"] and len(site_table) == 3  # header + 2 runs
    [verdicts] = pages["verdicts.html"]
    assert "verdict" in verdicts[0]
    run_ids = sorted(row[verdicts[0].index("run")] for row in verdicts[1:])
    assert run_ids == ["kmeans.tiny.float64.n1r1t1", "kmeans.tiny.float64.n1r2t1"]
    # The local profile's references judge the 2-rank run (its 1-rank time has no reference entry).
    assert {row[verdicts[0].index("verdict")] for row in verdicts[1:]} <= {"PASS", "FAIL", "NO-REFERENCE"}
    assert pages["regressions.html"] and not [name for name in pages if name.endswith(".md")]
    assert pages["summary.html"][0][0][-2:] == ["status", "error"] and pages["summary.html"][0][1][-2] == "ok"


def report_pages(html: str) -> dict[str, list[list[list[str]]]]:
    """The HTML pages embedded in Snakemake's report (base64 data URIs), by file name: each page's
    <table>s as lists of rows of cell texts."""
    import base64
    import re
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tables, self.cell = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.tables.append([])
            elif tag == "tr":
                self.tables[-1].append([])
            elif tag in ("td", "th"):
                self.cell = ""

        def handle_endtag(self, tag):
            if tag in ("td", "th"):
                self.tables[-1][-1].append(self.cell)
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    pages = {}
    for mime, name, data in re.findall(r"data:([\w/+.-]+);charset=[\w-]+;filename=([^;]+);base64,([A-Za-z0-9+/=]+)",
                                       html):
        parser = Tables()
        if mime == "text/html":
            parser.feed(base64.b64decode(data).decode())
        pages[name] = parser.tables
    return pages


def test_progress_line_and_final_summary(tmp_path):
    import json
    from exabench.pipeline import final_summary
    from exabench.records.progress import progress_line
    res = tmp_path / "results" / "local"
    (res / "records").mkdir(parents=True)
    (res / "plan.json").write_text(json.dumps([{"run_id": r} for r in ("a", "b", "c", "d")]))
    from exabench.records.record import SCHEMA

    def record(run_id, status):
        return json.dumps({"schema": SCHEMA, "run_id": run_id, "benchmark": "kmeans", "status": status, "metrics": {}})

    (res / "records" / "a.json").write_text(record("a", "ok"))
    (res / "records" / "b.json").write_text(record("b", "timeout"))
    (res / "records" / "c.json").write_text('{"status": "ok"')  # torn or foreign: not counted as finished
    (res / "records" / "stray.json").write_text(record("stray", "ok"))  # not planned: not counted
    assert progress_line(res, "b", "timeout") == \
        "exabench progress: b timeout; 2 of 4 runs finished (1 done, 1 failed), 2 remaining"
    text = final_summary(res, "local")
    assert text.splitlines()[0] == "exabench: 1 of 4 runs done, 1 failed, 2 remaining"
    assert f"--report {res}/report.html" in text and "not judged yet" in text and "page:" not in text
    (res / "report").mkdir()
    (res / "report" / "index.html").write_text("<html></html>")
    assert f"  page:        {res}/report/index.html (summary, pictures, tables; opens offline)" in \
        final_summary(res, "local")
    assert f"retry:       exabench retry --results {res}, then" in text  # a run failed
    (res / "acceptance").mkdir()
    (res / "acceptance" / "verdicts.md").write_text("# x\n\nFAILED: b\n")
    assert "verdict:     FAILED: b" in final_summary(res, "local")


def test_progress_counts_against_the_whole_plan_from_the_first_run(tmp_path):
    # The workflow passes every planned run id: before plan.json exists, the first run of a 20-run
    # campaign is "1 of 20", not "1 of 1" (the runs rendered so far).
    import json
    from exabench.records.progress import progress_line
    from exabench.records.record import SCHEMA
    res = tmp_path / "results" / "local"
    (res / "records").mkdir(parents=True)
    (res / "runs" / "r00").mkdir(parents=True)
    (res / "runs" / "r00" / "spec.json").write_text("{}")
    (res / "records" / "r00.json").write_text(json.dumps({"schema": SCHEMA, "run_id": "r00", "benchmark": "kmeans",
                                                          "status": "ok", "metrics": {}}))
    planned = [f"r{i:02d}" for i in range(20)]
    assert progress_line(res, "r00", "ok", planned) == \
        "exabench progress: r00 ok; 1 of 20 runs finished (1 done, 0 failed), 19 remaining"
    assert "1 of 1 runs" in progress_line(res, "r00", "ok")  # without the plan: what is on disk


def test_the_progress_count_trusts_a_noted_status_only_while_its_record_is_unchanged(tmp_path):
    # Each run's status is noted when it ends (the count then reads no record), and read again from
    # a record that changed since (moved back by `exabench restore`, rewritten, torn).
    import json
    from exabench.records.progress import STATUSES_NAME, note_status, progress_counts
    from exabench.records.record import SCHEMA
    res = tmp_path / "results" / "local"
    (res / "records").mkdir(parents=True)
    (res / "runs").mkdir()

    def write(run_id, status):
        (res / "records" / f"{run_id}.json").write_text(json.dumps({"schema": SCHEMA, "run_id": run_id,
                                                                    "status": status}))

    for run_id, status in (("a", "ok"), ("b", "ok"), ("c", "failed")):
        write(run_id, status)
        note_status(res, run_id)
    assert len((res / "runs" / STATUSES_NAME).read_text().splitlines()) == 3
    assert progress_counts(res, ["a", "b", "c", "d"]) == {"planned": 4, "done": 2, "failed": 1, "remaining": 1}
    write("b", "timeout")  # changed since its note: read again
    (res / "records" / "a.json").write_text('{"status": "ok"')  # torn since: not finished
    assert progress_counts(res, ["a", "b", "c", "d"]) == {"planned": 4, "done": 0, "failed": 2, "remaining": 2}


def test_a_precision_bar_never_folds_two_workloads():
    # The ConvNet in throughput mode (142.5 images/s) and in time-to-accuracy mode (193): two panels,
    # each bar a value of its own runs, not the median of both (168).
    from exabench.analysis.runs import run_table

    def rec(mode, value):
        return {"run_id": f"convnet_cifar10.tiny.fp32.mode-{mode}.n1r2t1", "benchmark": "convnet_cifar10",
                "framework": "pytorch", "site": "local", "preset": "tiny",
                "params": {"precision": "fp32", "mode": mode, "batch_size": 32},
                "layout": {"nodes": 1, "ranks_per_node": 2, "ranks": 2, "threads_per_rank": 1, "gpus_per_rank": 0},
                "status": "ok", "workload": {"headline": "throughput", "task": "convnet_cifar10"},
                "metrics": {"throughput": {"value": value, "unit": "images/s", "precision": "fp32"}}}
    panels = plots.precision_panels(run_table([rec("throughput", 142.5), rec("time_to_accuracy", 193.0)]))
    assert [(title, list(bars["value"])) for title, _, bars in panels] == [
        ("convnet_cifar10 on local\nmode=throughput", [142.5]),
        ("convnet_cifar10 on local\nmode=time_to_accuracy", [193.0])]


def test_a_picture_the_records_no_longer_support_is_removed_and_other_files_kept(tmp_path):
    # The folder of an earlier campaign that had a precision sweep; this one has none.
    (tmp_path / "precision.png").write_bytes(b"old")
    (tmp_path / "mine.png").write_bytes(b"a user's own picture")
    plots.write_plots(sorted(str(p) for p in MEASURED.glob("kmeans*.json")), [], None, "local", tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["mine.png", "step_times.png", "sweeps.png"]
    assert json.loads((tmp_path / "index.json").read_text())[2] == {"name": "sweeps", "title": "Sweeps",
                                                                     "file": "sweeps.png", "why": ""}


def test_precision_bars_carry_the_range_of_their_samples(inputs, tmp_path):
    # fp32 at n1r2 is two repeats (18 and 20 images/s): an error bar from 18 to 20 around the median 19.
    runs_, records, _ = inputs
    with_spread = pixels(plots.plot_precision(runs_, tmp_path / "a.png", records))
    bare = pixels(plots.plot_precision(runs_, tmp_path / "b.png"))
    black = [len(drawn_in(img, "black", 0.1)) for img in (with_spread, bare)]
    assert shows_data(with_spread) and black[0] > black[1] + 20
