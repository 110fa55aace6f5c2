#!/usr/bin/env bash
# The README's test command: sets up and builds everything if needed, then runs every test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
start=$(date +%s)
bash scripts/build.sh
build_dir="${BUILD_DIR:-build}"
if [[ -f tests/e2e/package.json ]]; then
  (cd tests/e2e && npm install --no-audit --no-fund --silent >/dev/null)
fi
ctest --test-dir "$build_dir" --output-on-failure -j "${PREFIXD_JOBS:-2}" --timeout 600 "$@"
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"
