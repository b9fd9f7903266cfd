#!/usr/bin/env bash
# The browser the UI tests drive (tests/ui): Debian's Chromium at /usr/bin/chromium, installed
# with apt-get where it is missing (as root, or through sudo). Playwright drives it through its
# executable path; it never downloads a browser of its own. OPDB_CHROMIUM names another binary.
set -euo pipefail
chromium="${OPDB_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$chromium" ] || command -v "$chromium" >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "browser.sh: no Chromium at $chromium and no apt-get to install it; install Chromium and set OPDB_CHROMIUM" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
echo "installing Debian's chromium for the browser tests (once)" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null \
  || { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
