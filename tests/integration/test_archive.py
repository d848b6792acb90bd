"""Archive and reproduce a finished local campaign (a real Snakemake run of a tiny K-Means
config): every rebuilt table and plot is byte-identical to its original, packing is
deterministic, and an edited record is caught by the sha256 inventory."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile

import pytest

from exabench.analysis import archive
from exabench.errors import ExabenchError
from helpers_compare import env, finished_campaign, scratch_copy, snakemake
from helpers_png import pixels, shows_data

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    campaign = scratch_copy(finished_campaign(tmp_path_factory), tmp_path_factory.mktemp("arch") / "c")
    res = snakemake(campaign, "archive")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    return campaign, campaign / "results/archives/local.tar.gz"


def _exabench(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "exabench", *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=300)


def test_archive_holds_everything_with_an_inventory(packed):
    _, path = packed
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        inventory = tar.extractfile(archive.INVENTORY).read().decode()
    run = "kmeans.tiny.float64.n1r1t1"
    for must in (f"records/{run}.json", f"runs/{run}/job.sh", f"runs/{run}/spec.json", f"runs/{run}/output.log",
                 f"logs/runs/{run}.log", "site/site.yaml", "site/profile.yaml", "lock/requirements.txt", "plan.json",
                 "tables/scaling.csv", "tables/site.parquet", "plots/scaling.png", "archive.json"):
        assert must in names, must
    # the user's --configfile alone made the campaign (it is not merged over config/config.yaml)
    assert {n.split("-", 1)[1] for n in names if n.startswith("config/")} == {"tiny.yaml"}
    listed = {line.split("  ", 1)[1] for line in inventory.splitlines()}
    assert listed == names - {archive.INVENTORY}


def test_reproduce_is_byte_identical(packed, tmp_path):
    campaign, path = packed
    res = _exabench("reproduce", str(path), "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "REPRODUCED" in res.stdout
    rebuilt = tmp_path / "r" / "reproduced"
    for name in ("site.csv", "site.parquet", "site.md", "scaling.csv", "comparison.md", "results.csv",
                 "summary.md"):
        original = campaign / "results/local/tables" / name
        assert (rebuilt / "tables" / name).read_bytes() == original.read_bytes(), name
    drawn = [e["file"] for e in json.loads((campaign / "results/local/plots/index.json").read_text()) if e["file"]]
    assert drawn == ["scaling.png"]  # one benchmark at two sizes: the only picture its records support
    assert sorted(p.name for p in (rebuilt / "plots").glob("*.png")) == drawn
    for name in drawn:
        assert (rebuilt / "plots" / name).read_bytes() == (campaign / "results/local/plots" / name).read_bytes()
        assert shows_data(pixels(rebuilt / "plots" / name)), name


def test_packing_is_deterministic(packed, tmp_path):
    campaign, _ = packed
    digests = []
    for name in ("one.tar.gz", "two.tar.gz"):
        res = _exabench("archive", "--results", "results/local", "--logs", "logs/local", "--site-name", "local",
                        "--site", "profiles/local/site.yaml", "--config", "config/config.yaml", "tiny.yaml",
                        "--out", str(tmp_path / name), cwd=campaign)
        assert res.returncode == 0, res.stderr
        digests.append(hashlib.sha256((tmp_path / name).read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def _repack(src, dest, edit):
    with tarfile.open(src) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(dest, "w:gz") as out:
        for m, data in members:
            data = edit(m.name, data)
            m.size = len(data)
            out.addfile(m, io.BytesIO(data))


def test_edited_record_is_caught(packed, tmp_path):
    _, path = packed
    forged = tmp_path / "forged.tar.gz"
    name = "records/kmeans.tiny.float64.n1r2t1.json"

    def edit(member, data):  # a faster K-Means, the inventory left as packed
        return data.replace(b'"status": "ok"', b'"status": "ok" ', 1) if member == name else data

    _repack(path, forged, edit)
    res = _exabench("reproduce", str(forged), "--out", str(tmp_path / "r"))
    assert res.returncode == 1
    assert f"hash mismatch (edited after packing): {name}" in res.stdout
    assert "NOT REPRODUCED" in res.stdout


def test_edited_value_changes_tables_and_is_caught(packed, tmp_path):
    _, path = packed
    forged = tmp_path / "forged.tar.gz"
    name = "records/kmeans.tiny.float64.n1r1t1.json"

    def edit(member, data):
        if member != name:
            return data
        import json
        rec = json.loads(data)
        rec["metrics"]["time"]["value"] /= 2
        return (json.dumps(rec, indent=2, sort_keys=True) + "\n").encode()

    _repack(path, forged, edit)
    check = archive.reproduce(forged, tmp_path / "r")
    assert check.mismatched == [name] and not check.ok
    assert "tables/site.csv" in check.differing and "tables/scaling.csv" in check.differing


def test_unpack_refuses_escaping_names(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(ExabenchError, match="escape.txt"):
        archive.unpack(bad, tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()


def test_an_archive_repacked_with_plain_tar_still_reproduces(packed, tmp_path):
    # `tar czf` adds folder entries and reorders members: the files and their hashes are what count.
    _, path = packed
    unpacked = tmp_path / "u"
    unpacked.mkdir()
    subprocess.run(["tar", "xzf", str(path), "-C", str(unpacked)], check=True)
    repacked = tmp_path / "repacked.tar.gz"
    subprocess.run(["tar", "czf", str(repacked), "-C", str(unpacked), "."], check=True)
    res = _exabench("reproduce", str(repacked), "--out", str(tmp_path / "r"))
    assert res.returncode == 0 and "REPRODUCED" in res.stdout, res.stdout + res.stderr


def _plain_tar(path):
    """A tarball of some other folder, made by plain tar (written outside the folder it packs, or
    tar may see its own output grow and exit 1)."""
    content = path.parent.parent / "content"
    content.mkdir()
    (content / "x.txt").write_text("x")
    subprocess.run(["tar", "czf", str(path), "-C", str(content), "."], check=True)


@pytest.mark.parametrize("make, says", [
    (lambda p: None, "no such archive file"),
    (lambda p: p.write_bytes(b"not a tar at all"), "not a readable tar archive"),
    (_plain_tar, "not an archive written by `exabench archive`"),
])
def test_reproduce_of_what_is_not_an_archive_says_so_without_a_traceback(tmp_path, make, says):
    target = tmp_path / "in" / "a.tar.gz"
    target.parent.mkdir()
    (target.parent / "x.txt").write_text("x")
    make(target)
    res = _exabench("reproduce", str(target), "--out", str(tmp_path / "r"))
    assert res.returncode == 2 and says in res.stderr and "Traceback" not in res.stderr, res.stderr


SECOND = """\
campaign: second
preset: tiny
repeats: 1
timeout_s: 300
benchmarks:
  - name: pca
    params: {size_per_node: 2000rows, repeats: 2}
    sweep:
      ranks_per_node: [1]
      threads_per_rank: [1]
