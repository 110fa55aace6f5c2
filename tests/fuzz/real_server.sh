#!/usr/bin/env bash
# CTest http_fuzz_real_server: the HTTP fuzzer (prefixd-http-fuzz) against the real
# `prefixd serve` on a tiny generated model with a disk cache: the server stays up, every answer
# is a result or a 4xx / 503 JSON error, it stops cleanly on SIGTERM, and `prefixd cache verify`
# finds every disk record intact afterwards. Binds 127.0.0.1 only; seed and time are fixed.
# Env: PREFIXD_BIN, PREFIXD_HTTP_FUZZ; optional FUZZ_REQUESTS (4000), FUZZ_SECONDS (40),
# FUZZ_MAX_MESSAGES (40),
# FUZZ_SEED (7).
set -euo pipefail
bin="${PREFIXD_BIN:?set PREFIXD_BIN}"
fuzz="${PREFIXD_HTTP_FUZZ:?set PREFIXD_HTTP_FUZZ}"
work="$(mktemp -d "${TMPDIR:-/tmp}/prefixd-http-fuzz.XXXXXX")"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$bin" make-test-model --arch llama --shape tiny --out "$work/tiny.gguf" >/dev/null
"$bin" serve -m "$work/tiny.gguf" --alias tiny --host 127.0.0.1 --port 0 \
  --cache-dir "$work/cache" --block-size 16 --slots 2 --max-queue 8 --ctx 2048 --threads 1 \
  --max-body 1M 2>"$work/server.log" &
server_pid=$!
port=""
for _ in $(seq 1 600); do
  port="$(sed -n 's/.*prefixd listening .*port=\([0-9]*\).*/\1/p' "$work/server.log" | head -n 1)"
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { echo "serve did not start"; cat "$work/server.log"; exit 1; }

# --max-messages 40: a cold chat of n messages renders all n prefixes (capture points), O(n^2)
# template work: 200 one-word messages took 15 s on a loaded 2-core machine (docs/bench.md,
# "HTTP fuzzing"). Raise it once cold renders are linear.
status=0
"$fuzz" --port "$port" --model tiny --seed "${FUZZ_SEED:-7}" --requests "${FUZZ_REQUESTS:-4000}" \
  --seconds "${FUZZ_SECONDS:-40}" --threads 4 --max-messages "${FUZZ_MAX_MESSAGES:-40}" \
  --answer-timeout-ms 60000 || status=$?  # 60 s: CTest runs other tests beside this one

t0=$(date +%s)
kill -TERM "$server_pid"
serve_rc=0
wait "$server_pid" || serve_rc=$?
echo "prefixd serve stopped in $(( $(date +%s) - t0 )) s after SIGTERM"
server_pid=""
if grep -q "status=5[0-9][0-9]" "$work/server.log" && grep "status=5[0-9][0-9]" "$work/server.log" | grep -vq "status=503"; then
  echo "the server log shows a 5xx other than 503:"; grep "status=5" "$work/server.log" | grep -v "status=503" | head -n 5
  status=1
fi
[[ "$serve_rc" == 0 ]] || { echo "prefixd serve exited $serve_rc after SIGTERM"; tail -n 20 "$work/server.log"; status=1; }
"$bin" cache verify --cache-dir "$work/cache" || { echo "cache verify found damaged records"; status=1; }
"$bin" cache stats --cache-dir "$work/cache" || true
exit "$status"
