#!/usr/bin/env bash
#BSUB -J resnet50.full.bf16.n2r6t7g1
#BSUB -P ABC123
#BSUB -nnodes 2
#BSUB -W 01:00
#BSUB -q batch
#BSUB -alloc_flags "smt1"
#BSUB -o /scratch/exabench/results/summit/runs/resnet50.full.bf16.n2r6t7g1/lsf-%J.out
#BSUB -e /scratch/exabench/results/summit/runs/resnet50.full.bf16.n2r6t7g1/lsf-%J.err
# exabench job script: run resnet50.full.bf16.n2r6t7g1 (resnet50, full) on site summit.
# Layout: 2 node(s) x 6 rank(s), 7 thread(s) and 1 GPU(s) per rank, SMT 1.
# Rendered by exabench from workflow/templates/batch/lsf.sh.j2; edit the site or config, not this file.
set -euo pipefail
export OMP_NUM_THREADS=7
export MKL_NUM_THREADS=7
export OPENBLAS_NUM_THREADS=7
export OMP_PLACES=cores
export OMP_PROC_BIND=close
export EXABENCH_RUN_ID=resnet50.full.bf16.n2r6t7g1
cd /scratch/exabench/results/summit/runs/resnet50.full.bf16.n2r6t7g1
jsrun -n12 -r6 -a1 -c7 -g1 -bpacked:7 singularity exec --nv --bind=/scratch/exabench/results/summit --bind=/gpfs/alpine/scratch --bind=/mnt/bb --env=EXABENCH_CONTAINER_DIGEST= --env=EXABENCH_CONTAINER_IMAGE=/scratch/exabench/results/summit/images/pytorch-cuda11-ppc64le.sif --env=EXABENCH_CONTAINER_RUNTIME=singularity --env=EXABENCH_CONTAINER_STACK=pytorch-cuda11-ppc64le --env=EXABENCH_CONTAINER_VERIFIED=0 --env=EXABENCH_RUN_ID=resnet50.full.bf16.n2r6t7g1 --env=MKL_NUM_THREADS=7 --env=OMP_NUM_THREADS=7 --env=OMP_PLACES=cores --env=OMP_PROC_BIND=close --env=OPENBLAS_NUM_THREADS=7 /scratch/exabench/results/summit/images/pytorch-cuda11-ppc64le.sif python3 -m exabench.runner --spec /scratch/exabench/results/summit/runs/resnet50.full.bf16.n2r6t7g1/spec.json
