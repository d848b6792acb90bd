# Generated from containers/cpu.def by `python -m exabench.containers dockerfiles` (spython); do not edit.
# Build from the repository root: docker build -f containers/cpu.Dockerfile -t exabench/cpu:0.1.0 .
FROM debian:bookworm-20250520-slim AS spython-base
ADD exabench /opt/exabench/exabench
ADD requirements.txt /opt/exabench/requirements.txt
LABEL org.exabench.version 0.1.0
LABEL org.exabench.stack cpu
LABEL org.exabench.arch x86_64
LABEL org.exabench.gpu_arch none
LABEL org.exabench.os debian-12
LABEL org.exabench.python 3.11
LABEL org.exabench.torch 2.14.1
LABEL org.exabench.torchvision 0.29.1
LABEL org.exabench.tensorflow 2.21.0
LABEL org.exabench.mpi openmpi-4.1.4
LABEL org.exabench.mpi4py 4.1.2
LABEL org.exabench.horovod none
LABEL org.exabench.cuda none
LABEL org.exabench.rocm none
ENV PATH=/opt/venv/bin:$PATH
ENV PYTHONPATH=/opt/exabench
RUN apt-get update
RUN apt-get install -y --no-install-recommends python3 python3-venv openmpi-bin libopenmpi-dev ca-certificates
RUN apt-get clean
RUN python3 -m venv /opt/venv
RUN /opt/venv/bin/pip install --no-cache-dir numpy==2.4.6 mpi4py==4.1.2 PyYAML==6.0.3 jsonschema==4.26.0 jinja2==3.1.6
RUN /opt/venv/bin/pip install --no-cache-dir h5py==3.14.0 lmdb==3.0.0 pandas==3.1.1 scikit-learn==1.9.1
RUN /opt/venv/bin/pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu torch==2.14.1 torchvision==0.29.1
RUN /opt/venv/bin/pip install --no-cache-dir tensorflow-cpu==2.21.0
RUN env PYTHONPATH=/opt/exabench /opt/venv/bin/python -c "import exabench, numpy, mpi4py.MPI"
CMD exec /opt/venv/bin/python -m exabench "$@"
