#!/usr/bin/env bash
# The architecture sweep (docs/architectures.md): every model the pinned llama.cpp's
# test-llama-archs generates, served by `prefixd serve` with and without the cache; fails on a
# crash, an output mismatch not allowed in bench/arch_sweep.py, or an unexpected refusal.
# Usage: scripts/arch-sweep.sh [--sample] [--doc] [--arch NAME]... [--json FILE] [--timeout S]
#   (no mode: all 127 models, 2 minutes on 2 idle cores, 20 on busy ones; --sample: 8 architectures, the CTest one;
#    --doc: rewrite the generated table in docs/architectures.md)
# Env: PREFIXD_BIN (default build/bin/prefixd), PREFIXD_TEST_LLAMA_ARCHS (default: from the
# build's PREFIXD_LLAMA_BUILD, i.e. scripts/setup-llama.sh's build directory).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$here/build}"
bin="${PREFIXD_BIN:-$build_dir/bin/prefixd}"
gen="${PREFIXD_TEST_LLAMA_ARCHS:-}"
if [[ -z "$gen" && -f "$build_dir/CMakeCache.txt" ]]; then
  llama_build="$(sed -n 's/^PREFIXD_LLAMA_BUILD:[A-Z]*=//p' "$build_dir/CMakeCache.txt")"
  gen="$llama_build/bin/test-llama-archs"
fi
if [[ ! -x "$bin" ]]; then echo "arch-sweep: no prefixd at $bin (scripts/build.sh)" >&2; exit 2; fi
if [[ ! -x "$gen" ]]; then
  echo "arch-sweep: no test-llama-archs at '${gen}' (scripts/setup-llama.sh builds it)" >&2
  exit 2
fi
args=()
for arg in "$@"; do
  if [[ "$arg" == --doc ]]; then args+=(--doc "$here/docs/architectures.md"); else args+=("$arg"); fi
done
exec python3 "$here/bench/arch_sweep.py" --prefixd "$bin" --generator "$gen" "${args[@]}"
