#!/usr/bin/env bash
# Two prefixd servers on one Redis behind HAProxy (deploy/fleet.sh -n 2), each publishing its KV
# events (docs/kv-events.md) to one subscriber that keeps llm-d's index of them
# (deploy/kv_events_demo.py, deploy/llmd_index.py). It runs a few agent sessions through
# HAProxy and prints, for every turn, which server HAProxy routed it to and what that server
# restored, beside how much of the prompt llm-d's index says each server holds — then stops
# everything. docs/deployment.md, "Behind llm-d", and docs/kv-events.md explain the stream.
#
#   deploy/kv-events-demo.sh -m MODEL.gguf [--sessions 4] [--turns 3] [--dir DIR] [-- SERVE FLAGS...]
#
#   -m, --model FILE   the GGUF model both servers serve (required)
#   --sessions N       agent sessions, each with its own x-session-id (default 4)
#   --turns N          turns of each session, interleaved (default 3)
#   --dir DIR          fleet.sh's --dir: caches, logs and configs, kept (default: a temp dir)
#   -- FLAGS...        more `prefixd serve` flags for both servers (e.g. -- --block-size 64, so
#                      that short prompts make whole Blocks)
#
# Environment: as deploy/fleet.sh (PREFIXD_BIN, HAPROXY_BIN); PYTHON, a python3 with zmq and
# msgpack (default: python3 on PATH, else /usr/bin/python3 with Debian's python3-zmq and
# python3-msgpack, which scripts/setup-deps.sh installs).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
model="" sessions=4 turns=3 dir="" serve_args=()
die() { echo "kv-events-demo: $*" >&2; exit 2; }
while (($#)); do
  case "$1" in
    -m|--model) model="${2:?}"; shift 2 ;;
    --sessions) sessions="${2:?}"; shift 2 ;;
    --turns) turns="${2:?}"; shift 2 ;;
    --dir) dir="${2:?}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; serve_args=("$@"); break ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ -n "$model" ]] || die "-m MODEL is required (see --help)"
[[ "$sessions" =~ ^[1-9][0-9]*$ && "$turns" =~ ^[1-9][0-9]*$ ]] || die "--sessions and --turns take counts"
# The first Python that has zmq and msgpack: $PYTHON, python3 on PATH, Debian's own.
python=""
for p in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [[ -n "$p" ]] && "$p" -c 'import zmq, msgpack' 2>/dev/null; then python="$p"; break; fi
done
[[ -n "$python" ]] || die "no python3 with zmq and msgpack: run scripts/setup-deps.sh"

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
endpoint="tcp://127.0.0.1:$port"
front_file="$(mktemp "${TMPDIR:-/tmp}/prefixd-kv-demo.XXXXXX")"
fleet_pid=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$fleet_pid" ]]; then
    kill -TERM "$fleet_pid" 2>/dev/null || true
    wait "$fleet_pid" 2>/dev/null || true
  fi
  rm -f "$front_file"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The servers connect to the subscriber; it binds once the fleet is up (a SUB socket that
# joins late is sent what the servers hold: docs/kv-events.md, "Joining late, restarts").
"$here/fleet.sh" -m "$model" -n 2 --name fleet --kv-events "$endpoint" ${dir:+--dir "$dir"} \
  -- "${serve_args[@]}" >"$front_file" &
fleet_pid=$!
until [[ -s "$front_file" ]]; do
  kill -0 "$fleet_pid" 2>/dev/null || die "the fleet did not start (its messages are above)"
  sleep 0.2
done
front="$(head -1 "$front_file")"
echo "kv-events-demo: subscriber on $endpoint, sessions through $front" >&2
"$python" "$here/kv_events_demo.py" --endpoint "$endpoint" --front "$front" \
  --pods fleet-1,fleet-2 --sessions "$sessions" --turns "$turns"
