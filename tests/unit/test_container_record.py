"""The record says which runtime and image digest ran, whatever the runtime: the variables every
runtime's words set (--env=, --set-env=, or `env K=V` for launcher-option runtimes such as Pyxis)
give the ranks' provenance, a run that fails before its ranks start names the image it was rendered
for, and the tidy table has the runtime, image and digest on every row."""

from __future__ import annotations

import shlex

from exabench.campaign.plan import Run
from exabench.campaign.render import RunPaths, render_script, write_run_files
from exabench.campaign.site import load_site, resolve_layout
from exabench.containers import file_digest, provenance_from_env
from exabench.execute import execute
from exabench.records.tidy import tidy_table
from helpers_sites import write_site_with


def _pyxis_site(tmp_path, **extra):
    image = tmp_path / "pytorch.sqsh"
    image.write_bytes(b"hsqs squashfs bytes")
    site = load_site(write_site_with(tmp_path, "dgx-superpod", container={"runtime": "pyxis", "image": str(image),
                                                                          **extra}))
    return site, image


def _run(site):
    return Run(run_id="probe", benchmark="resnet50", suite="x", framework="pytorch", preset="tiny", params={},
               layout=resolve_layout(site, nodes=1), timeout_s=600)


def test_a_pyxis_lines_env_words_give_the_ranks_runtime_image_and_digest(tmp_path):
    site, image = _pyxis_site(tmp_path)
    _, line = render_script(_run(site), site, RunPaths(tmp_path / "results", "probe"))
    words = shlex.split(line)
    env = dict(w.split("=", 1) for w in words[words.index("env") + 1:words.index("python3")])
    assert provenance_from_env(env) == {"runtime": "pyxis", "image": str(image), "stack": "pytorch-cuda",
                                        "digest": file_digest(image), "digest_verified": True}


def test_a_run_failing_before_its_ranks_names_its_image_and_the_table_shows_it(tmp_path):
    site, image = _pyxis_site(tmp_path, binds=[str(tmp_path / "gone")])  # refused at job start
    paths = RunPaths(tmp_path / "results", "probe")
    write_run_files(_run(site), site, paths)
    rec = execute(paths.spec)
    assert rec["status"] == "failed" and "container.binds" in rec["error"]
    df = tidy_table([rec])
    assert df.loc[0, ["container_runtime", "container_image", "container_digest"]].tolist() == \
        ["pyxis", str(image), file_digest(image)]
