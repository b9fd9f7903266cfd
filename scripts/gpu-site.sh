# Sourced by the GPU host scripts (gpu-validate.sh, gpu-llm.sh), not run: the wheels of
# scripts/gpu-wheels.sh installed beside the host's CUDA torch without touching it.
#
#   gpu_site NAME WHEELS WORK
#
# With WHEELS (a folder of .whl; empty: the dependencies are already importable by $PYTHON),
# installs them with pip --no-index --no-deps --target WORK/site and sets `site` to that folder
# (else ""); exports PYTHONPATH=site:the checkout; then checks that `import torch` gives the same
# torch, from the same place, as before. Exits 2 where $PYTHON has no torch, 1 where the wheels
# did not install or torch changed.
# NAME prefixes the messages (stderr).
gpu_site() {
  local name="$1" wheels="$2" work="$3" before after
  local torch_of=(-c 'import torch; print(torch.__version__, torch.__file__)')
  before="$(PYTHONPATH= "$PYTHON" "${torch_of[@]}")" \
    || { echo "$name: $PYTHON has no torch" >&2; exit 2; }
  site=""
  if [ -n "$wheels" ]; then
    site="$work/site"
    echo "$name: installing $(ls "$wheels"/*.whl | wc -l) wheels from $wheels into $site (--no-deps)" >&2
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
      --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl \
      || { echo "$name: the wheels did not install" >&2; exit 1; }
  fi
  export PYTHONPATH="${site:+$site:}$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  after="$("$PYTHON" "${torch_of[@]}")"
  if [ "$before" != "$after" ]; then
    echo "$name: torch changed: $before -> $after" >&2
    exit 1
  fi
  echo "$name: torch ${after%% *} untouched" >&2
}
