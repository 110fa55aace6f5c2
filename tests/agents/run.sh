#!/usr/bin/env bash
# Runs the agent CLIs against a real server: PREFIXD_BIN=<path to prefixd> tests/agents/run.sh
# Installs the pinned clients (exact versions in package.json, resolved as package-lock.json
# says) when node_modules lacks one, and the e2e harness's own packages (tests/e2e) it imports.
# `npm install --no-save`, not `npm ci`: npm 11's `ci` refuses this lock file, whose optional
# per-platform packages of opencode-ai it records only for this platform ("Missing:
# opencode-darwin-arm64@ from lock file"); install reads the same lock and writes nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if [[ ! -f ../e2e/node_modules/openai/package.json ]]; then
  (cd ../e2e && npm ci --no-audit --no-fund --silent >/dev/null)
fi
if [[ ! -x node_modules/.bin/claude || ! -x node_modules/.bin/codex || ! -x node_modules/.bin/opencode ]]; then
  npm install --no-audit --no-fund --no-save --silent >/dev/null
fi
exec node --test --test-concurrency=1 ./*.test.js
