# syntax=docker/dockerfile:1
# The REST API (`opdb serve`) and the one-shot migrations (`opdb db upgrade`, the same image).
# torch is the CPU build: the API imports it only for POST /specs's admission door.
# Build from the repository root (docs/deploy.md):
#   docker build -f docker/api.Dockerfile -t operator-db-api .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# The project as a wheel (migrations and example specs inside it), built apart so that the
# image holds no source tree.
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator_db/ operator_db/
COPY api/ api/
COPY migrations/ migrations/
COPY measurement_specs/ measurement_specs/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE}
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/opdb \
    PATH=/opt/opdb/bin:$PATH
# torch first, from its CPU index alone: from PyPI it would be the CUDA build (several GB).
RUN python -m venv /opt/opdb \
    && pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" "torch==$TORCH_VERSION"
COPY requirements/runtime.txt /tmp/runtime.txt
COPY --from=wheel /dist/ /tmp/dist/
# Then exactly the lock's versions and files (hashes checked), and the project without its
# dependencies: nothing may swap torch, nor take a release the tests have not seen.
RUN pip install --no-cache-dir --no-deps --require-hashes -r /tmp/runtime.txt \
    && pip install --no-cache-dir --no-deps /tmp/dist/operator_db-*.whl \
    && pip check \
    && rm -rf /tmp/dist /tmp/runtime.txt \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/opdb opdb

USER 10001:10001
WORKDIR /home/opdb
EXPOSE 8000
# 503 (database down or behind the code's schema) makes urlopen raise: unhealthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
CMD ["opdb", "serve", "--host", "0.0.0.0", "--port", "8000"]
