#!/usr/bin/env bash
# The README's test command: sets up and builds everything if needed, then runs every test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
start=$(date +%s)
bash scripts/build.sh
build_dir="${BUILD_DIR:-build}"
# The lock contracts (src/util/thread_annotations.h), checked by clang before any test runs.
if ! bash scripts/check-thread-safety.sh "$build_dir"; then
  echo "test.sh: the thread-safety check failed after $(( $(date +%s) - start )) s"
  exit 7
fi
# The machine is part of the record: bit-identity holds per kernel path where the code does not
# guarantee it otherwise (docs/architecture.md, "Exactness on each CPU").
"$build_dir/bin/prefixd" system-info | sed 's/^/test.sh: /'
echo "test.sh: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
if [[ -f tests/e2e/package.json ]]; then
  (cd tests/e2e && npm install --no-audit --no-fund --silent >/dev/null)
fi
if ! ctest --test-dir "$build_dir" --output-on-failure -j "${PREFIXD_JOBS:-2}" --timeout 600 "$@"; then
  bash scripts/failure-digest.sh "$build_dir"
  echo "test.sh: tests failed after $(( $(date +%s) - start )) s"
  exit 8
fi
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"
