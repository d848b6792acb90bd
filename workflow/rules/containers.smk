# Container images a site needs, when it names a runtime (exabench/containers/). With Apptainer
# (or Singularity) each stack the planned runs need is built from containers/<stack>.def:
#   apptainer build [--fakeroot] --force <image_dir>/<stack>.sif containers/<stack>.def
# with its digest recorded beside it (<stack>.sif.sha256) and checked against container.digest.
# On a machine without Apptainer but with debootstrap, mksquashfs and siftool (root), the same SIF
# is made without it: the recipe's root file system by debootstrap + chroot, Apptainer's metadata,
# squashfs primary partition (exabench/containers/sif.py; differences in docs/containers.md).
# A site with a prebuilt container.image (path or oras:// / docker:// URI) builds nothing; a native
# site (runtime none, the local profile) builds nothing. Target: `snakemake --profile profiles/<site> containers`.
# The OCI image of a stack is its SIF's root file system as an OCI image layout (<stack>.oci, its
# manifest digest in <stack>.oci.sha256; exabench/containers/oci.py), so the two cannot drift:
# `snakemake ... oci_images` (the OCI images of the SIFs the planned runs need) or `... <image_dir>/cpu.oci`.
# Enroot's squashfs of that OCI image (<stack>.sqsh, its sha256 in <stack>.sqsh.sha256;
# exabench/containers/squashfs.py) is what a Pyxis site runs: `... sqsh_images` or `... <image_dir>/cpu.sqsh`;
# on a pyxis site without container.image, `containers` builds SIF -> OCI -> .sqsh.
# podman-hpc's migrated image store of that OCI image (<stack>.podman-hpc/, the folder `podman-hpc
# migrate` writes into its SQUASH_DIR, made without Podman; its digest in <stack>.podman-hpc.sha256;
# exabench/containers/podman_hpc_store.py): `... podman_hpc_images` or `... <image_dir>/cpu.podman-hpc`.
IMAGE_DIR = str(pipeline.image_dir(SITE, Path(RESULTS).resolve()).resolve())
# Every image the planned runs need (empty for native or prebuilt): render's input on such sites.
CONTAINER_IMAGES = pipeline.needed_images(
    SITE, sorted({run.framework for run in RUNS.values()}), Path(RESULTS).resolve()
)


wildcard_constraints:
    stack="|".join(pipeline.CONTAINER_STACKS),


# The OCI, enroot squashfs and podman-hpc images of the same stacks (rules container_oci,
# container_sqsh, container_podman_hpc).
OCI_IMAGES = [str(Path(image).with_suffix(".oci")) for image in CONTAINER_IMAGES]
SQSH_IMAGES = [str(Path(image).with_suffix(".sqsh")) for image in CONTAINER_IMAGES]
PODMAN_HPC_IMAGES = [str(Path(image).with_suffix(".podman-hpc")) for image in CONTAINER_IMAGES]


localrules:
    containers,
    oci_images,
    sqsh_images,
    podman_hpc_images,


rule containers:
    input:
        CONTAINER_IMAGES,


rule container_image:
    input:
        recipe="containers/{stack}.def",
    output:
        image=f"{IMAGE_DIR}/{{stack}}.sif",
        digest=f"{IMAGE_DIR}/{{stack}}.sif.sha256",
    log:
        f"{LOGS}/containers/{{stack}}.log",
    resources:
        **pipeline.allocation_resources(SITE),  # the site's account and partition, as for the runs
    run:
        pipeline.build_image(SITE, wildcards.stack, output.image, log[0])


rule oci_images:
    input:
        OCI_IMAGES,


rule container_oci:
    input:
        sif=f"{IMAGE_DIR}/{{stack}}.sif",
    output:
        image=directory(f"{IMAGE_DIR}/{{stack}}.oci"),
        digest=f"{IMAGE_DIR}/{{stack}}.oci.sha256",
    log:
        f"{LOGS}/containers/{{stack}}.oci.log",
    resources:
        **pipeline.allocation_resources(SITE),
    run:
        pipeline.build_oci_image(input.sif, output.image, log[0])


rule sqsh_images:
    input:
        SQSH_IMAGES,


rule container_sqsh:
    input:
        oci=f"{IMAGE_DIR}/{{stack}}.oci",
    output:
        image=f"{IMAGE_DIR}/{{stack}}.sqsh",
        digest=f"{IMAGE_DIR}/{{stack}}.sqsh.sha256",
    log:
        f"{LOGS}/containers/{{stack}}.sqsh.log",
    resources:
        **pipeline.allocation_resources(SITE),
    run:
        pipeline.build_sqsh_image(input.oci, output.image, log[0])


rule podman_hpc_images:
    input:
        PODMAN_HPC_IMAGES,


rule container_podman_hpc:
    input:
        oci=f"{IMAGE_DIR}/{{stack}}.oci",
    output:
        store=directory(f"{IMAGE_DIR}/{{stack}}.podman-hpc"),
        digest=f"{IMAGE_DIR}/{{stack}}.podman-hpc.sha256",
    log:
        f"{LOGS}/containers/{{stack}}.podman-hpc.log",
    resources:
        **pipeline.allocation_resources(SITE),
    run:
        pipeline.build_podman_hpc_store(input.oci, output.store, log[0])
