#!/usr/bin/env bash
# Side-by-side bench: prefixd serve vs llama-server (built from the SAME pinned llama.cpp source),
# one generated `small` model per family, the same agent trace, one after the other.
# Writes bench/results/vs-llama-server/<arch>.{json,md,png} and bench/results/vs-llama-server/README.md.
# docs/bench.md explains.
#
# Usage: bench/run-vs-llama-server.sh [--only-build] [--shape small|tiny] [--archs "llama qwen35 …"] [--real]
#        An arch entry ARCH[@VOCAB][+TEMPLATE] makes the model with a real tokenizer and chat
#        template of the pinned source (make-test-model --vocab VOCAB --template TEMPLATE;
#        docs/test-models.md), e.g. "qwen35@qwen35+Qwen3.5-4B qwen35@qwen35+openai-gpt-oss-120b
#        qwen35@gemma-4+google-gemma-4-31B-it" (REAL_ROWS below); both servers get that file,
#        so llama-server renders the same template (--jinja) with the same tokenizer.
#        [--trace-args "--sessions 3 --turns 3 --system-tokens 1000 --tool-tokens 150"]
#        [--check-output]: also replay the trace against prefixd serve --no-cache and compare
#        prefixd's streamed answers request by request (greedy; bench/output_check.py): the
#        report's "output = cache off" column. --real implies it.
#        [--all-real]: the ten real-template rows (ALL_REAL_ROWS), with --check-output.
# Env: PREFIXD_BIN (default build/bin/prefixd), PREFIXD_JOBS (default 2), THREADS (default 2),
#      LLAMA_SKIP_PARSING (templates llama-server runs with --skip-chat-parsing; see below),
#      SLOTS (default 2), CTX (per slot, default 8192), OUT (default bench/results/vs-llama-server),
#      WORK (default /tmp/prefixd-vs-llama), LLAMA_SERVER_EXTRA (more llama-server flags, e.g.
#      "-fa off"; both servers use flash attention by default (llama-server: "auto", on for CPU;
#      prefixd serve: on unless --no-flash-attn), PREFIXD_EXTRA (more prefixd serve flags; e.g.
#      both set to "--spec-type ngram-mod": the trace with speculation on, docs/speculation.md),
#      MAKE_EXTRA (more make-test-model flags, e.g. "--nextn 1" for an MTP head, with both
#      servers' --spec-type draft-mtp), LLAMA_SERVER_CUDA (1: llama-server built with CUDA).
#
# Both servers get the same model, slot count, context per slot, threads and batch sizes.
# llama-server runs with its best caching flags for this version: --cache-ram (host-memory
# prompt cache), --ctx-checkpoints 64 with --checkpoint-min-step 0 (a checkpoint at every user
# message, so recurrent / SWA models can go back to one), --swa-full on SWA models (a full-size
# SWA cache, so a prefix is reusable beyond the window), --jinja (the model's chat template).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

