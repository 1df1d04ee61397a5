#!/usr/bin/env bash
# Makes sure the programs the tests start are installed: redis-server, prometheus (the
# analysis tests query a real one) and, with --browser, Chromium for the dashboard test and
# axe-core, the accessibility checker the browser tests run in each page, fetched from npm
# once into api/testdata/axe/, which git ignores. The Sentinel and Cluster topologies of the tests are
# redis-server too (`redis-server --sentinel`, `--cluster-enabled yes`), so nothing more is
# needed; the check below makes sure the installed one can run a sentinel. Installs them from Debian's packages when run as root;
# otherwise stops with a message saying what to install.
set -euo pipefail

need=()
if ! command -v redis-server >/dev/null 2>&1; then
  need+=(redis-server)
elif [[ $(redis-server --help 2>&1) != *--sentinel* ]]; then
  echo "redis-server in PATH ($(command -v redis-server)) has no sentinel mode; install Redis 6.2 or newer" >&2
  exit 1
fi
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
axe_version=4.10.2
axe_dir="$(cd "$(dirname "$0")/.." && pwd)/api/testdata/axe"
if [[ "${1:-}" == "--browser" ]]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  if [[ ! -f "$axe_dir/axe-$axe_version.min.js" ]] && ! command -v npm >/dev/null 2>&1; then
    need+=(npm)
  fi
fi

# install_axe fetches axe-core's browser build from npm (a pinned version) into $axe_dir.
install_axe() {
  [[ "${1:-}" == "--browser" && ! -f "$axe_dir/axe-$axe_version.min.js" ]] || return 0
  local tmp
  tmp=$(mktemp -d)
  echo "fetching axe-core $axe_version from npm into $axe_dir" >&2
  (cd "$tmp" && npm pack --silent "axe-core@$axe_version" >/dev/null && tar -xzf "axe-core-$axe_version.tgz")
  mkdir -p "$axe_dir"
  cp "$tmp/package/axe.min.js" "$axe_dir/axe-$axe_version.min.js"
  cp "$tmp/package/LICENSE" "$axe_dir/LICENSE"
  rm -rf "$tmp"
}

if [[ ${#need[@]} -eq 0 ]]; then
  install_axe "${1:-}"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "missing: ${need[*]}. Install with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "installing ${need[*]} from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
install_axe "${1:-}"
