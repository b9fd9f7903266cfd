# syntax=docker/dockerfile:1
# The REST API (`opdb serve`) and the one-shot migrations (`opdb db upgrade`, the same image).
# torch is the CPU build: the API imports it only for POST /specs's admission door.
# Build from the repository root (docs/deploy.md):
#   docker build -f docker/api.Dockerfile -t operator-db-api .
# scripts/images.sh builds it where no registry can be reached: a base image made from Debian's
# archive (PYTHON_IMAGE) and every wheel from a folder (PIP_NO_INDEX, PIP_FIND_LINKS).

# Pinned by digest: a tag is moved when the image is rebuilt, a digest never is.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# The project as a wheel (migrations and example specs inside it), built apart so that the
# image holds no source tree.
FROM ${PYTHON_IMAGE} AS wheel
# pip reads these; unset unless given (--build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=DIR).
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

FROM ${PYTHON_IMAGE}
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
# torch from PyTorch's CPU index, never PyPI's (which would be the CUDA build, several GB), and
# only the file whose sha256 requirements/torch-cpu.txt holds. Its C++ tests, headers and build
# tools (190 MB) go in the same step: the API compiles nothing (torch_shm_manager stays).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_REQUIREMENTS=requirements/torch-cpu.txt
# MPLCONFIGDIR: matplotlib's cache in /tmp, where compose's read-only root leaves a tmpfs.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/opdb \
    PATH=/opt/opdb/bin:$PATH
COPY ${TORCH_REQUIREMENTS} /tmp/torch.txt
RUN python3 -m venv /opt/opdb \
    && pip install --no-cache-dir --no-deps --require-hashes --index-url "$TORCH_INDEX_URL" \
        -r /tmp/torch.txt \
    && torch_dir="$(python -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])')" \
    && rm -rf "$torch_dir/test" "$torch_dir/include" \
    && find "$torch_dir/bin" -type f ! -name torch_shm_manager -delete
COPY requirements/runtime.txt /tmp/runtime.txt
# Then exactly the lock's versions and files (hashes checked; torch's own dependencies are in it),
# and the project without its dependencies: nothing may swap torch, nor take a release the tests
# have not seen. Two steps, so that a change of the code alone rebuilds only the second.
RUN pip install --no-cache-dir --no-deps --require-hashes -r /tmp/runtime.txt \
    && rm /tmp/runtime.txt /tmp/torch.txt \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/opdb opdb
COPY --from=wheel /dist/ /tmp/dist/
RUN pip install --no-cache-dir --no-deps /tmp/dist/operator_db-*.whl \
    && pip check \
    && rm -rf /tmp/dist

USER 10001:10001
WORKDIR /home/opdb
EXPOSE 8000
# 503 (database down or behind the code's schema) makes urlopen raise: unhealthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
CMD ["opdb", "serve", "--host", "0.0.0.0", "--port", "8000"]
