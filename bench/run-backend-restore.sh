#!/usr/bin/env bash
# Restore speed where the tensors live off the host (docs/backends.md): prefixd_disk_bench on
# the CPU and then with every layer on a real llama.cpp rpc-server on 127.0.0.1 (each state
# write crosses the backend boundary, through a bounce buffer from disk), same model, prompt and
# reps, in one run; optionally also with a quantized KV cache. Prints both runs' tables and a
# summary of the medians side by side.
#
# Usage: bench/run-backend-restore.sh [--shape small] [--tokens 4096] [--reps 3] [--kv q8_0]
# Env: BUILD_DIR (default build), RPC_SERVER (default: the set-up's ggml-rpc-server),
#      WORK (default /tmp/prefixd-backend-restore), THREADS (default 2).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

SHAPE=small
TOKENS=4096
REPS=3
KV=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shape) SHAPE="$2"; shift ;;
    --tokens) TOKENS="$2"; shift ;;
    --reps) REPS="$2"; shift ;;
    --kv) KV="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
BUILD_DIR="${BUILD_DIR:-build}"
WORK="${WORK:-/tmp/prefixd-backend-restore}"
THREADS="${THREADS:-2}"
bench="$BUILD_DIR/bin/prefixd_disk_bench"
llama_build="$(grep '^PREFIXD_LLAMA_BUILD:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)"
RPC_SERVER="${RPC_SERVER:-$llama_build/bin/ggml-rpc-server}"
mkdir -p "$WORK"

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$RPC_SERVER" -H 127.0.0.1 -p "$port" -t "$THREADS" >"$WORK/rpc-server.log" 2>&1 &
rpc_pid=$!
trap 'kill "$rpc_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  sleep 0.1
done

kv_flags=()
if [[ -n "$KV" ]]; then kv_flags=(-ctk "$KV" -ctv "$KV"); fi
common=(--shape "$SHAPE" --tokens "$TOKENS" --reps "$REPS" --threads "$THREADS" "${kv_flags[@]}")

run() {  # NAME, extra flags...
  local name="$1"; shift
  echo "== $name"
  "$bench" "${common[@]}" --work-dir "$WORK/$name" "$@" 2>&1 | grep -v '^prefixd: ' | tee "$WORK/$name.txt"
}
run cpu
run rpc --rpc "127.0.0.1:$port" -ngl -1

echo
echo "== side by side (medians over $REPS reps; $SHAPE, ~$TOKENS tokens${KV:+, KV $KV})"
printf '%-58s %8s %8s\n' "" cpu rpc
for what in "restore from disk / plain sequential read" "restore from RAM / memcpy" \
            "restart-to-first-token / cold (--no-cache) first token"; do
  a="$(grep -F "$what:" "$WORK/cpu.txt" | head -1 | sed 's/.*: \([0-9.%]*\).*/\1/')"
  b="$(grep -F "$what:" "$WORK/rpc.txt" | head -1 | sed 's/.*: \([0-9.%]*\).*/\1/')"
  printf '%-58s %8s %8s\n' "$what" "$a" "$b"
done
