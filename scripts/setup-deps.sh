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
