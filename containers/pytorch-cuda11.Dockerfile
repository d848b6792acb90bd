# Generated from containers/pytorch-cuda11.def by `python -m exabench.containers dockerfiles` (spython); do not edit.
# Build from the repository root: docker build -f containers/pytorch-cuda11.Dockerfile -t exabench/pytorch-cuda11:0.1.0 .
FROM nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04 AS spython-base
ADD exabench /opt/exabench/exabench
ADD requirements.txt /opt/exabench/requirements.txt
LABEL org.exabench.version 0.1.0
LABEL org.exabench.stack pytorch-cuda11
LABEL org.exabench.arch x86_64
LABEL org.exabench.gpu_arch 3.7 5.0 6.0 7.0 7.5 8.0 8.6 9.0
LABEL org.exabench.legacy torch 2.0.1 with CUDA 11.8: the last wheels with Kepler to Volta kernels
LABEL org.exabench.os ubuntu-22.04
LABEL org.exabench.python 3.10
LABEL org.exabench.torch 2.0.1+cu118
LABEL org.exabench.torchvision 0.15.2+cu118
LABEL org.exabench.tensorflow none
LABEL org.exabench.cuda 11.8.0
LABEL org.exabench.mpi openmpi-4.1.2
LABEL org.exabench.mpi4py 4.1.2
LABEL org.exabench.horovod 0.28.1
LABEL org.exabench.rocm none
ENV PATH=/opt/venv/bin:$PATH
ENV PYTHONPATH=/opt/exabench
RUN apt-get update
RUN DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv python3-dev openmpi-bin libopenmpi-dev cmake g++ ca-certificates
RUN apt-get clean
RUN python3 -m venv /opt/venv
RUN /opt/venv/bin/pip install --no-cache-dir numpy==1.26.4 mpi4py==4.1.2 PyYAML==6.0.3 jsonschema==4.26.0 jinja2==3.1.6
RUN /opt/venv/bin/pip install --no-cache-dir h5py==3.14.0 pandas==2.2.3 scikit-learn==1.5.2
RUN /opt/venv/bin/pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cu118 torch==2.0.1+cu118 torchvision==0.15.2+cu118
RUN /opt/venv/bin/pip download --no-deps --no-binary :all: --dest /opt/src horovod==0.28.1
RUN tar -xzf /opt/src/horovod-0.28.1.tar.gz -C /opt/src
RUN sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' /opt/src/horovod-0.28.1/CMakeLists.txt /opt/src/horovod-0.28.1/horovod/torch/CMakeLists.txt
RUN /opt/venv/bin/pip install --no-cache-dir setuptools==80.9.0 wheel==0.45.1
RUN HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 /opt/venv/bin/pip install --no-cache-dir --no-build-isolation /opt/src/horovod-0.28.1
RUN rm -rf /opt/src
RUN env PYTHONPATH=/opt/exabench /opt/venv/bin/python -c "import exabench, torch, horovod.torch, mpi4py.MPI"
RUN env PYTHONPATH=/opt/exabench /opt/venv/bin/python -m exabench.containers verify-gpu-arch 3.7 5.0 6.0 7.0 7.5 8.0 8.6 9.0
CMD exec /opt/venv/bin/python -m exabench "$@"
