"""Local wheel sources for an image build (container.wheels): how each %post pip install is
rewritten, what the site may say, and what the image's labels then say about its torch."""

from __future__ import annotations

import pytest
import yaml

from exabench.campaign.site import load_site
from exabench.containers.build import built_definition
from exabench.containers.recipes import parse_recipe, recipe_path
from exabench.containers.wheels import WheelSources, installed_labels, rewrite_pip, wheel_sources
from exabench.errors import ConfigError
from exabench.config import REPO_ROOT

TORCH = ("/opt/venv/bin/pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu "
         "torch==2.14.1 torchvision==0.29.1")


def test_only_local_folders_means_no_index_and_the_recipes_index_dropped():
    only = WheelSources(folders=("/srv/wheels",), indexes=(), only=True)
    assert rewrite_pip(TORCH, only) == ("/opt/venv/bin/pip install --no-index --find-links /srv/wheels "
                                        "--no-cache-dir torch==2.14.1 torchvision==0.29.1")
    assert rewrite_pip("python3 -m pip install -i https://x/simple --index-url=https://y a==1", only) == \
        "python3 -m pip install --no-index --find-links /srv/wheels a==1"
    assert rewrite_pip("apt-get install -y python3", only) == "apt-get install -y python3"  # not pip
    assert rewrite_pip(TORCH, None) == TORCH


def test_a_local_index_replaces_the_network_or_joins_it():
    idx = ("file:///opt/pypi-more/simple", "file:///opt/pypi/simple")
    assert WheelSources((), idx, True).pip_options() == [
        "--index-url", idx[0], "--extra-index-url", idx[1]]
    assert WheelSources((), idx, False).pip_options() == ["--extra-index-url", idx[0], "--extra-index-url", idx[1]]
    # An index's pages link to files beside it: the folder above it is bound into the build.
    assert WheelSources(("/srv/w",), idx, False).mounts() == ["/opt/pypi", "/opt/pypi-more", "/srv/w"]
    assert WheelSources(("/srv/w",), idx, True).label() == \
        "file:///opt/pypi-more/simple file:///opt/pypi/simple /srv/w (only)"


def test_the_built_definition_shows_pip_as_it_ran_and_keeps_the_pins():
    recipe = parse_recipe(recipe_path("cpu"))
    text = built_definition(recipe, ("base", "core", "frameworks", "check"),
                            WheelSources(("/srv/w",), (), True))
    assert "download.pytorch.org" not in text and "analytics" in text.splitlines()[0]
    assert "    /opt/venv/bin/pip install --no-index --find-links /srv/w --no-cache-dir torch==2.14.1 " \
           "torchvision==0.29.1\n" in text
    assert built_definition(recipe, None, None) == recipe_path("cpu").read_text()


def _site(tmp_path, **container):
    raw = yaml.safe_load((REPO_ROOT / "profiles/local/site.yaml").read_text())
    raw["container"] = {"runtime": "apptainer", **container}
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(raw))
    return load_site(tmp_path / "site.yaml")


def test_the_site_names_folders_that_exist_here(tmp_path):
    (tmp_path / "w").mkdir()
    assert wheel_sources(_site(tmp_path)) is None
    got = wheel_sources(_site(tmp_path, wheels=str(tmp_path / "w")))
    assert got == WheelSources((str(tmp_path / "w"),), (), True)
    got = wheel_sources(_site(tmp_path, wheels=[f"file://{tmp_path}/w"], wheels_only=False))
    assert got == WheelSources((), (f"file://{tmp_path}/w",), False)
    for bad in ("wheels", "https://download.pytorch.org/whl/cpu", str(tmp_path / "missing")):
        with pytest.raises(ConfigError, match=r"container\.wheels.*" + bad.replace(".", r"\.") +
                           r".*absolute folder of wheels \(--find-links\) or a file:///absolute/path index"):
            wheel_sources(_site(tmp_path, wheels=[bad]))


def test_the_images_torch_build_is_read_from_its_files(tmp_path):
    version = tmp_path / "opt/venv/lib/python3.11/site-packages/torch/version.py"
    assert installed_labels(tmp_path) == {}
    version.parent.mkdir(parents=True)
    version.write_text("__version__ = '2.14.1+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n")
    assert installed_labels(tmp_path) == {"org.exabench.torch.installed": "2.14.1+cu130 cuda 13.0"}
    version.write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    assert installed_labels(tmp_path) == {"org.exabench.torch.installed": "2.13.0+cpu cpu"}
