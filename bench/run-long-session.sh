#!/usr/bin/env bash
# Long-session bench: one agent session that grows by ~1.5K tokens a request
# up to --max-context, replayed against prefixd serve and against llama-server built from the
# SAME pinned llama.cpp source, side by side (both running, each request sent to one then the
# other, the order alternating) with the same model, context, batch and threads; then decode
# throughput (ignore_eos, 128 tokens, 1 and 2 concurrent streams) of
# prefixd with the cache on, prefixd --no-cache and llama-server, all in one run.
# Writes $OUT/$NAME.{json,md,png} (NAME defaults to long-session-<shape>). docs/bench.md explains.
#
# Usage: bench/run-long-session.sh [--shape tiny|small] [--max-context N] [--arch qwen35]
#        [--name NAME] [--skip-decode] [--decode-reps N] [--step-tokens N] [--start-tokens N]
# Env: PREFIXD_BIN (default build/bin/prefixd), PREFIXD_JOBS (llama-server build, default 2),
#      THREADS (default 2), BATCH (default 2048), UBATCH (default 512), CTX (default max-context
#      + 1/16 + 1024), OUT (default bench/results), WORK (default /tmp/prefixd-long-session),
#      LLAMA_SERVER_EXTRA (more llama-server flags), PREFIXD_EXTRA (more prefixd serve flags).
#
# Default --max-context: 65536 for tiny, 32768 for small (131072 works; give it time).
# llama-server runs with the caching flags of bench/run-vs-llama-server.sh: --jinja
# --cache-ram 4096 --ctx-checkpoints 64 --checkpoint-min-step 0; one slot for the session, two
# for the decode runs (one per stream).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

SHAPE=tiny
ARCH=qwen35
MAX_CONTEXT=""
NAME=""
SKIP_DECODE=0
DECODE_REPS=3
STEP_TOKENS=1500
START_TOKENS=4000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shape) SHAPE="$2"; shift ;;
    --arch) ARCH="$2"; shift ;;
    --max-context) MAX_CONTEXT="$2"; shift ;;
    --name) NAME="$2"; shift ;;
    --skip-decode) SKIP_DECODE=1 ;;
    --decode-reps) DECODE_REPS="$2"; shift ;;
    --step-tokens) STEP_TOKENS="$2"; shift ;;
    --start-tokens) START_TOKENS="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z "$MAX_CONTEXT" ]]; then
  case "$SHAPE" in tiny) MAX_CONTEXT=65536 ;; *) MAX_CONTEXT=32768 ;; esac
fi
NAME="${NAME:-long-session-$SHAPE}"
THREADS="${THREADS:-2}"
BATCH="${BATCH:-2048}"
UBATCH="${UBATCH:-512}"
CTX="${CTX:-$((MAX_CONTEXT + MAX_CONTEXT / 16 + 1024))}"
DECODE_CTX=4096   # per slot; the decode prompts are ~100 tokens
OUT="${OUT:-$here/bench/results}"
WORK="${WORK:-/tmp/prefixd-long-session}"
PREFIXD_BIN="${PREFIXD_BIN:-$here/build/bin/prefixd}"

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

[[ -x "$PREFIXD_BIN" ]] || { echo "prefixd binary not found: $PREFIXD_BIN (build it or set PREFIXD_BIN)" >&2; exit 1; }
LLAMA_SERVER="$(bash "$here/bench/run-vs-llama-server.sh" --only-build)"
mkdir -p "$WORK" "$OUT"
started="$(date +%s)"
model="$WORK/model-$ARCH-$SHAPE.gguf"
[[ -f "$model" ]] || "$PREFIXD_BIN" make-test-model --arch "$ARCH" --shape "$SHAPE" --out "$model" >&2
trace="$WORK/$NAME-trace.jsonl"
"$PREFIXD_BIN" bench --long-session --trace-only --trace-out "$trace" --max-context "$MAX_CONTEXT" \
  --start-tokens "$START_TOKENS" --step-tokens "$STEP_TOKENS" --max-tokens 16

# The session's servers run with bench/decode_counter.cpp preloaded (COUNT_LOG=path): each
# request's prefill calls and ubatches are counted in both by the same code.
COUNTER="${COUNTER:-$(dirname "$PREFIXD_BIN")/../lib/libprefixd_decode_counter.so}"
counted() {  # LOG: the exec prefix that preloads the counter, none without it
  if [[ -f "$COUNTER" && -n "$1" ]]; then echo "env LD_PRELOAD='$COUNTER' PREFIXD_DECODE_LOG='$1'"; fi
}
prefixd_cmd() {  # PORT SLOTS CTX EXTRA...
  local port="$1" slots="$2" ctx="$3"; shift 3
  echo "exec $(counted "${COUNT_LOG:-}") '$PREFIXD_BIN' serve -m '$model' --alias bench --port $port --cache-dir '$WORK/cache' \
    --slots $slots --ctx $ctx --threads $THREADS --batch $BATCH --ubatch $UBATCH $* ${PREFIXD_EXTRA:-}"
}
llama_cmd() {  # PORT SLOTS CTX_PER_SLOT
  local port="$1" slots="$2" ctx="$3"
  echo "exec $(counted "${COUNT_LOG:-}") '$LLAMA_SERVER' -m '$model' --host 127.0.0.1 --port $port -np $slots \
    -c $((slots * ctx)) -t $THREADS -b $BATCH -ub $UBATCH --jinja --cache-ram 4096 \
    --ctx-checkpoints 64 --checkpoint-min-step 0 ${LLAMA_SERVER_EXTRA:-}"
}

