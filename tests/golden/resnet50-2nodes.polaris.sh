#!/usr/bin/env bash
#PBS -N resnet50.full.bf16.n2r4t8g1
#PBS -A ABC123
#PBS -q debug
#PBS -l select=2:system=polaris
#PBS -l place=scatter
#PBS -l walltime=01:00:00
#PBS -l filesystems=home:eagle
#PBS -j oe
#PBS -o /scratch/exabench/results/polaris/runs/resnet50.full.bf16.n2r4t8g1/resnet50.full.bf16.n2r4t8g1.out
# exabench job script: run resnet50.full.bf16.n2r4t8g1 (resnet50, full) on site polaris.
# Layout: 2 node(s) x 4 rank(s), 8 thread(s) and 1 GPU(s) per rank, SMT 1.
# Rendered by exabench from workflow/templates/batch/pbs.sh.j2; edit the site or config, not this file.
set -euo pipefail
export OMP_NUM_THREADS=8
export MKL_NUM_THREADS=8
export OPENBLAS_NUM_THREADS=8
export OMP_PLACES=cores
export OMP_PROC_BIND=close
export EXABENCH_RUN_ID=resnet50.full.bf16.n2r4t8g1
cd /scratch/exabench/results/polaris/runs/resnet50.full.bf16.n2r4t8g1
mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth --env OMP_NUM_THREADS=8 bash -c 'r=${PMI_LOCAL_RANK:-0}; k=$1; g=$2; shift 2; first=$(( (r / k) * g )); ids=$(seq -s, "$first" "$(( first + g - 1 ))"); export CUDA_VISIBLE_DEVICES="$ids"; exec "$@"' gpu-affinity 1 1 apptainer exec --nv --bind=/scratch/exabench/results/polaris --bind=/local/scratch --bind=/opt/cray --bind=/var/run/palsd --env=EXABENCH_CONTAINER_DIGEST= --env=EXABENCH_CONTAINER_IMAGE=/scratch/exabench/results/polaris/images/pytorch-cuda.sif --env=EXABENCH_CONTAINER_RUNTIME=apptainer --env=EXABENCH_CONTAINER_STACK=pytorch-cuda --env=EXABENCH_CONTAINER_VERIFIED=0 --env=EXABENCH_RUN_ID=resnet50.full.bf16.n2r4t8g1 --env=MKL_NUM_THREADS=8 --env=OMP_NUM_THREADS=8 --env=OMP_PLACES=cores --env=OMP_PROC_BIND=close --env=OPENBLAS_NUM_THREADS=8 /scratch/exabench/results/polaris/images/pytorch-cuda.sif python3 -m exabench.runner --spec /scratch/exabench/results/polaris/runs/resnet50.full.bf16.n2r4t8g1/spec.json
