#!/usr/bin/env bash
# The shared tier's read path against its Redis, value size by value size: a throw-away
# redis-server on a free loopback port (persistence off, killed at the end); for each size,
# prefixd_remote_read_bench (RedisStore reads, one GET each and pipelined, every record kept as
# a restore keeps it) beside redis-benchmark's GET of the same value size, one client, in the
# same run. Writes $OUT/remote-read.md. docs/bench.md explains.
#
# Usage: bench/run-remote-read-bench.sh [--rounds 3]
# Env: READ_BENCH (default build/bin/prefixd_remote_read_bench), OUT (default bench/results)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
READ_BENCH="${READ_BENCH:-$here/build/bin/prefixd_remote_read_bench}"
OUT="${OUT:-$here/bench/results}"
ROUNDS=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
dir="$(mktemp -d /tmp/prefixd-remote-read-XXXXXX)"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --loglevel warning >/dev/null &
redis_pid=$!
trap 'kill -9 "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 200); do
  [[ "$(redis-cli -p "$port" PING 2>/dev/null)" == PONG ]] && break
  sleep 0.05
done

# GB/s of redis-benchmark's GET of `bytes`-byte values (one client, no pipelining).
redis_get_gbs() {
  local bytes="$1" n="$2"
  redis-benchmark -p "$port" -t set,get -d "$bytes" -n "$n" -c 1 2>/dev/null |
    awk -v b="$bytes" '/throughput summary/ {rps=$3} END {printf "%.3f", rps * b / 1e9}'
}

{
  echo "# bench/run-remote-read-bench.sh --rounds $ROUNDS, $(date -u +%Y-%m-%d), $(nproc) cores"
  echo
  echo "| value | records | round | one GET each GB/s | pipelined GB/s | redis-benchmark GET GB/s | pipelined / redis-benchmark |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for spec in 20000:64:5000 1000000:16:200 6000000:8:40; do
    IFS=: read -r bytes records n <<<"$spec"
    for r in $(seq "$ROUNDS"); do
      out="$("$READ_BENCH" --remote-cache "redis://127.0.0.1:$port" --records "$records" \
        --bytes "$bytes" --reps 5 2>/dev/null)"
      one="$(awk '/one GET each/ {print $5}' <<<"$out")"
      pipe="$(awk '/pipelined/ {print $3}' <<<"$out")"
      ref="$(redis_get_gbs "$bytes" "$n")"
      ratio="$(python3 -c "print(f'{$pipe / $ref:.2f}' if $ref > 0 else '-')")"
      echo "| $bytes | $records | $r | $one | $pipe | $ref | $ratio |"
    done
  done
} | tee "$OUT/remote-read.md"
