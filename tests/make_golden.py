"""Re-render the golden job scripts (tests/golden/*.sh); review the diff before committing."""

from helpers_sites import GOLDEN, render_config, site

for name in ("summit", "frontier", "polaris"):
    [(run_id, text, _)] = render_config(GOLDEN / "resnet50-2nodes.yaml", site(name, python="python3"))
    (GOLDEN / f"resnet50-2nodes.{name}.sh").write_text(text)
    print(f"wrote tests/golden/resnet50-2nodes.{name}.sh ({run_id})")
