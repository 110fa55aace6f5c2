#!/usr/bin/env bash
# Decode throughput side by side: prefixd with the cache on, prefixd --no-cache and
# llama-server built from the SAME pinned llama.cpp source, on the qwen35 `tiny` and `small`
# test models, 1 and 2 concurrent streams, in one run. The three servers of a shape run at
# once (idle but for the one measured) and the measurements are interleaved: round r measures
# every server in turn (the order rotating each round), so that a shared machine's noise drifts
# over all three alike. Each measurement is `prefixd bench --decode --decode-reps 1`
# (bench/decode.h); bench/decode_table.py takes the medians over the rounds and the ratios.
# Writes $OUT/$NAME.{json,md}. docs/bench.md explains.
#
# Usage: bench/run-decode.sh [--shapes tiny,small] [--rounds N] [--name NAME]
# Env: PREFIXD_BIN (default build/bin/prefixd), THREADS (default 2), OUT (default bench/results),
#      WORK (default /tmp/prefixd-decode), TOKENS_tiny (default 2048), TOKENS_small (default 128),
#      NICE (default -10 when root: the bench and its servers ahead of other work on the machine),
#      PREFIXD_EXTRA / LLAMA_SERVER_EXTRA (more flags for both prefixd servers / llama-server,
#      e.g. "-ngl 999" on a GPU: bench/run-gpu.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

SHAPES=tiny,small
ROUNDS=5
NAME=decode
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) SHAPES="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --name) NAME="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
THREADS="${THREADS:-2}"
OUT="${OUT:-$here/bench/results}"
WORK="${WORK:-/tmp/prefixd-decode}"
PREFIXD_BIN="${PREFIXD_BIN:-$here/build/bin/prefixd}"
CTX=4096   # per slot; the decode prompts are ~100 tokens
if [[ -z "${NICE:-}" ]]; then NICE=0; [[ "$(id -u)" == 0 ]] && NICE=-10; fi

source "$here/bench/servers.sh"

[[ -x "$PREFIXD_BIN" ]] || { echo "prefixd binary not found: $PREFIXD_BIN" >&2; exit 1; }
LLAMA_SERVER="$(bash "$here/bench/run-vs-llama-server.sh" --only-build)"
mkdir -p "$WORK" "$OUT"
rm -f "$WORK"/run-*.json

measure_shape() {
  local shape="$1" tokens model
  tokens="${TOKENS_small:-128}"
  [[ "$shape" == tiny ]] && tokens="${TOKENS_tiny:-2048}"
  model="$WORK/model-qwen35-$shape.gguf"
  [[ -f "$model" ]] || "$PREFIXD_BIN" make-test-model --arch qwen35 --shape "$shape" --out "$model" >&2
  local p_on p_off p_ls
  p_on="$(free_port)"; p_off="$(free_port)"; p_ls="$(free_port)"
  rm -rf "$WORK/cache-on"
  local common=(-m "$model" --alias bench --slots 2 --ctx "$CTX" --threads "$THREADS" --batch 2048 --ubatch 512)
  local prefixd_extra=() llama_extra=()
  read -r -a prefixd_extra <<<"${PREFIXD_EXTRA:-}"
  read -r -a llama_extra <<<"${LLAMA_SERVER_EXTRA:-}"
  start "$WORK/$shape-prefixd.log" "$PREFIXD_BIN" serve "${common[@]}" --port "$p_on" \
    --cache-dir "$WORK/cache-on" "${prefixd_extra[@]}"
  start "$WORK/$shape-prefixd-no-cache.log" "$PREFIXD_BIN" serve "${common[@]}" --port "$p_off" \
    --no-cache "${prefixd_extra[@]}"
  start "$WORK/$shape-llama-server.log" "$LLAMA_SERVER" -m "$model" --host 127.0.0.1 --port "$p_ls" -np 2 \
    -c $((2 * CTX)) -t "$THREADS" -b 2048 -ub 512 --jinja --cache-ram 4096 --ctx-checkpoints 64 \
    --checkpoint-min-step 0 "${llama_extra[@]}"
  local labels=(prefixd prefixd-no-cache llama-server) ports=("$p_on" "$p_off" "$p_ls")
  for port in "${ports[@]}"; do wait_healthy "$port"; done
  for ((r = 0; r < ROUNDS; r++)); do
    for ((k = 0; k < 3; k++)); do
      local i=$(( (r + k) % 3 ))
      log "$shape round $((r + 1))/$ROUNDS: ${labels[$i]}"
      nice -n "$NICE" "$PREFIXD_BIN" bench --decode --decode-streams 1,2 --decode-tokens "$tokens" \
        --decode-reps 1 --url "http://127.0.0.1:${ports[$i]}" --label "${labels[$i]}" \
        --out "$WORK/run-$shape-${labels[$i]}-$r.json" >/dev/null
    done
  done
  stop_servers
}

started="$(date +%s)"
IFS=, read -r -a shape_list <<<"$SHAPES"
for shape in "${shape_list[@]}"; do measure_shape "$shape"; done
python3 "$here/bench/decode_table.py" --runs "$WORK" --out "$OUT/$NAME.json" --md "$OUT/$NAME.md"
{
  echo
  echo "Run: \`bench/run-decode.sh --shapes $SHAPES --rounds $ROUNDS\` ($(date -u +%Y-%m-%d), $(( ($(date +%s) - started) / 60 )) min;"
  echo "$THREADS threads, 2 slots each, prefixd $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'),"
  echo "llama-server from the same pinned llama.cpp, nice $NICE). Shared machine: compare the columns of one run."
} >>"$OUT/$NAME.md"
cat "$OUT/$NAME.md"
