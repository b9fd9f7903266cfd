#!/usr/bin/env bash
# The lock: every dependency of every extra, resolved once for Python 3.11 and 3.12 (one universal
# resolution; a package whose newest release dropped 3.11 gets a pin per version, by marker) and
# pinned with the sha256 of each of its files, in requirements/*.txt (pip's format, installed with
# --require-hashes). uv resolves; pip installs, because pip finds the CPU torch on this machine's
# disk (uv would download a CUDA build of several GB) and is what a GPU host already has.
#
#   bash scripts/lock.sh                        re-resolve after editing pyproject.toml, keeping
#                                               every pin that still fits
#   bash scripts/lock.sh --upgrade              the newest release of everything (then run
#                                               bash scripts/test.sh and commit the lock with it)
#   bash scripts/lock.sh --upgrade-package X    the newest X (repeatable)
#
# Left out of every file: torch (pinned by constraints.txt and installed first; a GPU host brings
# its own) and the CUDA libraries torch's Linux wheels pull in (triton, cuda-*, nvidia-* but
# nvidia-ml-py). torch's pure-Python dependencies (sympy, networkx, ...) are locked.
#
#   requirements/dev.txt       everything: the dev extra (gpu, models, plot, test, linters) and the
#                              build backend; scripts/bootstrap.sh installs it, so the README's
#                              commands and CI run on exactly this
#   requirements/runtime.txt   `pip install operator-db`: the API image (docker/api.Dockerfile)
#   requirements/worker.txt    runtime + gpu: the worker image (docker/worker.Dockerfile)
#   requirements/gpu-host.txt  runtime + gpu, models, plot, test: what a GPU host needs for the
#                              worker, the CLI, the API and the GPU tests (scripts/gpu-wheels.sh)
#   requirements/torch-*.txt   torch for the images, by hash (below)
# Every file but dev.txt is resolved within dev.txt's pins: a package has one version everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

upgrade=()
while [ $# -gt 0 ]; do
  case "$1" in
    --upgrade) upgrade+=(--upgrade); shift ;;
    --upgrade-package) upgrade+=(--upgrade-package "$2"); shift 2 ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "lock.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ -x .venv/bin/uv ]; then
  uv=.venv/bin/uv
else  # no .venv yet (or a lock too broken to bootstrap): uv in a throwaway venv
  python3 -m venv "$tmp/uv-venv"
  "$tmp/uv-venv/bin/python" -m pip install --quiet "uv>=0.9" 2>&1 | { grep -v "is ignored" || true; }
  uv="$tmp/uv-venv/bin/uv"
fi

# The build backend, so that `pip install --no-build-isolation -e .` needs nothing unlocked
# (hatchling asks for editables to build an editable install).
python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' \
  > "$tmp/build.in"
echo editables >> "$tmp/build.in"

common=(--universal --python-version 3.11 --generate-hashes -c constraints.txt --quiet)
header=(--custom-compile-command "bash scripts/lock.sh")
mkdir -p requirements

# torch's CUDA libraries: whatever the resolution names that matches, found from a first pass.
"$uv" pip compile pyproject.toml "$tmp/build.in" --extra dev "${common[@]}" --no-header \
  --no-annotate -o "$tmp/names.txt"
skip=(--no-emit-package torch)
while read -r name; do
  skip+=(--no-emit-package "$name")
done < <(sed -n 's/^\([A-Za-z0-9._-]*\)==.*/\1/p' "$tmp/names.txt" \
  | grep -E '^(triton|cuda-.*|nvidia-.*)$' | grep -vx 'nvidia-ml-py' || true)

# With an existing output file uv keeps its pins where they still fit (--upgrade drops them).
"$uv" pip compile pyproject.toml "$tmp/build.in" --extra dev "${common[@]}" "${header[@]}" \
  "${skip[@]}" "${upgrade[@]}" -o requirements/dev.txt
compile_within_dev() {  # OUTPUT EXTRA...
  local out="$1"; shift
  local extras=()
  for e in "$@"; do extras+=(--extra "$e"); done
  "$uv" pip compile pyproject.toml "${extras[@]}" "${common[@]}" "${header[@]}" "${skip[@]}" \
    -c requirements/dev.txt -o "$out"
}
compile_within_dev requirements/runtime.txt
compile_within_dev requirements/worker.txt gpu
compile_within_dev requirements/gpu-host.txt gpu models plot test

# torch for the images, by hash, apart from the files above (which leave torch out):
#   requirements/torch-cpu.txt   the CPU build (the API image; the worker image built without a
#                                GPU), from PyTorch's CPU index, or from this machine's disk where
#                                the index cannot be reached: the file is the same
#   requirements/torch-cuda.txt  PyPI's build (CUDA 13) and the CUDA libraries it pulls in (the
#                                worker image); the rest of its dependencies are in worker.txt
torch_pin="$(grep -E '^torch==' constraints.txt)"
echo "$torch_pin" > "$tmp/torch.in"
worker_names=()
while read -r name; do
  worker_names+=(--no-emit-package "$name")
done < <(sed -n 's/^\([A-Za-z0-9._-]*\)==.*/\1/p' requirements/worker.txt)
torch_common=(--python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes
  --quiet "${header[@]}")
if curl -fsS -m 20 -o /dev/null https://download.pytorch.org/whl/cpu/torch/ 2>/dev/null; then
  sed "s/\$/+cpu/" "$tmp/torch.in" > "$tmp/torch-cpu.in"
  "$uv" pip compile "$tmp/torch-cpu.in" "${torch_common[@]}" --no-annotate --no-deps \
    --index-url https://download.pytorch.org/whl/cpu -o requirements/torch-cpu.txt
else  # uv records no hash for a file found on disk: the file's own sha256
  wheel="$(ls "${TORCH_WHEELS:-/opt/wheels}/${torch_pin/==/-}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")"
  { printf '# This file was autogenerated by uv via the following command:\n#    bash scripts/lock.sh\n'
    printf '# (from %s: the same file as PyPI'"'"'s CPU index has)\n' "$(basename "$wheel")"
    printf '%s+cpu \\\n    --hash=sha256:%s\n' "$torch_pin" "$(sha256sum "$wheel" | cut -d' ' -f1)"
  } > requirements/torch-cpu.txt
fi
"$uv" pip compile "$tmp/torch.in" "${torch_common[@]}" --no-annotate --index-url https://pypi.org/simple \
  -c requirements/worker.txt "${worker_names[@]}" -o requirements/torch-cuda.txt

# Every pin must have a wheel for CPython 3.11 and 3.12 on manylinux x86-64 (a GPU host installs
# wheels only): resolve each file again for those targets, binaries only.
for version in 3.11 3.12; do
  "$uv" pip compile requirements/dev.txt --python-version "$version" \
    --python-platform x86_64-manylinux_2_28 --only-binary :all: --no-deps --quiet -o /dev/null \
    || { echo "lock.sh: a pin of requirements/dev.txt has no wheel for Python $version" >&2; exit 1; }
done
echo "lock.sh: requirements/{dev,runtime,worker,gpu-host,torch-cpu,torch-cuda}.txt written; now run bash scripts/test.sh" >&2
