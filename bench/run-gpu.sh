#!/usr/bin/env bash
# The GPU bench, prepared so that the first GPU machine runs it with no editing: builds prefixd
# and llama-server with ggml's CUDA backend from the same pinned source, then runs with every
# layer on the GPU, in one go:
#   1. the decode table (bench/run-decode.sh: prefixd, prefixd --no-cache, llama-server),
#   2. the long session side by side with llama-server (bench/run-long-session.sh),
#   3. restore speed from disk and RAM, the state in device memory (prefixd_disk_bench),
# printing the same tables as on the CPU, into $OUT (default bench/results/gpu-<date>).
# --dry-run runs the same steps on the CPU at tiny sizes (no CUDA build; minutes, plus a
# llama-server build the first time): the check that the script works end to end.
#
# Usage: bench/run-gpu.sh [--dry-run] [--quick]
#   --quick: tiny sizes on the GPU too (a first look, about 10 minutes)
# Env: PREFIXD_JOBS (build jobs, default: all cores), THREADS (default 2; the GPU does the work),
#      OUT, WORK (default /tmp/prefixd-gpu).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

DRY=0
QUICK=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --quick) QUICK=1 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
export PREFIXD_JOBS="${PREFIXD_JOBS:-$(nproc)}"
export THREADS="${THREADS:-2}"
WORK="${WORK:-/tmp/prefixd-gpu}"
OUT="${OUT:-$here/bench/results/gpu-$(date -u +%Y%m%d)}"
[[ "$DRY" == 1 ]] && OUT="${OUT%/}-dry-run"
mkdir -p "$WORK" "$OUT"
log() { echo "[$(date +%H:%M:%S)] run-gpu: $*" >&2; }

if [[ "$DRY" == 1 ]]; then
  build_dir=build
  bash scripts/build.sh >&2
  export LLAMA_SERVER_CUDA=0
  offload=()
  shapes=tiny; rounds=1; long_shape=tiny; long_context=8192; restore_shape=tiny; restore_tokens=2048
else
  command -v nvidia-smi >/dev/null && nvidia-smi -L | tee "$OUT/gpu.txt" >&2
  build_dir=build-cuda
  BUILD_DIR="$build_dir" bash scripts/build.sh --cuda >&2
  export LLAMA_SERVER_CUDA=1
  offload=(-ngl 999)
  if [[ "$QUICK" == 1 ]]; then
    shapes=tiny; rounds=2; long_shape=tiny; long_context=16384; restore_shape=tiny; restore_tokens=4096
  else
    shapes=tiny,small; rounds=5; long_shape=small; long_context=32768; restore_shape=small; restore_tokens=8192
  fi
fi
export PREFIXD_BIN="$here/$build_dir/bin/prefixd"
"$PREFIXD_BIN" system-info | tee "$OUT/system-info.txt" >&2
# Both servers offload every layer; llama-server's flag is the same.
export PREFIXD_EXTRA="${offload[*]}" LLAMA_SERVER_EXTRA="${offload[*]}"

log "1/3 decode table ($shapes, $rounds rounds)"
OUT="$OUT" WORK="$WORK/decode" bash bench/run-decode.sh --shapes "$shapes" --rounds "$rounds" \
  --name decode

log "2/3 long session ($long_shape to $long_context tokens)"
OUT="$OUT" WORK="$WORK/long" bash bench/run-long-session.sh --shape "$long_shape" \
  --max-context "$long_context" --name "long-session-$long_shape"

log "3/3 restore speed ($restore_shape, ~$restore_tokens tokens)"
"$build_dir/bin/prefixd_disk_bench" --shape "$restore_shape" --tokens "$restore_tokens" --reps 3 \
  --threads "$THREADS" --work-dir "$WORK/restore" "${offload[@]}" 2>&1 | grep -v '^prefixd: ' |
  tee "$OUT/restore-$restore_shape.txt"

log "done: $OUT"
ls -1 "$OUT" >&2
