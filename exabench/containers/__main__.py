"""`python -m exabench.containers`: regenerate the Dockerfiles, lint the recipes, digest or build an image
(a directory image, a SIF, the OCI image of a SIF, enroot's squashfs or podman-hpc's migrated store of
an OCI image)."""

from __future__ import annotations


from exabench.config import REPO_ROOT

from exabench.containers.build import (build_cache_dir, build_directory_image, build_oci_image, build_podman_hpc_store,
                                      build_sif_image, build_sqsh_image)
from exabench.containers.digests import write_digest
from exabench.containers.recipes import (STACKS, dockerfile, dockerfile_path, lint_recipe, parse_recipe,
                                         recipe_path)


def verify_gpu_arch(capabilities: list[str]) -> int:
    """The build's own list of GPU kernels (no GPU needed) against what the recipe declares."""
    import torch
    flags = torch._C._cuda_getArchFlags().split() if torch.version.cuda else []
    missing = [c for c in capabilities if f"sm_{c.replace('.', '')}" not in flags]
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) ships: {' '.join(flags) or 'no CUDA kernels'}")
    if missing:
        print(f"missing kernels for compute capabilities: {' '.join(missing)}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m exabench.containers",
                                 description="Container recipes, Dockerfiles, digests and builds.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("dockerfiles", help="regenerate containers/<stack>.Dockerfile from the recipes")
    sub.add_parser("lint", help="check every recipe (labels, pins, one command per %%post line)")
    d = sub.add_parser("digest", help="compute an image's digest and record it beside the image")
    d.add_argument("image")
    b = sub.add_parser("build-dir", help="build a Debian-based stack as a Charliecloud directory image")
    b.add_argument("stack")
    b.add_argument("dest")
    b.add_argument("--layers", default="", help="comma-separated %%post layers (default: all)")
    v = sub.add_parser("verify-gpu-arch", help="inside an image: fail unless its torch ships kernels for these "
                                                "compute capabilities (the recipe's org.exabench.gpu_arch)")
    v.add_argument("capabilities", nargs="+")
    s = sub.add_parser("build-sif", help="build a Debian-based stack as a SIF without Apptainer "
                                          "(debootstrap, mksquashfs, siftool)")
    s.add_argument("stack")
    s.add_argument("dest", help="the .sif file to write")
    s.add_argument("--layers", default="", help="comma-separated %%post layers (default: all)")
    o = sub.add_parser("build-oci", help="write a SIF's root file system as an OCI image layout (its digest "
                                         "beside it, <dest>.sha256)")
    o.add_argument("sif")
    o.add_argument("dest", help="the OCI image layout folder to write, e.g. results/images/cpu.oci")
    q = sub.add_parser("build-sqsh", help="write an OCI image as enroot's squashfs image, what Pyxis runs (its "
                                          "sha256 beside it, <dest>.sha256)")
    q.add_argument("oci")
    q.add_argument("dest", help="the .sqsh file to write, e.g. results/images/cpu.sqsh")
    m = sub.add_parser("migrate-podman-hpc", help="write an OCI image as podman-hpc's migrated image store, what "
                                                  "`podman-hpc migrate` writes into its SQUASH_DIR (its digest "
                                                  "beside it, <squash_dir>.sha256)")
    m.add_argument("oci")
    m.add_argument("squash_dir", help="the store folder to write, e.g. results/images/cpu.podman-hpc")
    args = ap.parse_args(argv)
    if args.cmd == "dockerfiles":
        for stack in STACKS:
            dockerfile_path(stack).write_text(dockerfile(recipe_path(stack)))
            print(dockerfile_path(stack).relative_to(REPO_ROOT))
    elif args.cmd == "lint":
        problems = [p for stack in STACKS for p in lint_recipe(recipe_path(stack))]
        print("\n".join(problems) or f"{len(STACKS)} recipes: no problems")
        return 1 if problems else 0
    elif args.cmd == "verify-gpu-arch":
        return verify_gpu_arch(args.capabilities)
    elif args.cmd == "digest":
        print(write_digest(args.image))
    elif args.cmd == "build-oci":
        print(build_oci_image(args.sif, args.dest, "/dev/stdout"))
    elif args.cmd == "build-sqsh":
        print(build_sqsh_image(args.oci, args.dest, "/dev/stdout"))
    elif args.cmd == "migrate-podman-hpc":
        print(build_podman_hpc_store(args.oci, args.squash_dir, "/dev/stdout"))
    elif args.cmd in ("build-dir", "build-sif"):
        build = build_directory_image if args.cmd == "build-dir" else build_sif_image
        layers = tuple(x for x in args.layers.split(",") if x) or None
        import sys
        print(build(parse_recipe(recipe_path(args.stack)), args.dest, layers, log=sys.stdout,
                    cache_dir=build_cache_dir()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