LLAMA_COMMIT_SHORT="de3ff81"
DEPS_DIR="${PREFIXD_DEPS_DIR:-$HOME/.cache/prefixd}"
LLAMA_SRC="$DEPS_DIR/llama.cpp-$LLAMA_COMMIT_SHORT/src"
# LLAMA_SERVER_CUDA=1: llama-server with ggml's CUDA backend, in its own build dir (the GPU
# bench, bench/run-gpu.sh).
LLAMA_SERVER_CUDA="${LLAMA_SERVER_CUDA:-0}"
SERVER_BUILD="$DEPS_DIR/llama.cpp-$LLAMA_COMMIT_SHORT/build-server"
[[ "$LLAMA_SERVER_CUDA" == 1 ]] && SERVER_BUILD="$SERVER_BUILD-cuda"
JOBS="${PREFIXD_JOBS:-2}"
THREADS="${THREADS:-2}"
RUN_COMMAND="${OUT:+OUT=$OUT }${MAKE_EXTRA:+MAKE_EXTRA=\"$MAKE_EXTRA\" }${PREFIXD_EXTRA:+PREFIXD_EXTRA=\"$PREFIXD_EXTRA\" }${LLAMA_SERVER_EXTRA:+LLAMA_SERVER_EXTRA=\"$LLAMA_SERVER_EXTRA\" }bench/run-vs-llama-server.sh $*"  # for the report
OUT="${OUT:-$here/bench/results/vs-llama-server}"
WORK="${WORK:-/tmp/prefixd-vs-llama}"
PREFIXD_BIN="${PREFIXD_BIN:-$here/build/bin/prefixd}"
SHAPE=small
# The rows with real tokenizers and templates: --archs "$REAL_ROWS" or added to a list.
REAL_ROWS="qwen35@qwen35+Qwen3.5-4B qwen35@qwen35+openai-gpt-oss-120b qwen35@gemma-4+google-gemma-4-31B-it"
# The ten templates agents meet, all on the tiny hybrid qwen35 (docs/test-models.md).
ALL_REAL_ROWS="$REAL_ROWS qwen35@qwen35+Qwen3-Coder qwen35@qwen35+NVIDIA-Nemotron-3-Nano-30B-A3B-BF16
  qwen35@qwen35+ibm-granite-granite-4.0 qwen35@qwen35+LFM2.5-Instruct
  qwen35@qwen35+deepseek-ai-DeepSeek-V3.2 qwen35@qwen35+GLM-4.7-Flash
  qwen35@llama-bpe+meta-llama-Llama-3.1-8B-Instruct"
# llama-server's response parser for gpt-oss (harmony channels) and DeepSeek-V3.2 rejects what a
# random-weight model writes: the stream ends with `data: {"error":{"code":500,"message":"The
# model produced output that does not match the expected peg-native format"}}` and no usage.
# gpt-oss sends its first chunk before that, and the bench takes the prompt's numbers from that
# chunk's timings (timings_per_token; the row's answer_error says so). DeepSeek-V3.2 can fail
# before any chunk, so llama-server runs it with --skip-chat-parsing (a pure content parser);
# its /apply-template renders all ten trace prompts identically with and without the flag
# (checked; gemma-4's would change, so the flag is not applied more widely). On gpt-oss the
# flag changed nothing measured (the same cached tokens on every request).
LLAMA_SKIP_PARSING="${LLAMA_SKIP_PARSING-deepseek-ai-DeepSeek-V3.2}"
ARCHS="llama qwen35 nemotron_h gemma3"
ONLY_BUILD=0
CHECK_OUTPUT=0
TRACE_ARGS="--sessions 3 --turns 3 --system-tokens 1000 --tool-tokens 150 --max-tokens 8"
SLOTS="${SLOTS:-2}"
CTX="${CTX:-8192}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only-build) ONLY_BUILD=1 ;;
    --shape) SHAPE="$2"; shift ;;
    --archs) ARCHS="$2"; shift ;;
    --real) ARCHS="$ARCHS $REAL_ROWS"; CHECK_OUTPUT=1 ;;
    --all-real) ARCHS="$ALL_REAL_ROWS"; CHECK_OUTPUT=1 ;;
    --check-output) CHECK_OUTPUT=1 ;;
    --trace-args) TRACE_ARGS="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# llama-server from the pinned source, in its own build dir; no network (no UI download, no TLS).
# A build dir that exists is brought up to date (the patch set may have changed the source: both
# servers must run the same kernels), which costs nothing when nothing changed.
build_llama_server() {
  local bin="$SERVER_BUILD/bin/llama-server"
  if [[ -x "$bin" ]]; then
    cmake --build "$SERVER_BUILD" -j "$JOBS" --target llama-server >&2
    echo "$bin"
    return
  fi
  [[ -d "$LLAMA_SRC" ]] || bash scripts/setup-llama.sh >/dev/null
  log "building llama-server in $SERVER_BUILD (-j$JOBS; takes a while on 2 cores)"
  cmake -S "$LLAMA_SRC" -B "$SERVER_BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON "-DGGML_CUDA=$([[ "$LLAMA_SERVER_CUDA" == 1 ]] && echo ON || echo OFF)" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_COMMON=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_LLGUIDANCE=OFF >&2
  cmake --build "$SERVER_BUILD" -j "$JOBS" --target llama-server >&2
  echo "$bin"
}

