#!/usr/bin/env bash
# Build the images (API, worker) with podman or docker, whichever runs here, and with --smoke run
# the compose stack's smoke test on them (tests/deploy/test_stack.py).
#
#   bash scripts/images.sh            build both images; print their sizes and build times
#   bash scripts/images.sh --smoke    build, then bring the stack up and test it end to end
#   bash scripts/images.sh --cold     build without the engine's layer cache (a cold build)
#
# With a registry (a lab's machine with Docker): `docker build` with the Dockerfiles' defaults,
# nothing else. Without one (these development machines: ../shared/notes/containers.md), what
# the images are built from is made here:
#   - the base images from Debian's archive with mmdebstrap: Python 3.11 for the API and the
#     worker (the worker measures on the fake device, with the CPU torch), and Debian's
#     `postgresql` for the database (docker/postgres-debian.Dockerfile);
#   - every wheel in one folder, downloaded with its hash checked against the lock (torch from
#     this machine's disk, where pip finds it), and mounted into the build: no build step goes to
#     the network;
#   - uv from its PyPI wheel.
# It installs what it lacks (podman, runc, mmdebstrap from Debian's packages, as root) as
# scripts/browser.sh does for Chromium. Its state (the wheel folder, base tars, a containers.conf
# for podman) is kept in $OPDB_IMAGES_CACHE (~/.cache/operator-db/images).
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
cold=0
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1; shift ;;  # where no engine can run: says so and exits 0 (unless OPDB_IMAGES_REQUIRED=1)
    --cold) cold=1; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "images.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

cache="${OPDB_IMAGES_CACHE:-$HOME/.cache/operator-db/images}"
mkdir -p "$cache"
tag="${IMAGE_TAG:-latest}"
say() { echo "images.sh: $*" >&2; }
now() { date +%s.%N; }
seconds() { python3 -c "print(f'{$2 - $1:.1f}')"; }

began="$(now)"

# --- the engine -----------------------------------------------------------------------------
engine=""
if command -v docker > /dev/null && docker info > /dev/null 2>&1; then
  engine=docker
else
  if ! command -v podman > /dev/null || ! command -v runc > /dev/null \
      || ! command -v mmdebstrap > /dev/null; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null; then
      say "no container engine can run here: neither a Docker engine nor podman, runc and mmdebstrap, and no root to install them (apt-get install podman runc mmdebstrap)"
      if [ "$smoke" = 1 ] && [ "${OPDB_IMAGES_REQUIRED:-}" != 1 ]; then
        say "the images and the stack's smoke test are NOT checked on this machine"
        exit 0
      fi
      exit 1
    fi
    say "installing podman, runc, mmdebstrap (Debian's packages)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      podman runc mmdebstrap uidmap slirp4netns > "$cache/apt.log" 2>&1) \
      || { say "apt-get failed: $cache/apt.log"; exit 1; }
  fi
  engine=podman
  # crun cannot set rlimits here and cgroups are in hybrid mode: runc on cgroupfs, no ulimits.
  cat > "$cache/containers.conf" <<'EOF'
[containers]
default_ulimits = []
pids_limit = 0
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
EOF
  export CONTAINERS_CONF="$cache/containers.conf"
fi
say "engine: $engine ($("$engine" --version))"

# A registry answers (Docker Hub's /v2/ says 200, or 401 to an anonymous client): the defaults,
# as a lab builds them. OPDB_IMAGES_OFFLINE=1 builds as if none did.
registry=0
if [ "${OPDB_IMAGES_OFFLINE:-}" != 1 ]; then
  case "$(curl -s -m 10 -o /dev/null -w '%{http_code}' https://registry-1.docker.io/v2/ 2> /dev/null)" in
    200|401) registry=1 ;;
    *) ;;
  esac
fi

