#!/usr/bin/env bash
# CTest bench_smoke: `prefixd bench` launches `prefixd serve` on a tiny generated model, replays a
# 4-request trace (one session, a restart marker in the middle, a branch) and writes its results;
# the test checks the results file and that a repeated prefix was served from the cache.
# Env: PREFIXD_BIN (the prefixd binary).
set -euo pipefail
bin="${PREFIXD_BIN:?set PREFIXD_BIN}"
work="$(mktemp -d "${TMPDIR:-/tmp}/prefixd-bench-smoke.XXXXXX")"
trap 'rm -rf "$work"' EXIT

"$bin" make-test-model --arch llama --shape tiny --out "$work/tiny.gguf" >/dev/null
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$bin" bench --url "http://127.0.0.1:$port" --label prefixd \
  --server-cmd "exec '$bin' serve -m '$work/tiny.gguf' --port $port --cache-dir '$work/cache' --slots 1 --ctx 4096 --threads 2" \
  --server-log "$work/server.log" --start-timeout 60 --request-timeout 60 \
  --sessions 1 --turns 3 --system-tokens 300 --tool-tokens 60 --max-tokens 2 \
  --out "$work/results.json" --md "$work/results.md"

python3 - "$work/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
reqs = r["requests"]
assert len(reqs) == 4, f"expected 4 requests, got {len(reqs)}"
assert r["restarted"], "the server was not restarted at the marker"
assert all(q["prompt_tokens"] > 0 for q in reqs), reqs
assert all(q["reusable_tokens"] >= 0 for q in reqs), "no token ids from /apply-template"
assert reqs[0]["cached_tokens"] == 0, "the first request cannot hit"
later = reqs[1:]
assert any(q["cached_tokens"] > 0 for q in later), "no cached tokens on a repeated prefix"
assert all(q["ttft_ms"] > 0 for q in reqs)
print("bench smoke ok:", json.dumps(r["totals"]))
PY
test -s "$work/results.md"
