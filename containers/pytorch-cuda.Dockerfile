# Generated from containers/pytorch-cuda.def by `python -m exabench.containers dockerfiles` (spython); do not edit.
# Build from the repository root: docker build -f containers/pytorch-cuda.Dockerfile -t exabench/pytorch-cuda:0.1.0 .
FROM nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04 AS spython-base
ADD exabench /opt/exabench/exabench
ADD requirements.txt /opt/exabench/requirements.txt
LABEL org.exabench.version 0.1.0
LABEL org.exabench.stack pytorch-cuda
LABEL org.exabench.arch x86_64 aarch64
LABEL org.exabench.gpu_arch 7.5 8.0 8.6 9.0 10.0 12.0
LABEL org.exabench.os ubuntu-24.04
LABEL org.exabench.python 3.12
LABEL org.exabench.torch 2.14.1
LABEL org.exabench.torchvision 0.29.1
LABEL org.exabench.tensorflow none
LABEL org.exabench.cuda 13.0.1
LABEL org.exabench.nccl 2.30.7
LABEL org.exabench.mpi openmpi-4.1.6
LABEL org.exabench.mpi4py 4.1.2
LABEL org.exabench.horovod 0.28.1
LABEL org.exabench.rocm none
ENV PATH=/opt/venv/bin:$PATH
ENV PYTHONPATH=/opt/exabench
RUN apt-get update
RUN DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv python3-dev openmpi-bin libopenmpi-dev cmake g++ ca-certificates
RUN apt-get clean
RUN python3 -m venv /opt/venv
RUN /opt/venv/bin/pip install --no-cache-dir numpy==2.4.6 mpi4py==4.1.2 PyYAML==6.0.3 jsonschema==4.26.0 jinja2==3.1.6
RUN /opt/venv/bin/pip install --no-cache-dir h5py==3.14.0 lmdb==3.0.0 pandas==3.1.1 scikit-learn==1.9.1
RUN /opt/venv/bin/pip install --no-cache-dir torch==2.14.1 torchvision==0.29.1 nvidia-nccl-cu13==2.30.7
RUN /opt/venv/bin/pip download --no-deps --no-binary :all: --dest /opt/src horovod==0.28.1
RUN tar -xzf /opt/src/horovod-0.28.1.tar.gz -C /opt/src
RUN sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' /opt/src/horovod-0.28.1/CMakeLists.txt /opt/src/horovod-0.28.1/horovod/torch/CMakeLists.txt
RUN /opt/venv/bin/pip install --no-cache-dir setuptools==80.9.0 wheel==0.45.1
RUN HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 /opt/venv/bin/pip install --no-cache-dir --no-build-isolation /opt/src/horovod-0.28.1
RUN rm -rf /opt/src
RUN env PYTHONPATH=/opt/exabench /opt/venv/bin/python -c "import exabench, torch, horovod.torch, mpi4py.MPI"
RUN env PYTHONPATH=/opt/exabench /opt/venv/bin/python -m exabench.containers verify-gpu-arch 7.5 8.0 8.6 9.0 10.0 12.0
CMD exec /opt/venv/bin/python -m exabench "$@"
