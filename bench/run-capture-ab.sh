#!/usr/bin/env bash
# Snapshots captured inside prefill calls (llama.cpp patch 0009) against Snapshots taken at the
# ends of cut calls (--cut-at-captures), in one run: the long-session trace of
# bench/run-long-session.sh sent to two prefixd servers side by side (both running, each request
# to one then the other, the order alternating), the same model, threads, batch and ubatch, each
# with its own cache dir; then the same two with --no-cache (the two chunk schedules alone, every
# request prefilled whole). Reports calls (llama_decode), model time and session wall.
# Writes $OUT/capture-in-call-$ARCH-$SHAPE$SUFFIX.md (and the two reports' .json beside it).
#
# Usage: bench/run-capture-ab.sh [--shape tiny|small] [--arch qwen35|gemma3] [--max-context N]
#        [--skip-no-cache] [--serve-extra "FLAGS" --suffix SUFFIX]
#   --serve-extra: more `prefixd serve` flags for both servers (speculation, say:
#   "--spec-type ngram-mod --spec-ngram-mod-n-max 8 --spec-ngram-mod-n-min 2"), and --suffix names
#   that run's files apart.
# Env: PREFIXD_BIN (default build/bin/prefixd), THREADS (2), BATCH (2048), UBATCH (512),
#      OUT (default bench/results), WORK (default /tmp/prefixd-capture-ab).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
SHAPE=tiny
ARCH=qwen35
MAX_CONTEXT=32768
SKIP_NO_CACHE=0
SERVE_EXTRA=""
SUFFIX=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shape) SHAPE="$2"; shift ;;
    --arch) ARCH="$2"; shift ;;
    --max-context) MAX_CONTEXT="$2"; shift ;;
    --skip-no-cache) SKIP_NO_CACHE=1 ;;
    --serve-extra) SERVE_EXTRA="$2"; shift ;;
    --suffix) SUFFIX="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
THREADS="${THREADS:-2}"
BATCH="${BATCH:-2048}"
UBATCH="${UBATCH:-512}"
CTX=$((MAX_CONTEXT + MAX_CONTEXT / 16 + 1024))
OUT="${OUT:-$here/bench/results}"
WORK="${WORK:-/tmp/prefixd-capture-ab}"
PREFIXD_BIN="${PREFIXD_BIN:-$here/build/bin/prefixd}"
NAME="capture-in-call-$ARCH-$SHAPE$SUFFIX"
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

[[ -x "$PREFIXD_BIN" ]] || { echo "prefixd binary not found: $PREFIXD_BIN" >&2; exit 1; }
rm -rf "$WORK"
mkdir -p "$WORK" "$OUT"
model="$WORK/model-$ARCH-$SHAPE.gguf"
"$PREFIXD_BIN" make-test-model --arch "$ARCH" --shape "$SHAPE" --out "$model" >&2
trace="$WORK/trace.jsonl"
"$PREFIXD_BIN" bench --long-session --trace-only --trace-out "$trace" --max-context "$MAX_CONTEXT" \
  --start-tokens 4000 --step-tokens 1500 --max-tokens 16 >&2

serve_cmd() {  # PORT EXTRA...
  local port="$1"; shift
  echo "exec '$PREFIXD_BIN' serve -m '$model' --alias bench --port $port \
    --cache-dir '$WORK/cache-$port' --slots 1 --ctx $CTX --threads $THREADS --batch $BATCH \
    --ubatch $UBATCH $SERVE_EXTRA $*"
}

# pair LABEL EXTRA: in-call against cut, with EXTRA on both.
pair() {
  local label="$1" extra="$2" pa pb
  pa="$(free_port)"; pb="$(free_port)"
  log "$label: in-call and cut side by side"
  "$PREFIXD_BIN" bench --trace "$trace" \
    --url "http://127.0.0.1:$pa" --label in-call --server-cmd "$(serve_cmd "$pa" "$extra")" \
    --server-log "$WORK/$label-in-call.log" --out "$WORK/$label-in-call.json" \
    --b-url "http://127.0.0.1:$pb" --b-label cut \
    --b-server-cmd "$(serve_cmd "$pb" --cut-at-captures "$extra")" \
    --b-server-log "$WORK/$label-cut.log" --b-out "$WORK/$label-cut.json" >&2
  "$PREFIXD_BIN" bench --long-report "$WORK/$label-in-call.json,$WORK/$label-cut.json" \
    --title "$label: Snapshots captured inside calls vs at the ends of cut calls" \
    --out "$OUT/$NAME-$label.json" --md "$WORK/$label.md" --tsv "$WORK/$label.tsv" >/dev/null
}

pair cache ""
[[ "$SKIP_NO_CACHE" == 1 ]] || pair no-cache --no-cache
{
  echo "# Snapshots captured inside prefill calls vs cut calls: $ARCH $SHAPE, to $((MAX_CONTEXT / 1024))K"
  echo
  for label in cache no-cache; do
    [[ -f "$WORK/$label.md" ]] || continue
    sed -n '3,16p' "$WORK/$label.md" | sed "1s/^/## $label\n\n/"
    echo
  done
  skip=""; [[ "$SKIP_NO_CACHE" == 1 ]] && skip=" --skip-no-cache"
  [[ -n "$SERVE_EXTRA" ]] && skip+=" --serve-extra \"$SERVE_EXTRA\" --suffix $SUFFIX"
  echo "Run: \`bench/run-capture-ab.sh --shape $SHAPE --arch $ARCH --max-context $MAX_CONTEXT$skip\`"
  echo "($(date -u +%Y-%m-%d); $THREADS threads, batch $BATCH / ubatch $UBATCH, prefixd"
  echo "$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')). Shared, noisy machine: compare the two columns of one run."
} > "$OUT/$NAME.md"
log "done: $OUT/$NAME.md"
cat "$OUT/$NAME.md" >&2
