#!/usr/bin/env bash
# Image bench side by side: prefixd serve --mmproj (cache on) vs llama-server --mmproj built from
# the SAME pinned llama.cpp source, the same generated model and projector, the same slots,
# context, threads and batch sizes. An agent session of 8 turns whose turn 2 attaches a
# 640x480 screenshot, the same image in a second conversation, then a restart of both servers
# and the first conversation's next turn (bench/image_session.py). Per turn: TTFT, prompt
# tokens evaluated, images encoded. Writes $OUT/$NAME.md (NAME defaults to images-<shapes>).
# docs/bench.md ("Images beside llama-server") explains.
#
# Usage: bench/run-images.sh [--shapes tiny[,small]] [--archs "gemma3 lfm2 qwen35"] [--rounds N]
#        [--name NAME] [--image-size WxH] [--pauses 0,1]
#        --pauses: the scenario once per value, each request sent that many seconds after the
#        last answer (0: back to back; 1: an agent that takes a second to run its tool).
# Env: PREFIXD_BIN (default build/bin/prefixd), THREADS (default 2), SLOTS (default 2), CTX (per
#      slot, default 8192), OUT (default bench/results), WORK (default /tmp/prefixd-images),
#      PORTS (default 19700-19799), PREFIXD_EXTRA / LLAMA_SERVER_EXTRA (more flags for each).
#
# llama-server runs with the caching flags of bench/run-vs-llama-server.sh (--jinja
# --ctx-checkpoints 64 --checkpoint-min-step 0, --swa-full on gemma3) and --cache-ram at its
# default (8192 MiB), plus -lv 4: its "encoding mtmd batch" trace lines count the images it
# encodes. lfm2's projector tiles images above ~724x724 and needs wrapping tokens the test
# vocabulary lacks: keep --image-size at 720 px or less on lfm2.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

SHAPES=tiny
ARCHS="gemma3 lfm2 qwen35"
ROUNDS=3
NAME=""
IMAGE_SIZE=640x480
PAUSES=0,1
RUN_COMMAND="bench/run-images.sh $*"  # for the report
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) SHAPES="$2"; shift ;;
    --archs) ARCHS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --name) NAME="$2"; shift ;;
    --image-size) IMAGE_SIZE="$2"; shift ;;
    --pauses) PAUSES="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
NAME="${NAME:-images-${SHAPES//,/-}}"
THREADS="${THREADS:-2}"
SLOTS="${SLOTS:-2}"
CTX="${CTX:-8192}"
OUT="${OUT:-$here/bench/results}"
WORK="${WORK:-/tmp/prefixd-images}"
PORTS="${PORTS:-19700-19799}"
PREFIXD_BIN="${PREFIXD_BIN:-$here/build/bin/prefixd}"

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

[[ -x "$PREFIXD_BIN" ]] || { echo "prefixd binary not found: $PREFIXD_BIN (build it or set PREFIXD_BIN)" >&2; exit 1; }
LLAMA_SERVER="$(bash "$here/bench/run-vs-llama-server.sh" --only-build)"
mkdir -p "$WORK" "$OUT"
started="$(date +%s)"
head_rev="$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')"  # at the start
results=()
IFS=, read -r -a shape_list <<<"$SHAPES"
IFS=, read -r -a pause_list <<<"$PAUSES"
for shape in "${shape_list[@]}"; do
  for arch in $ARCHS; do
    model="$WORK/model-$arch-$shape.gguf"
    mmproj="$WORK/model-$arch-$shape.mmproj.gguf"
    [[ -f "$model" && -f "$mmproj" ]] || "$PREFIXD_BIN" make-test-model --arch "$arch" \
      --shape "$shape" --mmproj "$mmproj" -o "$model" >&2
    for pause in "${pause_list[@]}"; do
      result="$WORK/$arch-$shape-pause$pause.json"
      log "$arch $shape, pause $pause s: $ROUNDS rounds"
      python3 "$here/bench/image_session.py" run --arch "$arch" --shape "$shape" \
        --model "$model" --mmproj "$mmproj" --bin "$PREFIXD_BIN" --llama-server "$LLAMA_SERVER" \
        --rounds "$ROUNDS" --threads "$THREADS" --slots "$SLOTS" --ctx "$CTX" \
        --image-size "$IMAGE_SIZE" --pause-s "$pause" --ports "$PORTS" \
        --prefixd-extra "${PREFIXD_EXTRA:-}" --llama-extra "${LLAMA_SERVER_EXTRA:-}" \
        --work "$WORK" --out "$result"
      results+=("$result")
      # the report after every run, so that an interrupted bench still leaves one
      python3 "$here/bench/image_session.py" report "${results[@]}" --md "$OUT/$NAME.md" \
        --command "$RUN_COMMAND" --notes "$(( ($(date +%s) - started) / 60 )) min, prefixd \
$head_rev, llama-server from the same pinned llama.cpp" >/dev/null
    done
  done
done
log "done in $(( ($(date +%s) - started) / 60 )) min; report: $OUT/$NAME.md"
