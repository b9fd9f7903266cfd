#!/usr/bin/env bash
# The main job end to end on the embedded default (SQLite file, CPU): `opdb demo`.
# Extra arguments go to `opdb demo` (e.g. --db sqlite:///demo.sqlite).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/opdb demo "$@"
