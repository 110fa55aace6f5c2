#!/usr/bin/env bash
# Tries the newest release of each agent CLI on npm against prefixd, outside the test command:
# the same tests as tests/agents (agents.test.js, unchanged) with the clients at npm's `latest`
# instead of the versions pinned in package.json, in a scratch copy, then a table per client
# (pinned, latest, tests passed and failed, which failed). A client release that breaks prefixd
# shows here before a user meets it; when every row passes, move the pins in package.json up.
#
# Usage: PREFIXD_BIN=build/bin/prefixd tests/agents/try-latest.sh [--keep] [-- NODE TEST ARGS]
#   --keep: leave the scratch folder (its log has every request the clients sent).
# Needs the npm registry; runs for 10-15 minutes on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
keep=0
node_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --keep) keep=1 ;;
    --) shift; node_args=("$@"); break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
: "${PREFIXD_BIN:?set PREFIXD_BIN to the prefixd binary}"
PREFIXD_BIN="$(cd "$(dirname "$PREFIXD_BIN")" && pwd)/$(basename "$PREFIXD_BIN")"
export PREFIXD_BIN

work="$(mktemp -d "${TMPDIR:-/tmp}/prefixd-try-latest.XXXXXX")"
[[ $keep == 1 ]] || trap 'rm -rf "$work"' EXIT
# The repo's shape around the copy: agents.test.js imports ../e2e/harness.js (the real e2e
# folder, its node_modules with it) and reads ../../docs/img.
agents="$work/tests/agents"
mkdir -p "$agents"
if [[ ! -f "$here/../e2e/node_modules/openai/package.json" ]]; then
  (cd "$here/../e2e" && npm ci --no-audit --no-fund --silent >/dev/null)
fi
ln -s "$(cd "$here/../e2e" && pwd)" "$work/tests/e2e"
ln -s "$(cd "$here/../../docs" && pwd)" "$work/docs"
cp "$here/agents.test.js" "$agents/"

packages=(@anthropic-ai/claude-code @openai/codex opencode-ai)
declare -A pinned latest
for p in "${packages[@]}"; do
  pinned[$p]="$(node -e "console.log(require('$here/package.json').dependencies['$p'])")"
  latest[$p]="$(npm view "$p" version)"
done
node -e '
  const [out, ...pairs] = process.argv.slice(1);
  const deps = {};
  for (let i = 0; i < pairs.length; i += 2) deps[pairs[i]] = pairs[i + 1];
  require("fs").writeFileSync(out, JSON.stringify({ name: "prefixd-agents-latest", private: true,
    type: "module", dependencies: deps }, null, 1));
' "$agents/package.json" $(for p in "${packages[@]}"; do echo "$p" "${latest[$p]}"; done)
echo "try-latest: installing ${packages[*]} at npm's latest" >&2
(cd "$agents" && npm install --no-audit --no-fund --silent >/dev/null)

echo "try-latest: running agents.test.js (log: $work/log)" >&2
set +e
(cd "$agents" && node --test --test-concurrency=1 "${node_args[@]}" ./agents.test.js) >"$work/log" 2>&1
status=$?
set -e

# Each test belongs to the client its name starts with (Claude Code, Codex, opencode).
node -e '
  const fs = require("fs");
  const [log, ...rows] = process.argv.slice(1);
  const lines = fs.readFileSync(log, "utf8").split("\n");
  const clients = { "@anthropic-ai/claude-code": "Claude Code", "@openai/codex": "Codex", "opencode-ai": "opencode" };
  const result = {};
  for (const l of lines) {
    const m = l.match(/^\s+(not ok|ok) \d+ - (.*?)( # SKIP.*)?$/);
    if (!m || m[3]) continue;
    const who = Object.values(clients).find((c) => m[2].startsWith(c));
    if (!who) continue;
    result[who] ??= { pass: 0, fail: [] };
    if (m[1] === "ok") result[who].pass += 1; else result[who].fail.push(m[2]);
  }
  console.log("| client | pinned | latest | passed | failed | failing tests |");
  console.log("|---|---|---|---:|---:|---|");
  for (let i = 0; i < rows.length; i += 3) {
    const who = clients[rows[i]];
    const r = result[who] ?? { pass: 0, fail: [] };
    console.log(`| ${who} | ${rows[i + 1]} | ${rows[i + 2]} | ${r.pass} | ${r.fail.length} | ${r.fail.join("; ")} |`);
  }
  for (const l of lines) if (l.includes("[ agents ]")) console.log(l.replace(/^#\s*/, ""));
' "$work/log" $(for p in "${packages[@]}"; do echo "$p" "${pinned[$p]}" "${latest[$p]}"; done)
exit $status
