#!/usr/bin/env bash
# Speculative decoding side by side: prefixd and llama-server built from the SAME pinned
# llama.cpp source, each with and without the same --spec-type, on the same test model, 1 and
# 2 concurrent streams, in one run. The four servers run at once (idle but for the one measured)
# and the rounds are interleaved (the order rotating each round) so that a shared machine's
# noise drifts over all of them alike. Each measurement is `prefixd bench --decode
# --decode-reps 1` (bench/decode.h): greedy answers of a fixed length (ignore_eos) to prompts
# of their own; the tiny test models' greedy output falls into loops, which is what an n-gram
# drafter predicts. bench/spec_table.py takes the medians, the ratios and the acceptance
# (drafted tokens the model took, from timings.draft_n / draft_n_accepted). Writes
# $OUT/$NAME.{json,md}. docs/speculation.md explains.
#
# Usage: bench/run-spec-bench.sh [--spec-type ngram-mod] [--arch qwen35] [--shape tiny]
#                                [--draft-arch ARCH] [--predictable] [--rounds N] [--tokens N]
#                                [--name NAME]
# --draft-arch: a draft model (a tiny test model of that arch; the target's own arch and shape
# is the model drafting itself), given to both servers with -md; the spec type is then
# draft-simple. --spec-type draft-mtp: the test model with an MTP head (make-test-model --nextn 1);
# --predictable: with a head built to predict its trunk (make-test-model --predictable), so that
# its drafts are accepted (qwen35, qwen3next).
# Env: PREFIXD_BIN (default build/bin/prefixd), THREADS (default 2), OUT (default bench/results),
#      WORK (default /tmp/prefixd-spec), NICE (default -10 when root).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

SPEC=ngram-mod
ARCH=qwen35
SHAPE=tiny
ROUNDS=3
TOKENS=512
NAME=""
DRAFT_ARCH=""
PREDICTABLE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --spec-type) SPEC="$2"; shift ;;
    --arch) ARCH="$2"; shift ;;
    --shape) SHAPE="$2"; shift ;;
    --draft-arch) DRAFT_ARCH="$2"; shift ;;
    --predictable) PREDICTABLE=1 ;;
    --rounds) ROUNDS="$2"; shift ;;
    --tokens) TOKENS="$2"; shift ;;
    --name) NAME="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$DRAFT_ARCH" ]] && SPEC=draft-simple
NAME="${NAME:-spec-$SPEC-$ARCH-$SHAPE${DRAFT_ARCH:+-draft-$DRAFT_ARCH}${PREDICTABLE:+-predictable}}"
THREADS="${THREADS:-2}"
OUT="${OUT:-$here/bench/results}"
WORK="${WORK:-/tmp/prefixd-spec}"
PREFIXD_BIN="${PREFIXD_BIN:-$here/build/bin/prefixd}"
CTX=4096
if [[ -z "${NICE:-}" ]]; then NICE=0; [[ "$(id -u)" == 0 ]] && NICE=-10; fi

source "$here/bench/servers.sh"

[[ -x "$PREFIXD_BIN" ]] || { echo "prefixd binary not found: $PREFIXD_BIN" >&2; exit 1; }
LLAMA_SERVER="$(bash "$here/bench/run-vs-llama-server.sh" --only-build)"
mkdir -p "$WORK" "$OUT"
rm -f "$WORK"/run-*.json

# draft-mtp: the test model gets an MTP head (--nextn 1); every server loads the same file, the
# ones without speculation its trunk alone.
nextn=()
[[ "$SPEC" == draft-mtp ]] && nextn=(--nextn 1)
[[ -n "$PREDICTABLE" ]] && nextn+=(--predictable)
model="$WORK/model-$ARCH-$SHAPE${nextn:+-mtp}${PREDICTABLE:+-predictable}.gguf"
[[ -f "$model" ]] || "$PREFIXD_BIN" make-test-model --arch "$ARCH" --shape "$SHAPE" "${nextn[@]}" \
  --out "$model" >&2
spec_args=(--spec-type "$SPEC")
if [[ -n "$DRAFT_ARCH" ]]; then
  draft="$WORK/model-$DRAFT_ARCH-tiny.gguf"
  [[ -f "$draft" ]] || "$PREFIXD_BIN" make-test-model --arch "$DRAFT_ARCH" --shape tiny --out "$draft" >&2
  spec_args+=(-md "$draft")
fi
labels=(prefixd prefixd-spec llama-server llama-server-spec)
ports=()
for _ in "${labels[@]}"; do ports+=("$(free_port)"); done
rm -rf "$WORK/cache" "$WORK/cache-spec"
common=(-m "$model" --alias bench --slots 2 --ctx "$CTX" --threads "$THREADS" --batch 2048 --ubatch 512)
ls_common=(-m "$model" --host 127.0.0.1 -np 2 -c $((2 * CTX)) -t "$THREADS" -b 2048 -ub 512 --jinja)
start "$WORK/prefixd.log" "$PREFIXD_BIN" serve "${common[@]}" --port "${ports[0]}" --cache-dir "$WORK/cache"
start "$WORK/prefixd-spec.log" "$PREFIXD_BIN" serve "${common[@]}" --port "${ports[1]}" \
  --cache-dir "$WORK/cache-spec" "${spec_args[@]}"
start "$WORK/llama-server.log" "$LLAMA_SERVER" "${ls_common[@]}" --port "${ports[2]}"
start "$WORK/llama-server-spec.log" "$LLAMA_SERVER" "${ls_common[@]}" --port "${ports[3]}" "${spec_args[@]}"
for port in "${ports[@]}"; do wait_healthy "$port"; done
started="$(date +%s)"
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < 4; k++)); do
    i=$(( (r + k) % 4 ))
    log "round $((r + 1))/$ROUNDS: ${labels[$i]}"
    nice -n "$NICE" "$PREFIXD_BIN" bench --decode --decode-streams 1,2 --decode-tokens "$TOKENS" \
      --decode-reps 1 --url "http://127.0.0.1:${ports[$i]}" --label "${labels[$i]}" \
      --out "$WORK/run-$SHAPE-${labels[$i]}-$r.json" >/dev/null
  done
done
stop_servers
python3 "$here/bench/spec_table.py" --runs "$WORK" --spec-type "$SPEC${DRAFT_ARCH:+, draft $DRAFT_ARCH tiny}" --model "$ARCH $SHAPE${PREDICTABLE:+ (predictable head)}" \
  --out "$OUT/$NAME.json" --md "$OUT/$NAME.md"
{
  echo
  echo "Run: \`bench/run-spec-bench.sh --spec-type $SPEC --arch $ARCH --shape $SHAPE${DRAFT_ARCH:+ --draft-arch $DRAFT_ARCH}${PREDICTABLE:+ --predictable} --rounds $ROUNDS --tokens $TOKENS\`"
  echo "($(date -u +%Y-%m-%d), $(( ($(date +%s) - started) / 60 )) min; $THREADS threads, 2 slots each,"
  echo "prefixd $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'), llama-server from the same pinned"
  echo "llama.cpp, nice $NICE). Shared machine: compare the columns of one run."
} >>"$OUT/$NAME.md"
cat "$OUT/$NAME.md"
