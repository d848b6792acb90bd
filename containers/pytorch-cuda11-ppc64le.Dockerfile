# Generated from containers/pytorch-cuda11-ppc64le.def by `python -m exabench.containers dockerfiles` (spython); do not edit.
# Build from the repository root: docker build -f containers/pytorch-cuda11-ppc64le.Dockerfile -t exabench/pytorch-cuda11-ppc64le:0.1.0 .
FROM nvidia/cuda:11.8.0-cudnn8-devel-ubi8 AS spython-base
ADD exabench /opt/exabench/exabench
ADD requirements.txt /opt/exabench/requirements.txt
LABEL org.exabench.version 0.1.0
LABEL org.exabench.stack pytorch-cuda11-ppc64le
LABEL org.exabench.arch ppc64le
LABEL org.exabench.gpu_arch 3.7 6.0 7.0 7.5 8.0 8.6
LABEL org.exabench.legacy Open-CE 1.9.1 (PyTorch 2.0.1, CUDA 11.8): no current wheels exist for ppc64le
LABEL org.exabench.os ubi-8
LABEL org.exabench.python 3.10
LABEL org.exabench.torch 2.0.1
LABEL org.exabench.torchvision 0.15.2
LABEL org.exabench.tensorflow 2.12.0
LABEL org.exabench.cuda 11.8.0
LABEL org.exabench.mpi openmpi-4.1.5
LABEL org.exabench.mpi4py 3.1.4
LABEL org.exabench.horovod 0.28.1
LABEL org.exabench.rocm none
ENV PATH=/opt/venv/bin:/opt/conda/bin:$PATH
ENV PYTHONPATH=/opt/exabench
RUN dnf install -y --setopt=install_weak_deps=False wget bzip2 ca-certificates
RUN dnf clean all
RUN wget -q -O /tmp/miniforge.sh https://github.com/conda-forge/miniforge/releases/download/24.11.3-2/Miniforge3-24.11.3-2-Linux-ppc64le.sh
RUN bash /tmp/miniforge.sh -b -p /opt/conda
RUN rm /tmp/miniforge.sh
RUN /opt/conda/bin/conda create -y -p /opt/venv -c https://ftp.osuosl.org/pub/open-ce/1.9.1/ -c conda-forge python==3.10.13 pytorch==2.0.1 torchvision==0.15.2 tensorflow==2.12.0 horovod==0.28.1 openmpi==4.1.5 mpi4py==3.1.4 numpy==1.23.5
RUN /opt/venv/bin/pip install --no-cache-dir PyYAML==6.0.3 jsonschema==4.26.0 jinja2==3.1.6
RUN /opt/conda/bin/conda install -y -p /opt/venv -c conda-forge h5py==3.9.0 pandas==2.0.3 scikit-learn==1.3.2
RUN /opt/conda/bin/conda clean -y --all
RUN env PYTHONPATH=/opt/exabench /opt/venv/bin/python -c "import exabench, torch, tensorflow, horovod.torch, horovod.tensorflow, mpi4py.MPI"
RUN env PYTHONPATH=/opt/exabench /opt/venv/bin/python -m exabench.containers verify-gpu-arch 3.7 6.0 7.0 7.5 8.0 8.6
CMD exec /opt/venv/bin/python -m exabench "$@"
