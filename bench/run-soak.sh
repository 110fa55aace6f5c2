#!/usr/bin/env bash
# Soak bench: is a server left up for weeks bounded? One `prefixd serve` takes N rounds of the
# many-sessions agent trace (`prefixd bench --sessions S --turns T`), each round a new seed
# (new conversations), and after each round, once the disk tier's write-behind has settled,
# the bench records the process's RSS, glibc's heap, the memory of each owner
# (prefixd_memory_bytes), the disk tier's records and index, and the files of the cache dir.
# bench/soak_table.py turns the rounds into a table, a chart and the verdict: RSS flat after
# warm-up within a bound, the cache dir within --disk-quota every round. docs/bench.md explains.
#
# Usage: bench/run-soak.sh [--rounds N] [--shape tiny|small] [--sessions S] [--turns T]
#        [--system-tokens N] [--tool-tokens N] [--name NAME] [--warmup W]
# Env: PREFIXD_BIN (default build/bin/prefixd), OUT (default bench/results), WORK (default
#      /tmp/prefixd-soak), PORT (default 19500), SERVE_FLAGS (default: the issue's
#      "--slots 2 --ctx 65536 --ram-budget 64M --disk-quota 128M"), PREFIXD_EXTRA (more flags),
#      SEED=N: every round replays seed N's conversations (cache hits from round 2 on, restores
#      from RAM and disk) instead of a new seed a round,
#      HEAP_PROFILE=1: the server runs on Debian's jemalloc with its heap profile (libjemalloc2,
#      libjemalloc-dev for jeprof), a dump is taken after each round once it settled
#      (bench/prof_dump.c), and $OUT/$NAME-heap.txt gets what grew from the last warm-up round
#      to the last round, by call path (glibc's heap columns read 0 under jemalloc).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

ROUNDS=16
SHAPE=tiny
SESSIONS=24
TURNS=10
SYSTEM_TOKENS=1000
TOOL_TOKENS=150
NAME=""
WARMUP=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift ;;
    --shape) SHAPE="$2"; shift ;;
    --sessions) SESSIONS="$2"; shift ;;
    --turns) TURNS="$2"; shift ;;
    --system-tokens) SYSTEM_TOKENS="$2"; shift ;;
    --tool-tokens) TOOL_TOKENS="$2"; shift ;;
    --name) NAME="$2"; shift ;;
    --warmup) WARMUP="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
NAME="${NAME:-soak-$SHAPE}"
OUT="${OUT:-$here/bench/results}"
WORK="${WORK:-/tmp/prefixd-soak}"
PORT="${PORT:-19500}"
SERVE_FLAGS="${SERVE_FLAGS:---slots 2 --ctx 65536 --ram-budget 64M --disk-quota 128M}"
PREFIXD_BIN="${PREFIXD_BIN:-$here/build/bin/prefixd}"
url="http://127.0.0.1:$PORT"

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
[[ -x "$PREFIXD_BIN" ]] || { echo "prefixd binary not found: $PREFIXD_BIN" >&2; exit 1; }
mkdir -p "$WORK" "$OUT"
model="$WORK/model-qwen35-$SHAPE.gguf"
[[ -f "$model" ]] || "$PREFIXD_BIN" make-test-model --arch qwen35 --shape "$SHAPE" --out "$model" >&2
rm -rf "$WORK/cache" "$WORK/rounds.jsonl"

# HEAP_PROFILE: jemalloc's sampled profile, dumped on demand at each round's quiet point.
profile_env=()
if [[ -n "${HEAP_PROFILE:-}" ]]; then
  jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
  [[ -f "$jemalloc" ]] && command -v jeprof >/dev/null ||
    { echo "HEAP_PROFILE needs libjemalloc2 and jeprof (libjemalloc-dev)" >&2; exit 1; }
  rm -rf "$WORK/prof" && mkdir -p "$WORK/prof"
  cc -shared -fPIC -O2 -o "$WORK/prof_dump.so" "$here/bench/prof_dump.c" -ldl -lpthread
  cp "$PREFIXD_BIN" "$WORK/prefixd-profiled"  # jeprof reads symbols from it; a rebuild may not
  PREFIXD_BIN="$WORK/prefixd-profiled"
  profile_env=(LD_PRELOAD="$jemalloc $WORK/prof_dump.so"
               MALLOC_CONF="prof:true,lg_prof_sample:12,prof_prefix:$WORK/prof/jeprof"
               PREFIXD_PROF_DUMP_TRIGGER="$WORK/prof/trigger")
fi
# Takes a dump now and names it after round $1 (waits at most 10 s for it).
dump_heap() {
  [[ -n "${HEAP_PROFILE:-}" ]] || return 0
  local before; before="$(ls "$WORK/prof" | grep -c '^jeprof' || true)"
  touch "$WORK/prof/trigger"
  for ((t = 0; t < 100; t++)); do
    [[ "$(ls "$WORK/prof" | grep -c '^jeprof' || true)" -gt "$before" ]] && break
    sleep 0.1
  done
  local dump; dump="$(ls -t "$WORK"/prof/jeprof* 2>/dev/null | head -1 || true)"
  if [[ -z "$dump" ]]; then log "round $1: no heap dump came within 10 s"; return 0; fi
  mv "$dump" "$WORK/prof/round-$1.heap"
}

# shellcheck disable=SC2086
env "${profile_env[@]}" "$PREFIXD_BIN" serve -m "$model" --alias soak --host 127.0.0.1 --port "$PORT" \
  --cache-dir "$WORK/cache" $SERVE_FLAGS ${PREFIXD_EXTRA:-} >"$WORK/serve.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
for ((t = 0; t < 600; t++)); do
  curl -sf -o /dev/null "$url/health" && break
  kill -0 "$pid" 2>/dev/null || { tail -20 "$WORK/serve.log" >&2; exit 1; }
  sleep 0.5
