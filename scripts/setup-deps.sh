#!/usr/bin/env bash
# Installs the Debian packages prefixd needs (only those missing), with apt-get.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  libssl-dev            # libcrypto: SHA-256 (chain hashes, fingerprints), HMAC-SHA256 (tenant
                        # salts), CRYPTO_memcmp (API key checks)
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev    # JSON for the HTTP server
  nodejs npm            # fetching llama.cpp's source package; end-to-end tests with `openai`
  curl
  libhiredis-dev        # client of the shared cache tier (Redis, --remote-cache)
  redis-server          # the shared tier's tests start one on a loopback port
  python3               # bench scripts (bench/load_test.py, the bench smoke tests)
  chromium              # the web page's browser test (tests/e2e/web_page.test.js, headless)
  clang                 # clang++ -Wthread-safety checks the lock contracts (check-thread-safety.sh)
  libzmq3-dev           # ZMQ PUB socket of the KV-event stream (serve --kv-events)
  python3-zmq python3-msgpack  # the KV-event stream's test subscriber (tests/e2e/kv_subscriber.py)
  haproxy               # the load balancer of deploy/fleet.sh and tests/e2e/fleet.test.js
)

missing=()
for p in "${PACKAGES[@]}"; do
  if [[ "$p" == npm ]] && command -v npm >/dev/null 2>&1; then continue; fi
  if [[ "$p" == nodejs ]] && command -v node >/dev/null 2>&1; then continue; fi
  if [[ "$p" == clang ]] && command -v clang++ >/dev/null 2>&1; then continue; fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "setup-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ "$(id -u)" != 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq >&2 || true
"${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >&2

# Debian's haproxy package enables and starts a system service (haproxy.service, or the SysV
# script where systemd is not PID 1) on /etc/haproxy/haproxy.cfg. prefixd runs its own HAProxy
# per fleet (deploy/fleet.sh) on its own config and ports, so a freshly installed system one is
# stopped and disabled: nothing is left running or listening that the user did not start. An
# haproxy that was already installed is the user's and is left alone.
disable_system_haproxy() {
  if command -v systemctl >/dev/null 2>&1; then
    # Works offline too (a container without systemd as PID 1): removes the unit's enable link.
    local now=()
    if [[ -d /run/systemd/system ]]; then now=(--now); fi
    "${sudo_cmd[@]}" systemctl disable "${now[@]}" haproxy.service >/dev/null 2>&1 || true
  fi
  if [[ ! -d /run/systemd/system ]]; then
    "${sudo_cmd[@]}" service haproxy stop >/dev/null 2>&1 || true
    "${sudo_cmd[@]}" update-rc.d haproxy disable >/dev/null 2>&1 || true
  fi
}
for p in "${missing[@]}"; do
  if [[ "$p" == haproxy ]]; then disable_system_haproxy; fi
done
