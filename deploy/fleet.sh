#!/usr/bin/env bash
# A fleet on one machine: Redis, N prefixd servers that share it (--remote-cache), each with its
# own cache dir and --server-name, and HAProxy in front of them (deploy/haproxy.cfg.in:
# consistent hashing on the session key, health checks, retries), all on 127.0.0.1. It runs in
# the foreground, prints the front URL on stdout once every part answers, and stops them all
# on Ctrl-C, on SIGTERM, or when HAProxy exits (a server or Redis that dies is reported and left
# down: HAProxy routes around it, which is the point). docs/deployment.md, "A fleet behind
# HAProxy", explains the config.
#
#   deploy/fleet.sh -m MODEL.gguf [-n 3] [--port 8080] [--dir DIR] [-- SERVE FLAGS...]
#
#   -m, --model FILE     the GGUF model every server serves (required)
#   -n, --servers N      prefixd servers (default 3)
#   --port PORT          HAProxy's front port (default: a free one)
#   --stats-port PORT    HAProxy's stats page, CSV at /;csv (default: a free one)
#   --redis-port PORT    Redis (default: a free one)
#   --server-port PORT   server i listens on PORT+i-1 (default: each picks a free one)
#   --name PREFIX        server i is named PREFIX-i in X-Prefixd-Server and HAProxy (default fleet)
#   --redis-maxmemory M  Redis's maxmemory, evicting allkeys-lru (default 1gb)
#   --dir DIR            cache dirs, Redis's dir, logs and the rendered haproxy.cfg; a given DIR
#                        is kept, so a second run finds its caches (default: a temp dir, removed)
#   --start-timeout S    seconds each part may take to answer (default 300: big models load slowly)
#   --kv-events ENDPOINT each server publishes its KV events (docs/kv-events.md) to a subscriber
#                        bound at ENDPOINT (--kv-events-connect), as pod NAME-i: its server name
#   -- FLAGS...          more `prefixd serve` flags for every server (e.g. -- --ctx 32768 -ngl 99);
#                        each server gets --threads <cores / N> unless FLAGS set it
#
# Environment: PREFIXD_BIN (default: prefixd on PATH, else build/bin/prefixd), HAPROXY_BIN
# (default: haproxy on PATH, else /usr/sbin/haproxy). Needs redis-server, redis-cli, curl and
# python3 (free ports): scripts/setup-deps.sh installs them all.
#
# Example: `deploy/fleet.sh -m model.gguf --port 8080` in one terminal, an agent pointed at
# http://127.0.0.1:8080/v1 in another; `kill -9` a server's pid (printed) and watch its
# sessions move (/v1/requests/recent on the others shows tier "remote").
set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true  # an "&" in a replacement stays an "&"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
model="" n=3 front_port="" stats_port="" redis_port="" server_port="" prefix=fleet
maxmemory=1gb dir="" start_timeout=300 kv_events="" serve_args=()

die() { echo "fleet: $*" >&2; exit 2; }
while (($#)); do
  case "$1" in
    -m|--model) model="${2:?}"; shift 2 ;;
    -n|--servers) n="${2:?}"; shift 2 ;;
    --port) front_port="${2:?}"; shift 2 ;;
    --stats-port) stats_port="${2:?}"; shift 2 ;;
    --redis-port) redis_port="${2:?}"; shift 2 ;;
    --server-port) server_port="${2:?}"; shift 2 ;;
    --name) prefix="${2:?}"; shift 2 ;;
    --redis-maxmemory) maxmemory="${2:?}"; shift 2 ;;
    --dir) dir="${2:?}"; shift 2 ;;
    --start-timeout) start_timeout="${2:?}"; shift 2 ;;
    --kv-events) kv_events="${2:?}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; serve_args=("$@"); break ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ -n "$model" ]] || die "-m MODEL is required (see --help)"
