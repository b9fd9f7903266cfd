#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install operator-db from the lock: torch first, pinned by
# constraints.txt (2.13.0: on these machines the local CPU build, not several GB of CUDA packages),
# then exactly the versions and files of requirements/dev.txt (pip --require-hashes --no-deps),
# then the project itself (editable, no dependencies), then `pip check`.
# Re-running is cheap: nothing is reinstalled unless pyproject.toml, constraints.txt or the lock
# changed.
#
#   bash scripts/bootstrap.sh            .venv from the lock (the README's commands, CI)
#   bash scripts/bootstrap.sh --latest   .venv-latest with the newest release of every dependency
#                                        (torch still pinned): what a lock upgrade would bring
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
mode=locked venv=.venv
if [ "${1:-}" = "--latest" ]; then
  mode=latest venv=.venv-latest
fi
if [ ! -x "$venv/bin/python" ]; then
  "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "operator-db needs Python 3.11 or newer")'
  "$PYTHON" -m venv "$venv"
fi
pip() {
  # pip warns about every missing mirror folder of this machine's pip config; keep the log readable.
  "$venv/bin/python" -m pip --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
stamp="$venv/.opdb-installed"
if [ "$mode" = latest ]; then
  want="latest $(date -u +%F)"  # the newest releases of the day
else
  want="$(cat pyproject.toml constraints.txt requirements/dev.txt | sha256sum | cut -c1-16)"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "installing operator-db and its dependencies into $venv (first run takes a few minutes)" >&2
  # torch, with what it needs (the lock then sets those to its own versions).
  pip install --quiet -c constraints.txt torch
  if [ "$mode" = latest ]; then
    pip install --quiet --upgrade --upgrade-strategy eager -c constraints.txt -e ".[dev]"
  else
    pip install --quiet --no-deps --require-hashes -r requirements/dev.txt
    pip install --quiet --no-deps --no-build-isolation -e .
    pip check >&2 || { echo "bootstrap: the lock does not fit pyproject.toml: run bash scripts/lock.sh" >&2; exit 1; }
  fi
  echo "$want" > "$stamp"
fi
# The project's own bytecode: pip compiles every installed package's, but an editable install
# leaves ours to the first import, which a machine with PYTHONDONTWRITEBYTECODE set (these VMs)
# never writes, so every command compiled operator_db again (0.10-0.15 s of `opdb models list`'s
# 0.75-0.9 s on a 2-vCPU Zen 4 VM). Cheap to repeat: up-to-date files are skipped.
"$venv/bin/python" -m compileall -q -j 0 operator_db api >/dev/null
