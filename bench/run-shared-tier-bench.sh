#!/usr/bin/env bash
# The shared tier on one machine: a throw-away redis-server on a free loopback port
# (persistence off, its own temp dir, killed at the end), then
#   1. prefixd_disk_bench --remote-cache: restore from the shared tier into another server's
#      empty engine (GB/s, TTFT against a cold prefill), --reps times;
#   2. the agent trace replayed against two prefixd servers on different cache dirs sharing the
#      Redis, each request to the other server (prefixd bench --b-url --alternate): reuse.
# Writes $OUT/shared-tier-restore-qwen35-$SHAPE.txt and $OUT/shared-tier-alternating-$SHAPE.{json,md}.
# docs/bench.md explains.
#
# Usage: bench/run-shared-tier-bench.sh [--shape small] [--tokens 2048] [--reps 3] [--skip-restore]
#        [--skip-trace]
# Env: PREFIXD_BIN (default build/bin/prefixd), DISK_BENCH (default build/bin/prefixd_disk_bench),
#      THREADS (default 2), OUT (default bench/results), WORK (default /tmp/prefixd-shared-tier)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
PREFIXD_BIN="${PREFIXD_BIN:-$here/build/bin/prefixd}"
DISK_BENCH="${DISK_BENCH:-$here/build/bin/prefixd_disk_bench}"
THREADS="${THREADS:-2}"
OUT="${OUT:-$here/bench/results}"
WORK="${WORK:-/tmp/prefixd-shared-tier}"
SHAPE=small
TOKENS=2048
REPS=3
SKIP_RESTORE=0
SKIP_TRACE=0
TRACE_ARGS=(--sessions 3 --turns 4 --system-tokens 1000 --tool-tokens 150 --max-tokens 8 --no-restart)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shape) SHAPE="$2"; shift ;;
    --tokens) TOKENS="$2"; shift ;;
    --reps) REPS="$2"; shift ;;
    --skip-restore) SKIP_RESTORE=1 ;;
    --skip-trace) SKIP_TRACE=1 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$WORK" "$OUT"
redis_dir="$(mktemp -d "$WORK/redis-XXXXXX")"
redis_pid=""
stop_redis() {
  if [[ -n "$redis_pid" ]]; then kill -9 "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
  redis_pid=""
}
trap 'stop_redis; rm -rf "$redis_dir"' EXIT

# start_redis: an empty redis-server on a free loopback port; waits (at most 10 s) for PING.
start_redis() {
  stop_redis
  redis_port="$(free_port)"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$redis_dir" \
    --maxmemory 4gb --maxmemory-policy allkeys-lru --loglevel warning >/dev/null &
  redis_pid=$!
  for _ in $(seq 200); do
    [[ "$(redis-cli -p "$redis_port" PING 2>/dev/null)" == PONG ]] && return 0
    sleep 0.05
  done
  echo "redis-server did not start" >&2
  exit 1
}

model="$WORK/model-qwen35-$SHAPE.gguf"
[[ -f "$model" ]] || "$PREFIXD_BIN" make-test-model --arch qwen35 --shape "$SHAPE" --out "$model"

if [[ "$SKIP_RESTORE" == 0 ]]; then
  start_redis
  log "restore from the shared tier: $TOKENS tokens, $REPS reps"
  { echo "# $DISK_BENCH --model $model --shape $SHAPE --tokens $TOKENS --reps $REPS --threads $THREADS --remote-cache redis://127.0.0.1:PORT"
    "$DISK_BENCH" --model "$model" --shape "$SHAPE" --tokens "$TOKENS" --reps "$REPS" \
      --threads "$THREADS" --work-dir "$WORK/disk-bench" --remote-cache "redis://127.0.0.1:$redis_port"
  } | tee "$OUT/shared-tier-restore-qwen35-$SHAPE.txt"
  # A second yardstick, in the same run: redis-benchmark's GET (one client) of values the
  # size of a rows record, against the restore's GB/s (records read and set into the sequence):
  # the restart's (buffers kept by the Engines before it, as a running server keeps what its RAM
  # tier evicted) and the one into fresh memory (a server's first restore). redis-benchmark runs
  # 5 times and the best counts: the machine is shared, and the best is the harder yardstick.
  restore_txt="$OUT/shared-tier-restore-qwen35-$SHAPE.txt"
  value="$(awk '/^ *\.rows/ {print $4; exit}' "$restore_txt")"
  restore_gbs="$(awk '/^ +[0-9]+ +[0-9]+ +[0-9]+ .*\|/ {print $8}' "$restore_txt" | sort -g |
    awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
  fresh_gbs="$(awk '/into fresh memory \(no kept buffers\): [0-9.]+ GB\/s/ {print $(NF-1)}' "$restore_txt")"
  if [[ -n "$value" && -n "$restore_gbs" ]]; then
    refs=()
    for _ in 1 2 3 4 5; do
      refs+=("$(redis-benchmark -p "$redis_port" -t set,get -d "$value" -n 40 -c 1 2>/dev/null |
        awk -v b="$value" '/throughput summary/ {rps=$3} END {printf "%.3f", rps * b / 1e9}')")
    done
    ref="$(printf '%s\n' "${refs[@]}" | sort -g | tail -n 1)"
    python3 -c "print(f'restore from the shared tier {$restore_gbs} GB/s / redis-benchmark GET of $value-byte values {$ref} GB/s (best of 5: ${refs[*]}): {$restore_gbs / $ref:.2f} (target >= 0.5)')" |
      tee -a "$restore_txt"
    if [[ -n "$fresh_gbs" ]]; then
      python3 -c "print(f'into fresh memory (no kept buffers): {$fresh_gbs} GB/s / {$ref} GB/s: {$fresh_gbs / $ref:.2f}')" |
        tee -a "$restore_txt"
    fi
  fi
fi

[[ "$SKIP_TRACE" == 1 ]] && exit 0
start_redis
log "agent trace, two servers on one Redis, requests alternating"
serve() {  # serve PORT NAME
  echo "exec '$PREFIXD_BIN' serve -m '$model' --alias bench --port $1 --cache-dir '$WORK/cache-$2' \
--slots 2 --ctx 8192 --threads $THREADS --remote-cache redis://127.0.0.1:$redis_port"
}
rm -rf "$WORK/cache-a" "$WORK/cache-b"
pa="$(free_port)"; pb="$(free_port)"
"$PREFIXD_BIN" bench "${TRACE_ARGS[@]}" --url "http://127.0.0.1:$pa" --label "A+B alternating" \
  --server-cmd "$(serve "$pa" a)" --server-log "$WORK/a.log" \
  --b-url "http://127.0.0.1:$pb" --b-server-cmd "$(serve "$pb" b)" --b-server-log "$WORK/b.log" \
  --alternate --out "$OUT/shared-tier-alternating-$SHAPE.json" --md "$OUT/shared-tier-alternating-$SHAPE.md"
log "done: $OUT/shared-tier-*"
