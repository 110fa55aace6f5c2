#!/usr/bin/env bash
# Runs the end-to-end suite: PREFIXD_BIN=<path to prefixd> tests/e2e/run.sh
# Installs the clients (`openai`, `@anthropic-ai/sdk`), `puppeteer-core` (the web page's
# browser test; it drives Debian's chromium and never downloads a browser) and `ajv` (the JSON
# Schema validator of schema_calls.test.js) from package-lock.json first when node_modules lacks
# one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if [[ ! -f node_modules/openai/package.json || ! -f node_modules/@anthropic-ai/sdk/package.json ||
      ! -f node_modules/puppeteer-core/package.json || ! -f node_modules/ajv/package.json ]]; then
  npm ci --no-audit --no-fund --silent >/dev/null
fi
exec node --test --test-concurrency=1 ./*.test.js
