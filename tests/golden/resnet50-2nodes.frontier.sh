#!/usr/bin/env bash
#SBATCH --job-name=resnet50.full.bf16.n2r8t7g1
#SBATCH --nodes=2
#SBATCH --ntasks=16
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=7
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
srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=7 --cpu-bind=cores --gpus-per-task=1 --gpu-bind=closest python3 -m exabench.runner --spec /scratch/exabench/results/frontier/runs/resnet50.full.bf16.n2r8t7g1/spec.json
