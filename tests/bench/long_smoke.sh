#!/usr/bin/env bash
# CTest bench_long_smoke: the long-session bench on a tiny qwen35 model, to ~8K tokens: one
# side-by-side replay against `prefixd serve` and `prefixd serve --no-cache` (standing in for
# llama-server, which CI does not build), a short decode run with 1 and 2 streams, and the
# long-session report of all three; the test checks that the numbers are there and sane.
# Env: PREFIXD_BIN (the prefixd binary).
set -euo pipefail
bin="${PREFIXD_BIN:?set PREFIXD_BIN}"
work="$(mktemp -d "${TMPDIR:-/tmp}/prefixd-long-smoke.XXXXXX")"
trap 'rm -rf "$work"' EXIT

"$bin" make-test-model --arch qwen35 --shape tiny --out "$work/tiny.gguf" >/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
serve() {  # PORT SLOTS EXTRA...
  local port="$1" slots="$2"; shift 2
  echo "exec '$bin' serve -m '$work/tiny.gguf' --port $port --cache-dir '$work/cache' --slots $slots --ctx 9000 --threads 2 $*"
}
pa="$(free_port)"; pb="$(free_port)"
"$bin" bench --long-session --max-context 8000 --start-tokens 2000 --step-tokens 1500 \
  --max-tokens 2 --start-timeout 60 --request-timeout 60 \
  --url "http://127.0.0.1:$pa" --label prefixd --server-cmd "$(serve "$pa" 1)" \
  --server-log "$work/a.log" --out "$work/prefixd.json" \
  --b-url "http://127.0.0.1:$pb" --b-label prefixd-no-cache \
  --b-server-cmd "$(serve "$pb" 1 --no-cache)" --b-server-log "$work/b.log" \
  --b-out "$work/prefixd-no-cache.json" >/dev/null
port="$(free_port)"
"$bin" bench --decode --decode-streams 1,2 --decode-tokens 8 --decode-reps 1 \
  --url "http://127.0.0.1:$port" --label prefixd --server-cmd "$(serve "$port" 2)" \
  --server-log "$work/decode.log" --start-timeout 60 --request-timeout 60 --out "$work/decode.json"
"$bin" bench --long-report "$work/prefixd.json,$work/prefixd-no-cache.json" \
  --decode-results "$work/decode.json" --title smoke --out "$work/report.json" \
  --md "$work/report.md" --tsv "$work/report.tsv" >/dev/null

python3 - "$work/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
reqs = r["requests"]
# 1 + (8000 - 2 - 2000) / 1500 = 4 requests, growing.
assert len(reqs) == 4, f"expected 4 requests, got {len(reqs)}"
prompts = [q["prompt_tokens"] for q in reqs]
assert all(b > a + 500 for a, b in zip(prompts, prompts[1:])), prompts
assert 1000 < prompts[0] < prompts[-1] < 9000, prompts
for q in reqs:
    for side in ("a", "b"):
        s = q[side]
        assert s["ttft_ms"] > 0 and s["model_ms"] > 0, s
        assert 0 <= s["outside_ms"] <= s["ttft_ms"], s
        assert s["restore_ms"] >= 0, s  # prefixd reports it, cache on or off
assert all(q["a"]["cached_tokens"] > 0 for q in reqs[1:]), "the cache-on run reused nothing"
assert all(q["b"]["cached_tokens"] == 0 for q in reqs), "--no-cache reused tokens"
assert r["a"]["wall_ms"] > 0 and r["b"]["wall_ms"] > 0 and r["wall_ratio_a_over_b"] > 0
d = r["decode"][0]["results"]
assert [x["streams"] for x in d] == [1, 2], d
assert all(x["tokens_per_s"] > 0 and x["per_stream_tokens_per_s"] > 0 for x in d), d
print("long-session smoke ok: wall ratio %.3f, decode %s tok/s" %
      (r["wall_ratio_a_over_b"], [round(x["tokens_per_s"], 1) for x in d]))
PY
test -s "$work/report.md"
test "$(wc -l < "$work/report.tsv")" -eq 5