build_args=()
mounts=()
postgres_image=""  # with a registry: the one compose.yaml names
if [ "$registry" = 0 ]; then
  say "no registry: base images from Debian's archive, wheels from $cache/wheels"
  # --- base images ----------------------------------------------------------------------------
  make_base() {  # NAME PACKAGES
    local name="$1" packages="$2"
    if "$engine" image exists "$name" 2> /dev/null; then
      return
    fi
    say "mmdebstrap bookworm ($packages) -> $name"
    # Without manuals, documentation and translations (about 50 MB).
    mmdebstrap --quiet --variant=minbase --include="$packages" \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      bookworm "$cache/base.tar"
    "$engine" import "$cache/base.tar" "$name" > /dev/null
    rm -f "$cache/base.tar"
  }
  make_base localhost/opdb-debian-python:bookworm python3,python3-venv,ca-certificates
  make_base localhost/opdb-debian-postgresql:bookworm \
    postgresql,postgresql-client,util-linux,ca-certificates
  # --- wheels, by hash --------------------------------------------------------------------------
  wheels="$cache/wheels"
  mkdir -p "$wheels"
  # Downloaded once per lock: the stamp is the locks' own hash (pip checked each file's).
  stamp="$(cat requirements/runtime.txt requirements/worker.txt requirements/torch-cpu.txt \
    requirements/dev.txt | sha256sum | cut -c1-16)"
  pip_download=(python3 -m pip download --quiet --no-deps --require-hashes --dest "$wheels"
    --only-binary :all: --python-version 3.11 --platform manylinux_2_28_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64
    --implementation cp)
  if [ "$(cat "$wheels/.stamp" 2> /dev/null)" != "$stamp" ]; then
    for lock in runtime worker; do
      "${pip_download[@]}" -r "requirements/$lock.txt" 2>&1 | { grep -v "is ignored" || true; }
    done
    # torch's CPU build: from PyTorch's index where it answers, else where pip's find-links (this
    # machine's /opt/wheels) has it; the hash is checked either way.
    torch_index=()
    if curl -fsS -m 10 -o /dev/null https://download.pytorch.org/whl/cpu/torch/ 2> /dev/null; then
      torch_index=(--extra-index-url https://download.pytorch.org/whl/cpu)
    fi
    "${pip_download[@]}" "${torch_index[@]}" -r requirements/torch-cpu.txt 2>&1 \
      | { grep -v "is ignored" || true; }
    # The build backend (pyproject.toml's build-system), for the wheel stage, at the lock's versions.
    .venv/bin/python scripts/lockfile.py select requirements/dev.txt --python 3.11 \
      --only hatchling packaging pathspec pluggy tomlkit trove-classifiers > "$cache/build.txt"
    "${pip_download[@]}" -r "$cache/build.txt" 2>&1 | { grep -v "is ignored" || true; }
    echo "$stamp" > "$wheels/.stamp"
  fi
  # uv, for the worker image, from its PyPI wheel (the image the Dockerfile names is a registry's).
  uv_version="$(sed -n 's|^ARG UV_IMAGE=.*uv:\([0-9.]*\)@.*|\1|p' docker/worker.Dockerfile)"
  if ! "$engine" image exists "localhost/opdb-uv:$uv_version" 2> /dev/null; then
    rm -rf "$cache/uv" && mkdir -p "$cache/uv"
    python3 -m pip download --quiet --no-deps --only-binary :all: --dest "$cache/uv" \
      --platform manylinux_2_17_x86_64 "uv==$uv_version" 2>&1 | { grep -v "is ignored" || true; }
    (cd "$cache/uv" && python3 -m zipfile -e uv-*.whl x && cp x/uv-*.data/scripts/uv ./uv \
      && chmod +x uv && printf 'FROM scratch\nCOPY uv /uv\n' > Containerfile)
    "$engine" build --quiet -t "localhost/opdb-uv:$uv_version" "$cache/uv" > /dev/null
  fi
  mounts=(-v "$wheels:/wheels:ro")
  build_args=(--build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/wheels
    --build-arg UV_NO_INDEX=true --build-arg UV_FIND_LINKS=/wheels
    --build-arg PYTHON_IMAGE=localhost/opdb-debian-python:bookworm)
  worker_args=(--build-arg CUDA_IMAGE=localhost/opdb-debian-python:bookworm
    --build-arg "UV_IMAGE=localhost/opdb-uv:$uv_version"
    --build-arg TORCH_REQUIREMENTS=requirements/torch-cpu.txt
    --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu)
  postgres_image="localhost/opdb-postgres:15-bookworm"
else
  worker_args=()
fi

say "prepared in $(seconds "$began" "$(now)") s (engine, base images, wheels)"

# --- the images ---------------------------------------------------------------------------------
cache_args=()
if [ "$cold" = 1 ]; then
  cache_args=(--no-cache)
fi
build() {  # DOCKERFILE TAG [ARGS...]
  local file="$1" name="$2"; shift 2
  local start end
  start="$(now)"
  "$engine" build "${cache_args[@]}" "${mounts[@]}" "${build_args[@]}" "$@" -f "$file" \
    -t "$name" . > "$cache/build-$(basename "$file" .Dockerfile).log" 2>&1 \
    || { tail -30 "$cache/build-$(basename "$file" .Dockerfile).log" >&2; say "building $name failed"; exit 1; }
  end="$(now)"
  local size
  size="$("$engine" image inspect --format '{{.Size}}' "$name")"
  printf '%-36s %7.0f MB  built in %6s s\n' "$name" "$(python3 -c "print($size / 1e6)")" \
    "$(seconds "$start" "$end")"
}
build docker/api.Dockerfile "operator-db-api:$tag"
build docker/worker.Dockerfile "operator-db-worker:$tag" "${worker_args[@]}"
if [ "$registry" = 0 ]; then
  build docker/postgres-debian.Dockerfile "$postgres_image" \
    --build-arg DEBIAN_IMAGE=localhost/opdb-debian-postgresql:bookworm
fi

say "built in $(seconds "$began" "$(now)") s, preparation included"

if [ "$smoke" = 1 ]; then
  compose_tool=()
  if [ "$engine" = podman ]; then
    # podman's compose, only to validate the file (`config`): its `up` needs systemd for health
    # checks, so the test starts the services itself (tests/deploy/stack.py).
    if [ ! -x "$cache/tools/bin/podman-compose" ]; then
      python3 -m venv "$cache/tools"
      "$cache/tools/bin/pip" install --quiet "podman-compose==1.5.0" 2>&1 | { grep -v "is ignored" || true; }
    fi
    compose_tool=(OPDB_PODMAN_COMPOSE="$cache/tools/bin/podman-compose")
  fi
  say "the stack's smoke test (tests/deploy/test_stack.py)"
  env "${compose_tool[@]}" OPDB_TEST_IMAGES=1 OPDB_IMAGES_ENGINE="$engine" OPDB_IMAGES_TAG="$tag" \
    OPDB_IMAGES_POSTGRES="$postgres_image" OPDB_IMAGES_REPORT="${OPDB_IMAGES_REPORT:-$cache/smoke.json}" \
    .venv/bin/python -m pytest -p no:cacheprovider tests/deploy/test_stack.py -v -rs
  say "figures: ${OPDB_IMAGES_REPORT:-$cache/smoke.json}"
fi
