#!/usr/bin/env bash
# Makes sure the programs the tests start are installed: redis-server, prometheus (the
# analysis tests query a real one) and, with --browser, Chromium for the dashboard test. The Sentinel and Cluster topologies of the tests are
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
if [[ "${1:-}" == "--browser" ]]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
fi
[[ ${#need[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "missing: ${need[*]}. Install with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "installing ${need[*]} from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
