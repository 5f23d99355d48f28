#!/usr/bin/env bash
# Vendor the dashboard's only third-party code (uPlot) into server/static/vendor/.
# Installs exactly what package-lock.json pins (npm ci), then copies the two files the pages load.
# Idempotent: does nothing when the vendored files exist and are newer than package-lock.json.
set -euo pipefail

web="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
vendor="$web/../static/vendor"
lock="$web/package-lock.json"
files=(uPlot.iife.min.js uPlot.min.css)

fresh=1
for f in "${files[@]}"; do
    if [[ ! -s "$vendor/$f" || ! "$vendor/$f" -nt "$lock" ]]; then
        fresh=0
    fi
done
if [[ $fresh == 1 && "${1:-}" != "--force" ]]; then
    exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
    echo "vendor.sh: npm is needed to vendor uPlot (install Node.js and npm)" >&2
    exit 1
fi

(cd "$web" && npm ci --no-audit --no-fund --silent)

mkdir -p "$vendor"
for f in "${files[@]}"; do
    src="$web/node_modules/uplot/dist/$f"
    if [[ ! -s "$src" ]]; then
        echo "vendor.sh: $src is missing after npm ci" >&2
        exit 1
    fi
    cp "$src" "$vendor/$f.tmp"
    mv "$vendor/$f.tmp" "$vendor/$f"   # atomic: a server never serves half a file
done
echo "vendor.sh: uPlot $(node -p "require('$web/node_modules/uplot/package.json').version" 2>/dev/null || echo '?') vendored into server/static/vendor/"