done

metric() { grep -E "^$1 " <<<"$2" | awk '{printf "%.0f", $2}'; }
# sample ROUND SECONDS: one JSON line of what the process and its cache dir hold now.
sample() {
  local page files index
  # The disk tier's write-behind settles: its footprint steady for three polls (at most 30 s).
  local last=-1 same=0
  for ((t = 0; t < 60 && same < 3; t++)); do
    page="$(curl -sf "$url/metrics")"
    local now; now="$(metric 'prefixd_cache_disk_footprint_bytes' "$page")"
    if [[ "$now" == "$last" ]]; then same=$((same + 1)); else same=0; fi
    last="$now"; sleep 0.5
  done
  files="$(find "$WORK/cache" -type f -printf '%s\n' | awk '{s += $1} END {printf "%.0f", s}')"
  index="$(stat -c %s "$WORK/cache/index.log" 2>/dev/null || echo 0)"
  # Resident pages of the large anonymous mappings (> 100 MiB: llama.cpp's KV cache and
  # compute buffers, mapped at start and resident only where touched).
  large="$(awk '/^[0-9a-f]+-[0-9a-f]+ /{anon = ($6 == "")} /^Size:/{size = $2}
    /^Rss:/{if (anon && size > 102400) s += $2} END {printf "%.0f", s * 1024}' /proc/$pid/smaps)"
  printf '%s' "$page" >"$WORK/metrics.txt"
  python3 - "$1" "$2" "$files" "$index" "$(grep VmRSS /proc/$pid/status | awk '{printf "%.0f", $2 * 1024}')" \
    "$large" "$WORK/metrics.txt" <<'PY'
import json, re, sys
rnd, secs, files, index, rss, large, page_path = sys.argv[1:8]
page = open(page_path).read()
def val(name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", page, re.M)
    return int(float(m.group(1))) if m else None
owners = {m.group(1): int(float(m.group(2)))
          for m in re.finditer(r'^prefixd_memory_bytes\{owner="([^"]+)"\} (\S+)$', page, re.M)}
print(json.dumps({
    "round": int(rnd), "seconds": float(secs), "rss_bytes": int(rss),
    "heap_in_use_bytes": val('prefixd_process_heap_bytes{state="in_use"}'),
    "heap_free_bytes": val('prefixd_process_heap_bytes{state="free"}'),
    "heap_mapped_bytes": val('prefixd_process_heap_bytes{state="mapped"}'),
    "heap_arenas": val("prefixd_process_heap_arenas"),
    "large_mappings_resident_bytes": int(large),
    "allocator_trims": val("prefixd_allocator_trims_total"),
    "owners": owners,
    "disk_records_bytes": val('prefixd_cache_bytes{tier="disk"}'),
    "disk_index_bytes": val("prefixd_cache_disk_index_bytes"),
    "disk_quota_bytes": val("prefixd_cache_disk_quota_bytes"),
    "ram_budget_bytes": val("prefixd_cache_ram_budget_bytes"),
    "buffer_pool_limit_bytes": val("prefixd_buffer_pool_limit_bytes"),
    "cache_dir_file_bytes": int(files), "index_log_file_bytes": int(index),
    "prompt_tokens": val("prefixd_prompt_tokens_total"),
    "cached_tokens": val("prefixd_cached_tokens_total"),
    "requests_200": val('prefixd_http_requests_total{route="/v1/chat/completions",status="200"}'),
}))
PY
}

log "$NAME: $ROUNDS rounds of $SESSIONS sessions x $TURNS requests, serve $SERVE_FLAGS"
for ((r = 1; r <= ROUNDS; r++)); do
  t0="$(date +%s.%N)"
  "$PREFIXD_BIN" bench --url "$url" --model soak --sessions "$SESSIONS" --turns "$TURNS" \
    --system-tokens "$SYSTEM_TOKENS" --tool-tokens "$TOOL_TOKENS" --seed "${SEED:-$r}" \
    --no-restart --no-branch --no-warmup --out "$WORK/round-$r.json" >"$WORK/round-$r.log" 2>&1
  secs="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')"
  sample "$r" "$secs" >>"$WORK/rounds.jsonl"
  dump_heap "$r"
  log "round $r: $(tail -1 "$WORK/rounds.jsonl" | python3 -c 'import json,sys; j=json.load(sys.stdin); print("RSS %.1f MB, cache dir %.1f MB" % (j["rss_bytes"]/2**20, j["cache_dir_file_bytes"]/2**20))')"
done

if [[ -n "${HEAP_PROFILE:-}" && "$ROUNDS" -gt "$WARMUP" ]]; then
  { echo "# Heap grown from round $WARMUP to round $ROUNDS (jeprof --cum, MB), $NAME"
    jeprof --text --cum --base="$WORK/prof/round-$WARMUP.heap" "$PREFIXD_BIN" \
      "$WORK/prof/round-$ROUNDS.heap" 2>/dev/null | grep -v '(inline)' | sort -k4 -g -r | head -60 ||
      true  # head closes the pipe early: not a failure of the run
  } >"$OUT/$NAME-heap.txt"
  log "heap growth by call path: $OUT/$NAME-heap.txt"
fi

python3 "$here/bench/soak_table.py" "$WORK/rounds.jsonl" --warmup "$WARMUP" \
  --title "Soak: qwen35 $SHAPE, serve $SERVE_FLAGS, $ROUNDS rounds of $SESSIONS sessions x $TURNS requests" \
  --command "bench/run-soak.sh --shape $SHAPE --rounds $ROUNDS --sessions $SESSIONS --turns $TURNS" \
  --md "$OUT/$NAME.md" --json "$OUT/$NAME.json"
