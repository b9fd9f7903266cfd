# syntax=docker/dockerfile:1
# One `opdb worker` on one NVIDIA GPU: a CUDA build of torch, the project with its `gpu` extra
# (nvidia-ml-py, nvitop). Build from the repository root (docs/deploy.md):
#   docker build -f docker/worker.Dockerfile -t operator-db-worker .
# The CUDA of the base image and of torch go together, and the host's driver must support them:
# CUDA 13.0 needs driver 580 or newer; for an older driver build with, e.g.,
#   --build-arg CUDA_IMAGE=nvidia/cuda:12.6.3-base-ubuntu24.04 \
#   --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
# The `base` flavour is enough: torch's wheels bring their own CUDA runtime, cuBLAS and cuDNN, and
# the NVIDIA container toolkit mounts the driver (libcuda, libnvidia-ml) from the host.

ARG CUDA_IMAGE=nvidia/cuda:13.0.2-base-ubuntu24.04
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.9.26

# The project as a wheel, as in api.Dockerfile.
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator_db/ operator_db/
COPY api/ api/
COPY migrations/ migrations/
COPY measurement_specs/ measurement_specs/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# uv installs a standalone CPython 3.11: Ubuntu 24.04 packages only 3.12.
FROM ${UV_IMAGE} AS uv

FROM ${CUDA_IMAGE}
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_NO_CACHE=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    VIRTUAL_ENV=/opt/opdb \
    PATH=/opt/opdb/bin:$PATH \
    OPDB_DEVICE=nvidia:0
COPY --from=uv /uv /usr/local/bin/uv
RUN uv venv --python 3.11 /opt/opdb \
    && uv pip install --python /opt/opdb/bin/python --index-url "$TORCH_INDEX_URL" \
        "torch==$TORCH_VERSION"
COPY requirements/worker.txt /tmp/worker.txt
COPY --from=wheel /dist/ /tmp/dist/
# Then exactly the lock's versions and files for the gpu extra (hashes checked), and the project
# without its dependencies: nothing may swap the CUDA torch for another build.
RUN uv pip install --python /opt/opdb/bin/python --no-deps --require-hashes -r /tmp/worker.txt \
    && uv pip install --python /opt/opdb/bin/python --no-deps /tmp/dist/operator_db-*.whl \
    && uv pip check --python /opt/opdb/bin/python \
    && rm -rf /tmp/dist /tmp/worker.txt \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/opdb opdb

USER 10001:10001
WORKDIR /home/opdb
# One GPU per container (compose's device_ids, `docker run --gpus device=N`): inside, it is
# nvidia:0 (OPDB_DEVICE above). Exit code 75 after a sticky CUDA error: restart the container
# (restart policy on-failure) for a fresh CUDA context.
ENTRYPOINT ["opdb", "worker"]
