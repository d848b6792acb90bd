# Container images a site needs, when it names a runtime (exabench/containers.py):
#   apptainer/singularity: `apptainer build [--fakeroot] <image_dir>/<stack>.sif containers/<stack>.def`,
#   with the digest recorded beside it (<stack>.sif.sha256) and checked against container.digest.
# A site with a prebuilt container.image (path or oras:// / docker:// URI) builds nothing; a native
# site (runtime: none, the local profile) builds nothing. Target: `snakemake --profile profiles/<site> containers`.
from exabench import containers as containers_mod

IMAGE_DIR = str(containers_mod.image_dir(SITE, Path(RESULTS).resolve()).resolve())


wildcard_constraints:
    stack="|".join(containers_mod.STACKS),


localrules:
    containers,


def get_container_images(wildcards=None):
    # Render inputs for sites with a runtime: every stack the planned runs need, built first.
    frameworks = sorted({run.framework for run in RUNS.values()})
    return containers_mod.needed_images(SITE, frameworks, Path(RESULTS).resolve())


rule containers:
    input:
        get_container_images,


rule container_image:
    output:
        image=f"{IMAGE_DIR}/{{stack}}.sif",
        digest=f"{IMAGE_DIR}/{{stack}}.sif.sha256",
    input:
        recipe="containers/{stack}.def",
    log:
        f"{LOGS}/containers/{{stack}}.log",
    run:
        containers_mod.build_image(SITE, wildcards.stack, output.image, log[0])
