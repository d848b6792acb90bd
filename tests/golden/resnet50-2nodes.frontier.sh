#!/usr/bin/env bash
#SBATCH --job-name=resnet50.full.bf16.n2r8t7g1
#SBATCH --nodes=2
#SBATCH --ntasks=16
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=7
#SBATCH --mem=460800M
#SBATCH --time=01:00:00
#SBATCH --account=ABC123
#SBATCH --partition=batch
#SBATCH --output=/scratch/exabench/results/frontier/runs/resnet50.full.bf16.n2r8t7g1/slurm-%j.out
# exabench job script: run resnet50.full.bf16.n2r8t7g1 (resnet50, full) on site frontier.
# Layout: 2 node(s) x 8 rank(s), 7 thread(s) and 1 GPU(s) per rank, SMT 1.
# Rendered by exabench from workflow/templates/batch/slurm.sh.j2; edit the site or config, not this file.
set -euo pipefail
export OMP_NUM_THREADS=7
export MKL_NUM_THREADS=7
export OPENBLAS_NUM_THREADS=7
export OMP_PLACES=cores
export OMP_PROC_BIND=close
export EXABENCH_RUN_ID=resnet50.full.bf16.n2r8t7g1
cd /scratch/exabench/results/frontier/runs/resnet50.full.bf16.n2r8t7g1
srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=7 --cpu-bind=threads --gpus-per-task=1 --gpu-bind=closest apptainer exec --rocm --bind=/scratch/exabench/results/frontier --bind=/mnt/bb --bind=/opt/cray --bind=/var/spool/slurmd --bind=/usr/lib64/libcxi.so.1 --env=EXABENCH_CONTAINER_DIGEST= --env=EXABENCH_CONTAINER_IMAGE=/scratch/exabench/results/frontier/images/pytorch-rocm.sif --env=EXABENCH_CONTAINER_RUNTIME=apptainer --env=EXABENCH_CONTAINER_STACK=pytorch-rocm --env=EXABENCH_CONTAINER_VERIFIED=0 --env=EXABENCH_RUN_ID=resnet50.full.bf16.n2r8t7g1 --env=LD_LIBRARY_PATH=/opt/cray/pe/mpich/default/ofi/gnu/9.1/lib-abi-mpich:/opt/cray/pe/lib64:/opt/cray/libfabric/default/lib64 --env=MKL_NUM_THREADS=7 --env=OMP_NUM_THREADS=7 --env=OMP_PLACES=cores --env=OMP_PROC_BIND=close --env=OPENBLAS_NUM_THREADS=7 /scratch/exabench/results/frontier/images/pytorch-rocm.sif python3 -m exabench.runner --spec /scratch/exabench/results/frontier/runs/resnet50.full.bf16.n2r8t7g1/spec.json
