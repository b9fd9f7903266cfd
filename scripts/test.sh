#!/usr/bin/env bash
# The test command: set up .venv from the lock and Chromium for the browser tests, make sure
# PostgreSQL answers, then lint (ruff check, ruff format --check, hadolint on the Dockerfiles),
# type-check, check the migrations against the models, and run the tests (SQLite and
# PostgreSQL, and the pages in headless Chromium): in parallel on every core
# (OPDB_TEST_WORKERS=N for N), then the tests marked serial (they time the CPU) alone. Extra
# arguments go to one plain pytest run instead (e.g. -k ingest, -m gpu).
#
#   bash scripts/test.sh --latest [PYTEST_ARGS...]   the same checks in .venv-latest, on the
#       newest release of every dependency (torch still pinned): what `scripts/lock.sh --upgrade`
#       would break. Not for CI: CI runs on the lock.
#
# Last, the images: both built and the compose stack's smoke test run on them
# (scripts/images.sh --smoke, tests/deploy/test_stack.py; podman or docker, podman installed
# where missing and the user is root; about 8 min cold, 3 min cached; docs/deploy.md). Where no
# container engine can run, it says why and the rest stands.
#   bash scripts/test.sh --no-images [PYTEST_ARGS...]   everything but the images
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
images=1
if [ "${1:-}" = "--no-images" ]; then
  shift
  images=0
fi
if [ "${1:-}" = "--latest" ]; then
  shift
  venv=.venv-latest
  bash scripts/bootstrap.sh --latest
  "$venv/bin/python" -m pip list --format=freeze 2>/dev/null \
    | grep -iE '^(transformers|pyyaml|sqlalchemy|pydantic|fastapi|pandas|numpy)==' >&2 || true
else
  bash scripts/bootstrap.sh
fi

bash scripts/browser.sh   # Chromium for the browser tests (tests/ui), where it is missing

pg_url="${OPDB_TEST_POSTGRES_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/test}"
if command -v pg_isready >/dev/null && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    echo "PostgreSQL is not answering; starting it" >&2
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
fi

"$venv/bin/ruff" check .
"$venv/bin/ruff" format --check .
"$venv/bin/hadolint" --failure-threshold style docker/*.Dockerfile
"$venv/bin/mypy"
tmpdb="$(mktemp -d)"
trap 'rm -rf "$tmpdb"' EXIT
OPDB_DATABASE_URL="sqlite:///$tmpdb/check.sqlite" "$venv/bin/opdb" db upgrade >/dev/null
OPDB_DATABASE_URL="sqlite:///$tmpdb/check.sqlite" "$venv/bin/alembic" check
if [ $# -eq 0 ]; then
  # On every core (pytest-xdist; each test has its own databases), then the tests that time the
  # CPU alone: a parallel worker would load the cores they time. The 25 slowest tests are
  # printed: where the command's time goes.
  workers="${OPDB_TEST_WORKERS:-$(nproc)}"
  OPDB_TEST_POSTGRES_URL="$pg_url" "$venv/bin/python" -m pytest -n "$workers" -m "not serial" \
    --durations=25
  OPDB_TEST_POSTGRES_URL="$pg_url" "$venv/bin/python" -m pytest -m serial
else
  OPDB_TEST_POSTGRES_URL="$pg_url" "$venv/bin/python" -m pytest "$@"
fi
if [ "$images" = 1 ]; then
  bash scripts/images.sh --smoke
fi