"""


@pytest.mark.timeout(1800)  # three Snakemake campaigns with their archives: about 8 min on 2 busy cores
def test_two_campaigns_then_a_study_in_one_folder_each_reproduce(tmp_path):
    """An archive holds exactly its own campaign's (or study's) records and rebuilds exactly its tables,
    whatever the results folder saw before: each of three archives from one folder is REPRODUCED. Its
    logs are those of its runs and of the rules that made what it holds: not those of the jobs that
    ran beside it (the ingestion, the report's pages), which Snakemake deletes as they start and an
    earlier campaign had left (packing them failed the archive job now and then)."""
    import shutil

    from helpers_compare import REPO, copy_workflow

    work = copy_workflow(tmp_path / "w")
    shutil.copytree(REPO / "studies", work / "studies")
    (work / "first.yaml").write_text(SECOND.replace("second", "first").replace("pca", "kmeans"))
    (work / "second.yaml").write_text(SECOND)
    steps = {
        "first": ["all", "archive", "--configfile", "first.yaml"],
        "second": ["all", "archive", "--configfile", "second.yaml"],
        "study": ["study", "archive", "--config", "study=coral2-bdas-speedup"],
    }
    owns = {"first": {"kmeans.tiny.float64.n1r1t1"}, "second": {"pca.tiny.float64.n1r1t1"},
            "study": {f"{b}.tiny.float64.n1r2t1" for b in ("kmeans", "pca", "svm")}}
    for name, args in steps.items():
        cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--cores", "2", *args]
        res = subprocess.run(cmd, cwd=work, env=env(), capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, f"{name}: {(res.stdout + res.stderr)[-3000:]}"
        kept = tmp_path / f"{name}.tar.gz"
        shutil.copy2(work / "results/archives/local.tar.gz", kept)
        with tarfile.open(kept) as tar:
            names = set(tar.getnames())
        records = {n[len("records/"):-len(".json")] for n in names if n.startswith("records/") and n.count("/") == 1}
        assert records == owns[name], (name, records)
        studies = {n for n in names if n.startswith("tables/study-")}
        assert studies == ({"tables/study-coral2-bdas-speedup.md", "tables/study-coral2-bdas-speedup.csv"}
                           if name == "study" else set()), (name, studies)
        made_by = ["plan", "plan_json", "aggregate", "compare", "plots", "acceptance_verdicts"]
        made_by += ["study-coral2-bdas-speedup"] if name == "study" else []
        logs = {n for n in names if n.startswith("logs/")}
        assert logs == {f"logs/{m}.log" for m in made_by} | {f"logs/runs/{r}.log" for r in owns[name]}, (name, logs)
    for name in steps:
        res = _exabench("reproduce", str(tmp_path / f"{name}.tar.gz"), "--out", str(tmp_path / f"r-{name}"))
        assert res.returncode == 0 and "REPRODUCED: every hash" in res.stdout, f"{name}: {res.stdout + res.stderr}"
        assert "not rebuilt" not in res.stdout, f"{name}: {res.stdout}"
