#!/usr/bin/env bash
# Makes docs/dashboard.png, the picture README shows as "The dashboard during the demo": it
# builds the binary, starts `orchestrator demo` on a free port, waits until the demo pipeline's
# run deploys its first wave in Phase 2, and has headless Chromium take the run's page. Then,
# once the demo's runs have ended, it takes the other pages of that same demo into docs/:
# dashboard-timeline.png (the run's page with its timeline), dashboard-index.png,
# dashboard-services.png, dashboard-lock-history.png and dashboard-delivery.png.
#
# Usage: scripts/dashboard-screenshot.sh [OUT.png]   (default docs/dashboard.png)
# Needs go and Chromium (scripts/ensure-deps.sh --browser installs it; ORCH_CHROMIUM names
# another binary, as for the browser tests).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/dashboard.png}
width=1280 height=1240

chromium=${ORCH_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [[ -z "$chromium" ]]; then
  echo "chromium not found: run scripts/ensure-deps.sh --browser as root, or set ORCH_CHROMIUM" >&2
  exit 1
fi

tmp=$(mktemp -d)
demo=
cleanup() {
  if [[ -n "$demo" ]]; then
    kill "$demo" 2>/dev/null || true
    wait "$demo" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/orchestrator" ./cmd/orchestrator
"$tmp/orchestrator" demo --listen 127.0.0.1:0 >"$tmp/demo.log" 2>&1 &
demo=$!

# The demo prints the dashboard's address, then "[demo    ] run ID queued: URL" for its runs.
base= run=
for _ in $(seq 300); do
  base=$(sed -n 's|.*dashboard at \(http://[0-9.:]*\)/.*|\1|p' "$tmp/demo.log" | head -n1)
  run=$(sed -n 's|^\[demo\] run \([0-9A-Z]*\) queued:.*|\1|p' "$tmp/demo.log" | head -n1)
  [[ -n "$base" && -n "$run" ]] && break
  kill -0 "$demo" 2>/dev/null || { cat "$tmp/demo.log" >&2; exit 1; }
  sleep 0.1
done
if [[ -z "$base" || -z "$run" ]]; then
  echo "the demo did not start its runs within 30s:" >&2
  cat "$tmp/demo.log" >&2
  exit 1
fi

# Wait for Phase 2's first wave: both of its services deploying (the demo reads are public).
running='"phase":"phase2","name":"[a-z]*","uuid":"[0-9a-z]*","status":"running"'
for _ in $(seq 600); do
  n=$(curl -fsS "$base/v1/runs/$run" | grep -o "$running" | wc -l || true)
  [[ "$n" -ge 2 ]] && break
  sleep 0.05
done
if [[ "${n:-0}" -lt 2 ]]; then
  echo "the demo run $run never had its first wave deploying" >&2
  exit 1
fi

profile="$tmp/chromium-profile"
"$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --window-size="$width,$height" --screenshot="$out" "$base/runs/$run" 2>"$tmp/chromium.log" || {
  cat "$tmp/chromium.log" >&2
  exit 1
}
echo "wrote $out: run $run of the demo pipeline, $base/runs/$run"

# The other pages, once the demo's runs have ended (its log prints their summaries).
for _ in $(seq 600); do
  [[ $(grep -c '^run [0-9A-Z]* of demo[a-z-]*: ' "$tmp/demo.log" || true) -ge 2 ]] && break
  sleep 0.1
done
docs=$(dirname "$out")
shot() { # shot FILE PATH: the page at PATH, its scripts given 4 s of virtual time to draw
  "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
    --window-size="$width,$height" --virtual-time-budget=4000 --screenshot="$docs/$1" "$base$2" 2>"$tmp/chromium.log" || {
    cat "$tmp/chromium.log" >&2
    exit 1
  }
  echo "wrote $docs/$1: $base$2"
}
shot dashboard-timeline.png "/runs/$run"
shot dashboard-index.png /
shot dashboard-services.png /services
shot dashboard-lock-history.png "/locks/history?period=1h"
shot dashboard-delivery.png "/delivery?days=7"
