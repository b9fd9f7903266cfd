#!/usr/bin/env bash
# The test command: set up .venv, make sure PostgreSQL answers, then lint (ruff check, ruff format
# --check, hadolint on the Dockerfiles), type-check, check the migrations against the models, and
# run the tests (SQLite and PostgreSQL). Extra arguments go to pytest (e.g. -k ingest, -m gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh

pg_url="${OPDB_TEST_POSTGRES_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/test}"
if command -v pg_isready >/dev/null && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    echo "PostgreSQL is not answering; starting it" >&2
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/hadolint --failure-threshold style docker/*.Dockerfile
.venv/bin/mypy
tmpdb="$(mktemp -d)"
trap 'rm -rf "$tmpdb"' EXIT
OPDB_DATABASE_URL="sqlite:///$tmpdb/check.sqlite" .venv/bin/opdb db upgrade >/dev/null
OPDB_DATABASE_URL="sqlite:///$tmpdb/check.sqlite" .venv/bin/alembic check
OPDB_TEST_POSTGRES_URL="$pg_url" .venv/bin/python -m pytest "$@"
