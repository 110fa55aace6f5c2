#!/usr/bin/env bash
# Two prefixd builds side by side (a change against the code before it): the first N requests of
# the long-session trace of bench/run-long-session.sh sent to both servers (both running, each
# request to one then the other, the order alternating), the same model and flags, each with its
# own cache dir. Reports, per request and summed, what each server's request log says it spent
# outside the model: capture_ms, publish_ms, queue_ms, restore_ms, and the bench's TTFT.
# Writes $OUT/$NAME.md and the two bench reports ($NAME-a.json, $NAME-b.json) beside it.
# --solo: A alone, then B alone, each request sent as the last one's answer ends, so neither
# server has idle time between requests (side by side, each idles while the other works).
#
# Usage: bench/run-binary-ab.sh BIN_A BIN_B [--name NAME] [--requests N] [--shape tiny|small]
#        [--max-context N] [--ctx N] [--serve-extra "FLAGS"] [--a-extra "FLAGS"]
#        [--b-extra "FLAGS"] [--solo]
#   BIN_B is usually a copy of build/bin/prefixd built before the change (kept in build/bin, so
#   that its RUNPATH finds the same llama.cpp). --serve-extra: more `prefixd serve` flags for
#   both ("--ram-budget 600M" reaches the RAM tier's evicting regime within a few requests);
#   --a-extra / --b-extra: flags for one of them only (BIN_A and BIN_B may then be the same
#   binary: "--warm-memory thread" against "--warm-memory idle").
# Env: THREADS (2), BATCH (2048), UBATCH (512), OUT (default /tmp/prefixd-binary-ab),
#      WORK (default /tmp/prefixd-binary-ab).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# -ge 2 ]] || { sed -n 2,16p "$0" >&2; exit 2; }
A="$(realpath "$1")" B="$(realpath "$2")"; shift 2
NAME=binary-ab
REQUESTS=12
SHAPE=small
MAX_CONTEXT=65536
CTX=""
SERVE_EXTRA=""
A_EXTRA=""
B_EXTRA=""
SOLO=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) NAME="$2"; shift ;;
    --requests) REQUESTS="$2"; shift ;;
    --shape) SHAPE="$2"; shift ;;
    --max-context) MAX_CONTEXT="$2"; shift ;;
    --ctx) CTX="$2"; shift ;;
    --serve-extra) SERVE_EXTRA="$2"; shift ;;
    --a-extra) A_EXTRA="$2"; shift ;;
    --b-extra) B_EXTRA="$2"; shift ;;
    --solo) SOLO=1 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
THREADS="${THREADS:-2}"
BATCH="${BATCH:-2048}"
UBATCH="${UBATCH:-512}"
WORK="${WORK:-/tmp/prefixd-binary-ab}"
OUT="${OUT:-$WORK}"
mkdir -p "$WORK" "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

model="$WORK/model-qwen35-$SHAPE.gguf"
[[ -f "$model" ]] || "$A" make-test-model --arch qwen35 --shape "$SHAPE" --out "$model" >&2
trace="$WORK/$NAME-trace.jsonl"
"$A" bench --long-session --trace-only --trace-out "$trace.full" --max-context "$MAX_CONTEXT" \
  --start-tokens 4000 --step-tokens 1500 --max-tokens 16
head -n "$REQUESTS" "$trace.full" > "$trace"
# The context the N requests need: the session starts at ~4K tokens and grows ~1.5K a request.
full_ctx=$(( MAX_CONTEXT + MAX_CONTEXT / 16 + 1024 ))
[[ -z "$CTX" ]] && CTX=$(( 4000 + 1600 * REQUESTS + 2048 < full_ctx ? 4000 + 1600 * REQUESTS + 2048 : full_ctx ))
serve() {  # BIN PORT CACHE_DIR EXTRA
  echo "exec '$1' serve -m '$model' --alias bench --port $2 --cache-dir '$3' --slots 1 --ctx $CTX \
    --threads $THREADS --batch $BATCH --ubatch $UBATCH $SERVE_EXTRA $4"
}
pa="$(free_port)"; pb="$(free_port)"
rm -rf "$WORK/cache-a" "$WORK/cache-b"
b_cmd="$(serve "$B" "$pb" "$WORK/cache-b" "$B_EXTRA")"
a_args=(--url "http://127.0.0.1:$pa" --label a
        --server-cmd "$(serve "$A" "$pa" "$WORK/cache-a" "$A_EXTRA")"
        --server-log "$WORK/$NAME-a.log" --out "$OUT/$NAME-a.json")
if [[ "$SOLO" == 1 ]]; then
  "$A" bench --trace "$trace" "${a_args[@]}" >&2
  "$A" bench --trace "$trace" --url "http://127.0.0.1:$pb" --label b --server-cmd "$b_cmd" \
    --server-log "$WORK/$NAME-b.log" --out "$OUT/$NAME-b.json" >&2
else
  "$A" bench --trace "$trace" "${a_args[@]}" --b-url "http://127.0.0.1:$pb" --b-label b \
    --b-server-cmd "$b_cmd" --b-server-log "$WORK/$NAME-b.log" --b-out "$OUT/$NAME-b.json" >&2
fi
python3 "$here/bench/binary_ab_table.py" "$WORK/$NAME-a.log" "$WORK/$NAME-b.log" \
  --title "$NAME: A $A, B $B" > "$OUT/$NAME.md"
{
  echo
  echo "Run: \`bench/run-binary-ab.sh A B --name $NAME --requests $REQUESTS --shape $SHAPE$([[ $SOLO == 1 ]] && echo ' --solo')\` ($(date -u +%Y-%m-%d);"
  echo "ctx $CTX, $THREADS threads, batch $BATCH / ubatch $UBATCH, serve extra: \`${SERVE_EXTRA:-none}\`,"
  echo "A extra: \`${A_EXTRA:-none}\`, B extra: \`${B_EXTRA:-none}\`; $([[ $SOLO == 1 ]] && echo 'one after the other, back to back' || echo 'side by side'))."
  echo "Shared, noisy machine: compare the two columns of one run."
} >> "$OUT/$NAME.md"
cat "$OUT/$NAME.md"
