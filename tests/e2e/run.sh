#!/usr/bin/env bash
# Runs the end-to-end suite: PREFIXD_BIN=<path to prefixd> tests/e2e/run.sh
# Installs the `openai` client from package-lock.json first when node_modules lacks it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if [[ ! -f node_modules/openai/package.json ]]; then
  npm ci --no-audit --no-fund --silent >/dev/null
fi
exec node --test --test-concurrency=1 ./*.test.js
