# Shared by the bench scripts that run servers side by side (bench/run-decode.sh,
# bench/run-spec-bench.sh): sourced, not run. Needs NICE set; defines log, free_port, start
# (a server in the background, reniced with the bench), stop_servers (on EXIT) and wait_healthy.
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

pids=()
stop_servers() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_servers EXIT

# start LOG CMD...: starts one server in the background (reniced with the bench).
start() {
  local log_file="$1"; shift
  nice -n "$NICE" "$@" >"$log_file" 2>&1 &
  pids+=("$!")
}

# wait_healthy PORT: until GET /health answers 200 (at most 300 s).
wait_healthy() {
  for ((t = 0; t < 600; t++)); do
    curl -sf -o /dev/null "http://127.0.0.1:$1/health" && return 0
    sleep 0.5
  done
  echo "server on port $1 not healthy after 300 s" >&2; return 1
}