LLAMA_SERVER="$(build_llama_server)"
[[ "$ONLY_BUILD" == 1 ]] && { echo "$LLAMA_SERVER"; exit 0; }

[[ -x "$PREFIXD_BIN" ]] || { echo "prefixd binary not found: $PREFIXD_BIN (build it or set PREFIXD_BIN)" >&2; exit 1; }
if ! command -v gnuplot >/dev/null 2>&1; then
  log "installing gnuplot-nox (charts)"
  apt-get install -y -q gnuplot-nox >/dev/null 2>&1 || log "gnuplot-nox not installed: no charts"
fi

mkdir -p "$WORK" "$OUT"
"$LLAMA_SERVER" --help > "$WORK/llama-server-help.txt" 2>&1 || true
started="$(date +%s)"
trace="$WORK/trace.jsonl"
# shellcheck disable=SC2086
"$PREFIXD_BIN" bench --trace-only --trace-out "$trace" $TRACE_ARGS

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run_pair ARCH CMD_A PORT_A CMD_B PORT_B: replays the trace against prefixd (A) and llama-server
# (B) side by side: both launched, each request sent to one and then the other, the order
# alternating, so that load from other work on the machine hits both alike.
run_pair() {
  local arch="$1"
  : > "$WORK/$arch-prefixd.log"; : > "$WORK/$arch-llama-server.log"
  log "$arch: prefixd and llama-server side by side"
  "$PREFIXD_BIN" bench --trace "$trace" --url "http://127.0.0.1:$3" --label prefixd \
    --server-cmd "$2" --server-log "$WORK/$arch-prefixd.log" --out "$WORK/$arch-prefixd.json" \
    --md "$WORK/$arch-prefixd.md" \
    --b-url "http://127.0.0.1:$5" --b-label llama-server --b-server-cmd "$4" \
    --b-server-log "$WORK/$arch-llama-server.log" --b-out "$WORK/$arch-llama-server.json" \
    --b-md "$WORK/$arch-llama-server.md"
}

# run_one ARCH LABEL SERVER_CMD PORT: replays the trace against one server the bench launches.
run_one() {
  local arch="$1" label="$2" cmd="$3" port="$4"
  local log_file="$WORK/$arch-$label.log"
  : > "$log_file"
  log "$arch: $label"
  "$PREFIXD_BIN" bench --trace "$trace" --url "http://127.0.0.1:$port" --label "$label" \
    --server-cmd "$cmd" --server-log "$log_file" --out "$WORK/$arch-$label.json" \
    --md "$WORK/$arch-$label.md"
}

chart() {
  local arch="$1"
  local tsv="$WORK/$arch.tsv" png="$OUT/$arch.png"
  command -v gnuplot >/dev/null 2>&1 || return 0
  gnuplot <<GP
set terminal pngcairo size 1000,760 font ",10"
set output "$png"
set multiplot layout 2,1 title "$arch ($SHAPE test model): prefixd vs llama-server, same trace"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key below horizontal
set ylabel "evaluated prompt tokens"
set xlabel "request (flags)"
plot "$tsv" using 2:xtic(sprintf("%d %s", \$1, strcol(7) eq "-" ? "" : strcol(7))) title "prefixd" lc rgb "#1f77b4", \
     "" using 3 title "llama-server" lc rgb "#ff7f0e", \
     "" using 6 title "reusable" with linespoints lc rgb "#2ca02c" pt 7
set ylabel "TTFT (s)"
plot "$tsv" using 4:xtic(sprintf("%d %s", \$1, strcol(7) eq "-" ? "" : strcol(7))) title "prefixd" lc rgb "#1f77b4", \
     "" using 5 title "llama-server" lc rgb "#ff7f0e"
unset multiplot
GP
}

