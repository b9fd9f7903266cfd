#!/usr/bin/env bash
# The GPU host kit, part 1, on a machine that reaches PyPI: fill DIR with the wheels a GPU host
# needs for the worker, the CLI, the API and the GPU tests, from the lock
# (requirements/gpu-host.txt: runtime, gpu, models, plot and test), hashes checked, for one CPython
# version on manylinux x86-64. Never torch nor the CUDA libraries (the host's own stay).
#
#   bash scripts/gpu-wheels.sh DIR [--python 3.12] [--glibc 2.35] [--have FILE]
#
#   --python X.Y   the GPU host's Python (default 3.12; `python3 --version` there)
#   --glibc X.Y    the newest manylinux a wheel may ask for (default 2.35; `ldd --version` there)
#   --have FILE    a `pip freeze` of the GPU host (or one name per line): leave out what it already
#                  has, whatever the version, for a smaller folder (its version is then the one
#                  that runs; scripts/gpu-validate.sh records which)
#
# Then carry DIR and the checkout to the GPU host and run scripts/gpu-validate.sh DIR OUT there.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] && [ "${1#-}" = "$1" ] || { sed -n '7,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
dir="$1"; shift
python=3.12 glibc=2.35 have=""
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --glibc) glibc="$2"; shift 2 ;;
    --have) have="$(realpath "$2")"; shift 2 ;;
    *) echo "gpu-wheels.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$python" =~ ^3\.[0-9]+$ ]] || { echo "gpu-wheels.sh: --python X.Y, not $python" >&2; exit 2; }
[[ "$glibc" =~ ^2\.[0-9]+$ ]] || { echo "gpu-wheels.sh: --glibc 2.N, not $glibc" >&2; exit 2; }

bash scripts/bootstrap.sh   # .venv: pip and packaging, to read the lock
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
.venv/bin/python scripts/lockfile.py select requirements/gpu-host.txt --python "$python" \
  ${have:+--have "$have"} > "$tmp/requirements.txt"

# pip matches a manylinux tag exactly: name every one up to the host's glibc.
platforms=(--platform manylinux1_x86_64 --platform manylinux2010_x86_64 --platform manylinux2014_x86_64)
for minor in $(seq 5 "${glibc#2.}"); do
  platforms+=(--platform "manylinux_2_${minor}_x86_64")
done
mkdir -p "$dir"
.venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: --implementation cp --python-version "$python" \
  --abi "cp${python/./}" --abi abi3 --abi none "${platforms[@]}" \
  -d "$dir" -r "$tmp/requirements.txt" 2>&1 | { grep -v "is ignored: it is neither" || true; }
cp "$tmp/requirements.txt" "$dir/requirements.txt"

if ls "$dir" | grep -Ei '^(torch|triton|cuda_|nvidia_)' | grep -viq '^nvidia_ml_py'; then
  echo "gpu-wheels.sh: $dir holds torch or a CUDA library; it must not" >&2
  exit 1
fi
wheels=$(grep -c . "$tmp/requirements.txt")
got=$(ls "$dir"/*.whl | wc -l)
[ "$got" -ge "$wheels" ] || { echo "gpu-wheels.sh: $got wheels for $wheels pins" >&2; exit 1; }
echo "gpu-wheels.sh: $got wheels for CPython $python, manylinux up to glibc $glibc, $(du -sh "$dir" | cut -f1) in $dir" >&2
