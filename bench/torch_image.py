"""The cpu stack's image with its frameworks layer (torch, torchvision, TensorFlow): how long
Snakemake takes to build its SIF (without Apptainer: debootstrap + chroot, mksquashfs, siftool)
and the OCI image made from it, how large each is, and a tiny K-Means and a tiny ResNet-50
campaign on 2 ranks in the OCI image (ch-run under mpirun), their records checked for the
image's digest, the runtime, and the torch the image holds.

    PYTHONPATH=. python bench/torch_image.py --work /tmp/torch-image \
        --wheels file:///opt/pypi-more/simple --wheels file:///opt/pypi/simple --network-too

--wheels: the build's local wheel sources (site key container.wheels; none: the recipe's own
indexes, which need download.pytorch.org); --network-too: PyPI stays the index beside them
(container.wheels_only: false). --reuse: a work folder whose images are already built: skip the
build, give the sizes and run the campaigns. Needs root (debootstrap, the chroot), debootstrap,
squashfs-tools, siftool, umoci, charliecloud-runtime, openmpi-bin; the build takes minutes and
about 15 GB of disk while it runs. Prints the times, the sizes and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["base", "core", "frameworks", "check"]  # analytics (h5py, lmdb, pandas) is not needed here
CAMPAIGN = {"timeout_s": 900, "benchmarks": [
    {"name": "kmeans", "preset": "tiny", "sweep": {"ranks_per_node": [2]}},
    {"name": "resnet50", "preset": "tiny", "params": {"scaling": "weak", "precision": "fp32"},
     "sweep": {"ranks_per_node": [2]}}]}


def snakemake(work: Path, site: Path, *targets: str, timeout: int) -> float:
    """Run Snakemake for `targets` with the site; returns its wall time (s)."""
    argv = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--profile",
            str(ROOT / "profiles/local"), *targets, "--configfile", str(work / "config.yaml"), "--config",
            f"site={site}"]
    start = time.monotonic()
    res = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "USER": os.environ.get("USER", "root")})
    if res.returncode != 0:
        sys.exit(f"snakemake {' '.join(targets)} failed:\n{res.stderr[-3000:]}")
    return time.monotonic() - start


def size(path: Path) -> int:
    """Bytes of a file, or of the files under a folder."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--wheels", action="append", default=[], help="a local wheel folder or file:// index")
    ap.add_argument("--network-too", action="store_true", help="PyPI stays the index beside --wheels")
    ap.add_argument("--reuse", action="store_true", help="the images under --work are built: skip the build")
    args = ap.parse_args()
    work, images = args.work.resolve(), args.work.resolve() / "images"
    work.mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load((ROOT / "profiles/local/site.yaml").read_text())
    raw["node"]["cores_per_socket"] = 2
    raw["container"] = {"runtime": "apptainer", "image_dir": str(images), "layers": LAYERS}
    if args.wheels:
        raw["container"].update(wheels=args.wheels, wheels_only=not args.network_too)
    (work / "build-site.yaml").write_text(yaml.safe_dump(raw))
    (work / "config.yaml").write_text(yaml.safe_dump(CAMPAIGN))
    if not (work / "containers").exists():
        (work / "containers").symlink_to(ROOT / "containers")  # the build rule's input, relative to its folder
    sif, layout = images / "cpu.sif", images / "cpu.oci"
    if not args.reuse:
        print(f"load average before the build: {load()}")
        t_sif = snakemake(work, work / "build-site.yaml", "containers", "--forcerun", "container_image", timeout=5400)
        print(f"SIF built in {t_sif:.0f} s (load average {load()})")
        t_oci = snakemake(work, work / "build-site.yaml", "oci_images", timeout=3600)
        print(f"OCI image made from it in {t_oci:.0f} s (load average {load()})")
    digest = (Path(str(layout) + ".sha256").read_text().split() or [""])[0]
    manifest = json.loads((layout / "blobs/sha256" / digest.split(":")[1]).read_text())
    labels = json.loads((layout / "blobs/sha256" / manifest["config"]["digest"].split(":")[1]).read_text())[
        "config"]["Labels"]
    print(f"SIF {sif}: {size(sif) / 1e9:.2f} GB; OCI image {layout}: {size(layout) / 1e9:.2f} GB "
          f"(layer {manifest['layers'][0]['size'] / 1e9:.2f} GB gzip'd), digest {digest}")
    print("labels: " + ", ".join(f"{k}={labels.get(k, '-')}" for k in (
        "org.exabench.layers", "org.exabench.torch", "org.exabench.torch.installed", "org.exabench.wheels")))

    site = dict(raw, name="oci", container={"runtime": "charliecloud", "image": str(layout), "digest": digest,
                                             "env": {"OMPI_MCA_btl_vader_single_copy_mechanism": "none"}})
    (work / "oci-site.yaml").write_text(yaml.safe_dump(site))
    t_run = snakemake(work, work / "oci-site.yaml", "results/oci/tables/results.csv", "--forcerun",
                      "run_benchmark", timeout=3600)
    bundle = Path(str(layout) + ".bundle")
    print(f"campaign (umoci unpack {size(bundle) / 1e9:.2f} GB the first time, then 2 runs) in {t_run:.0f} s "
          f"(load average {load()})")
    for path in sorted((work / "results/oci/records").glob("*.json")):
        rec = json.loads(path.read_text())
        cont, pkgs = rec["provenance"]["container"], rec["provenance"]["packages"]
        print(f"  {rec['benchmark']}: {rec['status']}, {rec['layout']['ranks']} ranks, {cont['runtime']} "
              f"{cont['digest']} (verified {cont['digest_verified']}, same as built: {cont['digest'] == digest}), "
              f"image's torch {pkgs.get('torch', '-')}, numpy {pkgs.get('numpy', '-')}")


if __name__ == "__main__":
    main()
