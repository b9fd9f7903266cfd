# syntax=docker/dockerfile:1
# One `opdb worker` on one NVIDIA GPU: a CUDA build of torch, the project with its `gpu` extra
# (nvidia-ml-py, nvitop). Build from the repository root (docs/deploy.md):
#   docker build -f docker/worker.Dockerfile -t operator-db-worker .
# The CUDA of the base image and of torch go together, and the host's driver must support them:
# PyPI's torch 2.13.0 (requirements/torch-cuda.txt) is built for CUDA 13.0, which needs driver
# 580 or newer; docs/deploy.md says how to build for an older driver.
# The `base` flavour is enough: torch's wheels bring their own CUDA runtime, cuBLAS and cuDNN, and
# the NVIDIA container toolkit mounts the driver (libcuda, libnvidia-ml) from the host.
# scripts/images.sh builds it where no registry can be reached: on a Debian base with the CPU
# torch (it measures on the fake device), every wheel from a folder (UV_NO_INDEX, UV_FIND_LINKS).

# Pinned by digest: a tag is moved when the image is rebuilt, a digest never is.
ARG CUDA_IMAGE=nvidia/cuda:13.0.2-base-ubuntu24.04@sha256:2ab6381d970b211fb93853796dc6707eb8a72575a375c422b17cf4d8b2641701
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.9.26@sha256:9a23023be68b2ed09750ae636228e903a54a05ea56ed03a934d00fe9fbeded4b

# The project as a wheel, as in api.Dockerfile.
FROM ${PYTHON_IMAGE} AS wheel
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator_db/ operator_db/
COPY api/ api/
COPY migrations/ migrations/
COPY measurement_specs/ measurement_specs/
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# uv installs a standalone CPython 3.11 where the base has none (Ubuntu 24.04 packages only 3.12).
FROM ${UV_IMAGE} AS uv

FROM ${CUDA_IMAGE}
# Unset unless given (--build-arg UV_NO_INDEX=true --build-arg UV_FIND_LINKS=DIR): uv reads
# UV_FIND_LINKS, and each install passes --no-index where UV_NO_INDEX is set (uv 0.9 takes it
# from the command line only).
ARG UV_NO_INDEX
ARG UV_FIND_LINKS
# torch and the CUDA libraries it pulls in, each file by its sha256 (PyPI's torch is the CUDA
# build); requirements/torch-cpu.txt with TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# gives a worker without a GPU.
ARG TORCH_INDEX_URL=https://pypi.org/simple
ARG TORCH_REQUIREMENTS=requirements/torch-cuda.txt
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_NO_CACHE=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    VIRTUAL_ENV=/opt/opdb \
    PATH=/opt/opdb/bin:$PATH \
    OPDB_DEVICE=nvidia:0
COPY --from=uv /uv /usr/local/bin/uv
COPY ${TORCH_REQUIREMENTS} /tmp/torch.txt
RUN uv venv --python 3.11 /opt/opdb \
    && uv pip install --python /opt/opdb/bin/python --no-deps --require-hashes \
        --index-url "$TORCH_INDEX_URL" ${UV_NO_INDEX:+--no-index} -r /tmp/torch.txt
COPY requirements/worker.txt /tmp/worker.txt
# Then exactly the lock's versions and files for the gpu extra (hashes checked; torch's own
# dependencies are in it), and the project without its dependencies: nothing may swap torch. Two
# steps, so that a change of the code alone rebuilds only the second.
RUN uv pip install --python /opt/opdb/bin/python --no-deps --require-hashes ${UV_NO_INDEX:+--no-index} \
        -r /tmp/worker.txt \
    && rm /tmp/worker.txt /tmp/torch.txt \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/opdb opdb
COPY --from=wheel /dist/ /tmp/dist/
RUN uv pip install --python /opt/opdb/bin/python --no-deps ${UV_NO_INDEX:+--no-index} \
        /tmp/dist/operator_db-*.whl \
    && uv pip check --python /opt/opdb/bin/python \
    && rm -rf /tmp/dist

USER 10001:10001
WORKDIR /home/opdb
# One GPU per container (compose's device_ids, `docker run --gpus device=N`): inside, it is
# nvidia:0 (OPDB_DEVICE above). Exit code 75 after a sticky CUDA error: restart the container
# (restart policy on-failure) for a fresh CUDA context.
ENTRYPOINT ["opdb", "worker"]
