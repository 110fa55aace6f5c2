#!/usr/bin/env bash
# Sets up everything prefixd needs on a fresh machine, then builds it into build/ (or $BUILD_DIR).
# Usage: scripts/build.sh [--cuda | --vulkan] [extra cmake -D options]
#   PREFIXD_BACKENDS=cuda or vulkan: the same as the flag; PREFIXD_TARGET=prefixd: one target.
#   Build into a directory of its own for a GPU backend (BUILD_DIR=build-cuda): docs/backends.md.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

cuda=()
cmake_extra=()
case "${PREFIXD_BACKENDS:-cpu}" in
  cpu) ;;
  cuda) set -- --cuda "$@" ;;
  vulkan) set -- --vulkan "$@" ;;
  *) echo "build.sh: PREFIXD_BACKENDS must be cpu, cuda or vulkan" >&2; exit 2 ;;
esac
for arg in "$@"; do
  if [[ "$arg" == --cuda ]]; then cuda=(--cuda); cmake_extra+=(-DPREFIXD_CUDA=ON)
  elif [[ "$arg" == --vulkan ]]; then cuda=(--vulkan)
  else cmake_extra+=("$arg"); fi
done

bash scripts/setup-deps.sh
llama_build="$(bash scripts/setup-llama.sh "${cuda[@]}" | tail -n 1)"
build_dir="${BUILD_DIR:-build}"
generator=()
if command -v ninja >/dev/null 2>&1 && [[ ! -f "$build_dir/Makefile" ]]; then generator=(-G Ninja); fi
cmake -S . -B "$build_dir" "${generator[@]}" -DPREFIXD_LLAMA_BUILD="$llama_build" \
  "${cmake_extra[@]}" >/dev/null
targets=()
if [[ -n "${PREFIXD_TARGET:-}" ]]; then targets=(--target "$PREFIXD_TARGET"); fi
cmake --build "$build_dir" -j "${PREFIXD_JOBS:-2}" "${targets[@]}"
