#!/usr/bin/env bash
# The GPU host kit, part 2, on the GPU host, from the checkout, with no package index: install the
# wheels of scripts/gpu-wheels.sh next to the host's CUDA torch without touching it (pip --no-deps
# --target a folder of their own, put first on PYTHONPATH with the checkout), then run
# `opdb doctor` and bench/bench_gpu.py, inside 9 minutes in all.
#
#   bash scripts/gpu-validate.sh [WHEELS] OUT [--dry-run] [--budget-s S] [-- BENCH_ARGS...]
#
#   WHEELS       the folder of scripts/gpu-wheels.sh; left out, the dependencies must already be
#                importable by $PYTHON (default python3)
#   --dry-run    the fake device and tiny sizes (bench_gpu.py --dry-run): the kit checked anywhere
#   --budget-s   the whole run's wall-clock budget, s (default 540: 9 minutes)
#
# OUT holds, flat, with fixed names: gpu-validation.md and .json (the benchmark's figures),
# gpu-validation-pytest.log and .xml (the GPU tests), gpu-validation.sqlite.gz (the measured
# database), doctor.txt (opdb doctor's table) and versions.txt (torch, and each locked package:
# the lock's version, the one that ran, and whether it came from WHEELS or the host).
# Exit code: 0 all passed; 1 a check, a test, the doctor or a target failed; 2 no usable GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
PYTHON="${PYTHON:-python3}"
positional=() dry=() budget=540 bench=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=(--dry-run); shift ;;
    --budget-s) budget="$2"; shift 2 ;;
    --) shift; bench=("$@"); break ;;
    -h|--help) sed -n '7,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-validate.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
case ${#positional[@]} in
  1) wheels="" out="${positional[0]}" ;;
  2) wheels="$(realpath "${positional[0]}")" out="${positional[1]}" ;;
  *) echo "usage: bash scripts/gpu-validate.sh [WHEELS] OUT [--dry-run] [-- BENCH_ARGS...]" >&2; exit 2 ;;
esac
mkdir -p "$out"
out="$(realpath "$out")"
say() { echo "[gpu-validate $((SECONDS - start)) s] $*" >&2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/gpu-site.sh
source scripts/gpu-site.sh
gpu_site gpu-validate.sh "$wheels" "$work"  # sets site, PYTHONPATH; the same torch

"$PYTHON" scripts/lockfile.py versions requirements/gpu-host.txt ${site:+--kit "$site"} \
  > "$out/versions.txt"
missing=$(grep -c ' missing$' "$out/versions.txt" || true)
[ "$missing" = 0 ] || say "warning: $missing locked packages are missing (versions.txt)"

# The doctor's database is a scratch file: it checks that one can be made, and keeps nothing.
export OPDB_DATABASE_URL="sqlite:///$work/doctor.sqlite"
doctor=(--window 1)
[ ${#dry[@]} -eq 0 ] || doctor+=(--device fake)
say "opdb doctor ${doctor[*]}"
doctor_rc=0
"$PYTHON" -m operator_db doctor "${doctor[@]}" > "$out/doctor.txt" 2>&1 || doctor_rc=$?
cat "$out/doctor.txt" >&2

# What is left of the budget, less a minute for writing and a case's overrun, goes to the bench.
left=$((budget - (SECONDS - start) - 60))
[ "$left" -gt 30 ] || { echo "gpu-validate.sh: no time left for the benchmark" >&2; exit 1; }
[ "$left" -le 480 ] || left=480
say "bench/bench_gpu.py --budget-s $left ${dry[*]} ${bench[*]}"
bench_rc=0
"$PYTHON" bench/bench_gpu.py --out "$out" --budget-s "$left" "${dry[@]}" "${bench[@]}" \
  || bench_rc=$?
if [ -f "$out/gpu-validation.sqlite" ]; then
  gzip -f "$out/gpu-validation.sqlite"
fi
say "done: doctor exit $doctor_rc, bench exit $bench_rc; in $out: $(cd "$out" && ls | tr '\n' ' ')"
if [ "$bench_rc" -ne 0 ]; then
  exit "$bench_rc"
fi
[ "$doctor_rc" -eq 0 ] || exit 1
