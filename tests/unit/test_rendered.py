"""A run job renders its own files again only when their sources changed (exabench.rendered): the
digest kept in the spec names the plan entry, the site file, the templates and the spec's place."""

from __future__ import annotations

import json

from exabench import rendered
from helpers_runs import rendered_kmeans


def test_a_rendered_run_is_current_until_one_of_its_sources_changes(tmp_path, two_core_site, write_yaml,
                                                                    local_site_dict):
    run, paths = rendered_kmeans(tmp_path, two_core_site)
    entry = json.loads(json.dumps(run.to_dict()))  # as a run job gets it: JSON on its command line
    assert json.loads(paths.spec.read_text())["rendered_from"]
    assert rendered.is_current(paths.spec, entry, two_core_site.path)
    assert not rendered.is_current(paths.spec, {**entry, "timeout_s": entry["timeout_s"] + 1}, two_core_site.path)
    write_yaml("site.yaml", {**local_site_dict, "node": {**local_site_dict["node"], "cores_per_socket": 3}})
    assert not rendered.is_current(paths.spec, entry, two_core_site.path)  # the site file changed
    assert not rendered.is_current(tmp_path / "elsewhere" / "spec.json", entry, two_core_site.path)
    paths.script.unlink()
    assert not rendered.is_current(paths.spec, entry, two_core_site.path)  # no job script: render again


def test_a_site_made_in_code_is_always_rendered(tmp_path, two_core_site):
    import dataclasses
    run, paths = rendered_kmeans(tmp_path, dataclasses.replace(two_core_site, path=""))
    assert json.loads(paths.spec.read_text())["rendered_from"] is None
    assert not rendered.is_current(paths.spec, run.to_dict(), "")