done_archs=()
for entry in $ARCHS; do
  # ARCH[@VOCAB][+TEMPLATE]: the row is named ARCH-VOCAB-TEMPLATE
  spec="${entry%%+*}"; template=""; [[ "$entry" == *+* ]] && template="${entry#*+}"
  base_arch="${spec%%@*}"; vocab=""; [[ "$spec" == *@* ]] && vocab="${spec#*@}"
  arch="$base_arch${vocab:+-$vocab}${template:+-$template}"
  make_args=(--arch "$base_arch" --shape "$SHAPE")
  [[ -n "$vocab" ]] && make_args+=(--vocab "$vocab")
  [[ -n "$template" ]] && make_args+=(--template "$template")
  # shellcheck disable=SC2206
  make_args+=(${MAKE_EXTRA:-})
  model="$WORK/model-$arch-$SHAPE${MAKE_EXTRA:+-$(echo "$MAKE_EXTRA" | tr -cd 'a-z0-9')}.gguf"
  [[ -f "$model" ]] || "$PREFIXD_BIN" make-test-model "${make_args[@]}" --out "$model" >&2
  cache="$WORK/cache-$arch"
  rm -rf "$cache"
  port="$(free_port)"
  prefixd_cmd="exec '$PREFIXD_BIN' serve -m '$model' --alias bench --port $port \
    --cache-dir '$cache' --slots $SLOTS --ctx $CTX --threads $THREADS ${PREFIXD_EXTRA:-}"
  ls_flags=()
  case "$base_arch" in gemma3|gemma4|gpt-oss) ls_flags=(--swa-full) ;; esac
  [[ -n "$template" && " $LLAMA_SKIP_PARSING " == *" $template "* ]] && ls_flags+=(--skip-chat-parsing)
  port_b="$(free_port)"
  llama_cmd="exec '$LLAMA_SERVER' -m '$model' --host 127.0.0.1 --port $port_b \
    -np $SLOTS -c $((SLOTS * CTX)) -t $THREADS --jinja --cache-ram 4096 --ctx-checkpoints 64 \
    --checkpoint-min-step 0 ${ls_flags[*]:-} ${LLAMA_SERVER_EXTRA:-}"
  run_pair "$arch" "$prefixd_cmd" "$port" "$llama_cmd" "$port_b"
  if [[ "$CHECK_OUTPUT" == 1 ]]; then
    rm -rf "$cache-off"
    port="$(free_port)"
    run_one "$arch" prefixd-no-cache "exec '$PREFIXD_BIN' serve -m '$model' --alias bench \
      --port $port --no-cache --cache-dir '$cache-off' --slots $SLOTS --ctx $CTX \
      --threads $THREADS" "$port"
    python3 "$here/bench/output_check.py" "$WORK/$arch-prefixd.json" \
      "$WORK/$arch-prefixd-no-cache.json" --out "$OUT/$arch-output-check.json" \
      || log "$arch: prefixd's output differs from --no-cache (see $OUT/$arch-output-check.json)"
  fi
  "$PREFIXD_BIN" bench --combine "$WORK/$arch-prefixd.json,$WORK/$arch-llama-server.json" \
    --title "$arch ($SHAPE test model): prefixd vs llama-server" \
    --out "$OUT/$arch.json" --md "$OUT/$arch.md" --tsv "$WORK/$arch.tsv" >/dev/null
  # the per-request miss reasons of prefixd, for the report
  grep 'route=/v1/chat/completions' "$WORK/$arch-prefixd.log" \
    > "$OUT/$arch-prefixd-requests.log" || true
  chart "$arch"
  done_archs+=("$arch")
  # the report after every family, so that an interrupted run still leaves one
  python3 "$here/bench/results_readme.py" "$OUT" "${done_archs[@]}" --shape "$SHAPE" \
    --trace-args "$TRACE_ARGS" --minutes $(( ($(date +%s) - started) / 60 )) \
    --command "$RUN_COMMAND"
  log "$arch done: $(sed -n 5,8p "$OUT/$arch.md" | tr '\n' ' ')"
done
log "done in $(( ($(date +%s) - started) / 60 )) min; report: $OUT/README.md"