# The long session against both servers side by side: both run at once, each request goes to
# one then the other, the order alternating, so that a shared machine's noise hits both alike.
session() {
  local pa pb
  pa="$(free_port)"; pb="$(free_port)"
  rm -rf "$WORK/cache"
  : > "$WORK/$NAME-prefixd.log"; : > "$WORK/$NAME-llama-server.log"
  log "session: prefixd and llama-server side by side"
  local da="$WORK/$NAME-prefixd.decodes" db="$WORK/$NAME-llama-server.decodes" count=()
  rm -f "$da" "$db"
  [[ -f "$COUNTER" ]] && count=(--decode-log "$da" --b-decode-log "$db")
  "$PREFIXD_BIN" bench --trace "$trace" "${count[@]}" \
    --url "http://127.0.0.1:$pa" --label prefixd --server-cmd "$(COUNT_LOG="$da" prefixd_cmd "$pa" 1 "$CTX")" \
    --server-log "$WORK/$NAME-prefixd.log" --out "$WORK/$NAME-prefixd.json" \
    --b-url "http://127.0.0.1:$pb" --b-label llama-server --b-server-cmd "$(COUNT_LOG="$db" llama_cmd "$pb" 1 "$CTX")" \
    --b-server-log "$WORK/$NAME-llama-server.log" --b-out "$WORK/$NAME-llama-server.json"
}

# decode LABEL CMD PORT: decode throughput of one server configuration.
decode_results=()
decode() {
  local label="$1" cmd="$2" port="$3"
  rm -rf "$WORK/cache"
  log "decode: $label"
  "$PREFIXD_BIN" bench --decode --decode-streams 1,2 --decode-tokens 128 --decode-reps "$DECODE_REPS" \
    --url "http://127.0.0.1:$port" --label "$label" --server-cmd "$cmd" \
    --server-log "$WORK/$NAME-decode-$label.log" --out "$WORK/$NAME-decode-$label.json"
  decode_results+=("$WORK/$NAME-decode-$label.json")
}

session
if [[ "$SKIP_DECODE" == 0 ]]; then
  port="$(free_port)"; decode prefixd "$(prefixd_cmd "$port" 2 "$DECODE_CTX")" "$port"
  port="$(free_port)"; decode prefixd-no-cache "$(prefixd_cmd "$port" 2 "$DECODE_CTX" --no-cache)" "$port"
  port="$(free_port)"; decode llama-server "$(llama_cmd "$port" 2 "$DECODE_CTX")" "$port"
fi

minutes=$(( ($(date +%s) - started) / 60 ))
decode_arg=()
[[ ${#decode_results[@]} -gt 0 ]] && decode_arg=(--decode-results "$(IFS=,; echo "${decode_results[*]}")")
"$PREFIXD_BIN" bench --long-report "$WORK/$NAME-prefixd.json,$WORK/$NAME-llama-server.json" \
  "${decode_arg[@]}" \
  --title "Long session, $ARCH $SHAPE test model, to $((MAX_CONTEXT / 1024))K: prefixd vs llama-server" \
  --out "$OUT/$NAME.json" --md "$OUT/$NAME.md" --tsv "$WORK/$NAME.tsv" >/dev/null
{
  echo
  echo "Run: \`bench/run-long-session.sh --shape $SHAPE --max-context $MAX_CONTEXT\` ($(date -u +%Y-%m-%d), $minutes min;"
  echo "$THREADS threads, ctx $CTX, batch $BATCH / ubatch $UBATCH, prefixd $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'),"
  echo "llama-server from the same pinned llama.cpp). Shared, noisy machine: compare the two columns of one run."
} >> "$OUT/$NAME.md"

if command -v gnuplot >/dev/null 2>&1 || apt-get install -y -q gnuplot-nox >/dev/null 2>&1; then
  totals="$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]));
print("session wall %.0f s vs %.0f s, ratio %.2f" % (r["a"]["wall_ms"]/1e3, r["b"]["wall_ms"]/1e3,
      r["wall_ratio_a_over_b"]))' "$OUT/$NAME.json")"
  bash "$here/bench/long_session_chart.sh" "$WORK/$NAME.tsv" "$OUT/$NAME.png" \
    "Long session ($ARCH $SHAPE test model): prefixd vs llama-server; $totals"
else
  log "gnuplot not available: no chart"
fi
log "done in $minutes min: $OUT/$NAME.md"
sed -n 1,30p "$OUT/$NAME.md" >&2
