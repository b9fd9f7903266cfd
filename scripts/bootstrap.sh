#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install operator-db with its development extras, pinned by
# constraints.txt (torch 2.13.0: the local CPU build, not several GB of CUDA packages).
# Re-running is cheap: nothing is reinstalled unless pyproject.toml or constraints.txt changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "operator-db needs Python 3.11 or newer")'
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.opdb-installed"
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "installing operator-db and its dependencies into .venv (first run takes a few minutes)" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip 2>/dev/null || true
  # pip warns about every missing mirror folder of this machine's pip config; keep the log readable.
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[dev]" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  echo "$want" > "$stamp"
fi