[[ -f "$model" ]] || die "no model file $model"
[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "-n takes a count of servers, not $n"
[[ "$prefix" =~ ^[A-Za-z0-9._-]+$ ]] || die "--name takes letters, digits, '.', '_' and '-'"

prefixd="${PREFIXD_BIN:-$(command -v prefixd || echo "$here/../build/bin/prefixd")}"
haproxy="${HAPROXY_BIN:-$(command -v haproxy || echo /usr/sbin/haproxy)}"
[[ -x "$prefixd" ]] || die "prefixd not found at $prefixd: build it or set PREFIXD_BIN"
[[ -x "$haproxy" ]] || die "haproxy not found at $haproxy: run scripts/setup-deps.sh or set HAPROXY_BIN"
for tool in redis-server redis-cli curl python3; do
  command -v "$tool" >/dev/null || die "$tool is missing: run scripts/setup-deps.sh"
done

keep_dir=1
if [[ -z "$dir" ]]; then dir="$(mktemp -d "${TMPDIR:-/tmp}/prefixd-fleet.XXXXXX")"; keep_dir=0; fi
mkdir -p "$dir/logs" "$dir/redis" "$dir/cache"
dir="$(cd "$dir" && pwd)"

# The children, in start order; stopped in reverse (HAProxy first, Redis last).
pids=() names=()
cleanup() {
  local rc=$? i pid deadline
  trap - EXIT INT TERM
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  deadline=$((SECONDS + 15))  # prefixd flushes its disk tier on SIGTERM
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  wait 2>/dev/null || true
  if ((keep_dir == 0)); then rm -rf "$dir"; fi
  if ((${#pids[@]})); then echo "fleet: stopped" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Starts a child that also dies should this script be killed without its traps (setpriv's
# parent-death signal, where util-linux has it).
spawn() {
  local name="$1" log="$2"; shift 2
  if command -v setpriv >/dev/null; then set -- setpriv --pdeathsig TERM -- "$@"; fi
  "$@" >"$log" 2>&1 </dev/null &
  pids+=($!) names+=("$name")
}
alive() { kill -0 "${pids[$1]}" 2>/dev/null; }
# Polls `cmd...` until it succeeds; fails after --start-timeout or when child $1 exits.
wait_for() {
  local child="$1" what="$2" deadline=$((SECONDS + start_timeout)); shift 2
  until "$@" >/dev/null 2>&1; do
    alive "$child" || die "${names[child]} exited while starting; its log: $dir/logs/${names[child]}.log"
    ((SECONDS < deadline)) || die "$what: not up after ${start_timeout} s"
    sleep 0.1
  done
}

redis_port="${redis_port:-$(free_port)}"
spawn redis "$dir/logs/redis.log" redis-server --bind 127.0.0.1 --port "$redis_port" \
  --save '' --appendonly no --dir "$dir/redis" --daemonize no \
  --maxmemory "$maxmemory" --maxmemory-policy allkeys-lru
wait_for 0 "Redis on port $redis_port" redis-cli -h 127.0.0.1 -p "$redis_port" ping

threads=$(($(nproc) / n)); ((threads >= 1)) || threads=1
for ((i = 1; i <= n; i++)); do
  port=0
  if [[ -n "$server_port" ]]; then port=$((server_port + i - 1)); fi
  events=()
  if [[ -n "$kv_events" ]]; then events=(--kv-events-connect "$kv_events" --kv-events-pod "$prefix-$i"); fi
  # Defaults first, then the caller's flags, then what the fleet owns (the last one wins).
  spawn "$prefix-$i" "$dir/logs/$prefix-$i.log" "$prefixd" serve -m "$model" --threads "$threads" \
    "${serve_args[@]}" --host 127.0.0.1 --port "$port" --server-name "$prefix-$i" \
    --cache-dir "$dir/cache/$prefix-$i" --remote-cache "redis://127.0.0.1:$redis_port" \
    "${events[@]}"
done
listening_port() {  # the port server $1 logged (`prefixd listening ... port=N`)
  sed -n 's/^prefixd listening .* port=\([0-9]*\).*/\1/p' "$dir/logs/${names[$1]}.log" | head -1
}
ports=() servers=""
for ((i = 1; i <= n; i++)); do
  wait_for "$i" "${names[i]}" grep -q '^prefixd listening ' "$dir/logs/${names[i]}.log"
  ports[i]="$(listening_port "$i")"
  wait_for "$i" "${names[i]}" curl -sf "http://127.0.0.1:${ports[i]}/health"
  servers+="    server ${names[i]} 127.0.0.1:${ports[i]}"$'\n'
done

front_port="${front_port:-$(free_port)}"
stats_port="${stats_port:-$(free_port)}"
config="$(<"$here/haproxy.cfg.in")"
config="${config//@FRONT@/127.0.0.1:$front_port}"
config="${config//@STATS@/127.0.0.1:$stats_port}"
config="${config//@SERVERS@/${servers%$'\n'}}"
printf '%s\n' "$config" >"$dir/haproxy.cfg"
"$haproxy" -c -q -f "$dir/haproxy.cfg" || die "HAProxy refused $dir/haproxy.cfg"
spawn haproxy "$dir/logs/haproxy.log" "$haproxy" -db -f "$dir/haproxy.cfg"
lb=$((${#pids[@]} - 1))
all_up() {  # field 18 of the stats CSV is a server's status (no free text comes before it)
  [[ "$(curl -sf "http://127.0.0.1:$stats_port/;csv" |
        awk -F, '$1 == "prefixd_servers" && $2 != "BACKEND" && $18 == "UP"' | wc -l)" == "$n" ]]
}
wait_for "$lb" "HAProxy's health checks" all_up

{
  echo "fleet: $n servers of $(basename "$model") behind HAProxy on http://127.0.0.1:$front_port"
  for ((i = 1; i <= n; i++)); do
    echo "fleet:   ${names[i]}  http://127.0.0.1:${ports[i]}  pid ${pids[i]}  cache $dir/cache/${names[i]}"
  done
  echo "fleet:   redis  redis://127.0.0.1:$redis_port  pid ${pids[0]}"
  echo "fleet:   stats  http://127.0.0.1:$stats_port/  logs $dir/logs"
  if [[ -n "$kv_events" ]]; then echo "fleet:   KV events to $kv_events, pods $prefix-1..$prefix-$n"; fi
  echo "fleet: Ctrl-C stops everything"
} >&2
echo "http://127.0.0.1:$front_port"

# Until HAProxy exits (or a signal ends the script): report any other child that exits.
for (( ; ; )); do
  set +e
  wait -n -p done_pid
  status=$?
  set -e
  [[ -n "${done_pid:-}" ]] || { sleep 1; continue; }
  for ((i = 0; i < ${#pids[@]}; i++)); do
    if [[ "${pids[i]}" == "$done_pid" ]]; then
      if ((i == lb)); then echo "fleet: HAProxy exited ($status); stopping" >&2; exit 1; fi
      echo "fleet: ${names[i]} (pid $done_pid) exited ($status); HAProxy routes around it" >&2
    fi
  done
  done_pid=""
done
