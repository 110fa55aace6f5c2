#!/usr/bin/env bash
# Fetches the pinned llama.cpp (from the npm package node-llama-cpp@3.22.1, which ships the
# source as a git bundle), verifies the commit and builds llama, ggml and llama-common, and the
# pinned test-model generator bin/test-llama-archs (the architecture sweep and the engine tests
# use it; it links the same libraries, so it costs one extra compile), with ggml's RPC backend and
# its server bin/ggml-rpc-server (docs/backends.md).
# Applies and verifies the small patches in patches/llama.cpp/ (docs/llama-patches.md says why
# each exists). The build is cached by commit, backend and patch set under $PREFIXD_DEPS_DIR, so
# a second run is instant; a changed patch set rebuilds incrementally.
# Prints nothing on a cache hit except the build directory on the last line.
# Usage: scripts/setup-llama.sh [--cuda | --vulkan]   (each in a build directory of its own)
# --vulkan needs libvulkan-dev, glslc and spirv-headers, and a glslc that knows
# GL_KHR_cooperative_matrix: Debian 12's (2023.2) does not, and the pinned shaders fail to
# compile with it (docs/backends.md).
# PREFIXD_GGML_CPU=avx2 builds ggml's CPU backend for AVX2 + FMA + F16C only (no AVX-512), in
# its own build directory, whatever this CPU has: the kernel path of an AVX2-only machine, to
# test the exactness claims there from an AVX-512 one (docs/architecture.md, "Exactness on each
# CPU"). Unset: a native build (-march=native), as llama.cpp builds by default.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PATCH_DIR="$here/patches/llama.cpp"

LLAMA_NPM_PACKAGE="node-llama-cpp@3.22.1"
LLAMA_COMMIT="de3ff815ea7d559ee917f063901b8986f038abc6"
DEPS_DIR="${PREFIXD_DEPS_DIR:-$HOME/.cache/prefixd}"
JOBS="${PREFIXD_JOBS:-2}"

backend="cpu"
cmake_backend=(-DGGML_CUDA=OFF)
if [[ "${1:-}" == "--cuda" ]]; then
  backend="cuda"
  cmake_backend=(-DGGML_CUDA=ON)
elif [[ "${1:-}" == "--vulkan" ]]; then
  backend="vulkan"
  cmake_backend=(-DGGML_CUDA=OFF -DGGML_VULKAN=ON)
fi
if [[ "$(uname)" == "Darwin" ]]; then
  cmake_backend+=(-DGGML_METAL=ON)
fi
case "${PREFIXD_GGML_CPU:-native}" in
  native) ;;
  avx2)
    backend="$backend-avx2"
    cmake_backend+=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
      -DGGML_BMI2=ON -DGGML_AVX512=OFF)
    ;;
  *) echo "setup-llama: PREFIXD_GGML_CPU must be native or avx2" >&2; exit 1 ;;
esac

root="$DEPS_DIR/llama.cpp-${LLAMA_COMMIT:0:7}"
src="$root/src"
build="$root/build-$backend"
stamp="$build/.prefixd-built"

# The stamp holds the patch set; a build is complete when the stamp matches and every product
# exists, so a cached build made before test-llama-archs was a target (same stamp) gets it.
patches=("$PATCH_DIR"/*.patch)
patch_id="$(cat "${patches[@]}" | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$patch_id" && -x "$build/bin/test-llama-archs" && -x "$build/bin/test-jinja" &&
      -x "$build/bin/ggml-rpc-server" && -f "$build/bin/libmtmd.so" ]]; then
  echo "$build"
  exit 0
fi

mkdir -p "$root"
if [[ ! -d "$src/.git" ]]; then
  tmp="$(mktemp -d "$root/fetch.XXXXXX")"
  echo "setup-llama: fetching $LLAMA_NPM_PACKAGE" >&2
  (cd "$tmp" && npm pack --silent "$LLAMA_NPM_PACKAGE" >/dev/null)
  tar -xzf "$tmp"/node-llama-cpp-*.tgz -C "$tmp" package/llama/gitRelease.bundle
  git clone --quiet "$tmp/package/llama/gitRelease.bundle" "$tmp/src" 2>/dev/null
  (cd "$tmp/src" && git -c advice.detachedHead=false checkout --quiet "$LLAMA_COMMIT")
  rm -rf "$src"
  mv "$tmp/src" "$src"
  rm -rf "$tmp"
fi

actual="$(git -C "$src" rev-parse HEAD)"
if [[ "$actual" != "$LLAMA_COMMIT" ]]; then
  echo "setup-llama: llama.cpp is at $actual, expected $LLAMA_COMMIT; refusing to build" >&2
  exit 1
fi

# The patches: applied in order to the pinned tree, then verified: the tree must equal the
# pinned commit with every patch applied in order (patched_index builds that in a scratch
# index; later patches may change lines earlier ones made), and the patched API must be in the
# headers. A tree that carries exactly the first k patches gets the rest applied on top, so an
# added patch rebuilds only what it touches, and an interrupted build resumes instead of
# recompiling; any other tree is reset to the commit and patched from scratch.
scratch_index="$(mktemp "${TMPDIR:-/tmp}/prefixd-llama-index.XXXXXX")"
trap 'rm -f "$scratch_index"' EXIT
# Writes the pinned commit with patches [0, k) applied into the scratch index.
patched_index() {
  local k="$1" i
  GIT_INDEX_FILE="$scratch_index" git -C "$src" read-tree HEAD
  for ((i = 0; i < k; i++)); do
    GIT_INDEX_FILE="$scratch_index" git -C "$src" apply --cached "${patches[$i]}" || return 1
  done
}
# Whether the work tree is the pinned commit with patches [0, k) applied.
tree_has_first() {
  patched_index "$1" 2>/dev/null && GIT_INDEX_FILE="$scratch_index" git -C "$src" diff --quiet
}
n_patches=${#patches[@]}
if ! tree_has_first "$n_patches"; then
  have=-1
  for ((k = n_patches - 1; k >= 0; k--)); do
    if tree_has_first "$k"; then have=$k; break; fi
  done
  if ((have < 0)); then
    git -C "$src" checkout --quiet -- .
    have=0
  fi
  for ((i = have; i < n_patches; i++)); do
    echo "setup-llama: applying $(basename "${patches[$i]}")" >&2
    git -C "$src" apply "${patches[$i]}"
  done
fi
if ! tree_has_first "$n_patches" || ! grep -q llama_state_seq_get_data_range "$src/include/llama.h" ||
   ! grep -q common_chat_templates_apply_prompt_only "$src/common/chat.h" ||
   ! grep -q common_chat_render_memo_share "$src/common/chat.h" ||
   ! grep -q llama_kv_layout_apply_scope "$src/src/llama-kv-layout.h" ||
   ! grep -q common_speculative_set_mtp_carry "$src/common/speculative.h" ||
   ! grep -q "prefixd patch: only the tile's rows" "$src/ggml/src/ggml-cpu/ops.cpp" ||
   ! grep -q "prefixd patch: tiled from two query rows" "$src/ggml/src/ggml-cpu/ops.cpp" ||
   ! grep -q ggml_backend_rpc_server_lost "$src/ggml/src/ggml-rpc/ggml-rpc.cpp" ||
   ! grep -q llama_rs_capture_set "$src/include/llama.h" ||
   ! grep -q "prefixd patch: the conv state after the first" "$src/src/models/lfm2.cpp" ||
   ! grep -q "prefixd patch: with capture offsets" "$src/src/models/mamba-base.cpp" ||
   ! grep -q "prefixd patch: a hybrid's sliding-window cache" "$src/src/llama-context.cpp" ||
   ! grep -q "prefixd patch: the history after the first" "$src/src/models/qwen4exp.cpp" ||
   ! grep -q "prefixd patch: the archs whose capture rows follow the rollback groups" "$src/src/llama-context.cpp" ||
   ! grep -q "prefixd patch: split at the capture offsets, as the other delta-net models" "$src/src/models/kimi-linear.cpp" ||
   ! grep -q "prefixd patch: the scan split at the capture offsets, as the Mamba-2" "$src/src/models/plamo2.cpp" ||
   ! grep -q "prefixd patch: every format tolerates it" "$src/common/chat-auto-parser-generator.cpp" ||
   ! grep -q gemma4_schema_gbnf "$src/common/parsers/gemma4.cpp" ||
   ! grep -q "prefixd patch: the work buffer starts on a cache line" "$src/ggml/src/ggml-cpu/ggml-cpu.cpp" ||
   ! grep -q "prefixd patch: a raw text value held to its schema" "$src/common/peg-parser.cpp" ||
   ! grep -q "prefixd patch: cell positions kept apart from rope positions" "$src/include/llama.h" ||
   ! grep -q common_chat_set_analysis_memo "$src/common/chat.h" ||
   ! grep -q common_chat_output_memo_made "$src/common/chat.h"; then
  echo "setup-llama: the patches in $PATCH_DIR do not apply to llama.cpp $LLAMA_COMMIT" >&2
  exit 1
fi

echo "setup-llama: building llama.cpp ${LLAMA_COMMIT:0:7} ($backend) in $build" >&2
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON \
  -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_COMMON=ON \
  -DLLAMA_OPENSSL=OFF -DLLAMA_SUBPROCESS=OFF -DLLAMA_LLGUIDANCE=OFF \
  -DGGML_RPC=ON "${cmake_backend[@]}" >&2
# The tools are configured for ggml-rpc-server (the RPC backend's server: tensors in another
# process, the off-host path the tests take without a GPU) and libmtmd (the image encoder that
# `serve --mmproj` runs, as llama-server does); no other tool is built.
cmake --build "$build" -j "$JOBS" --target llama llama-common ggml test-llama-archs test-jinja \
  ggml-rpc-server mtmd >&2
# Patches 0002 and 0004 change how the Jinja engine runs, never what it renders: llama.cpp's
# own Jinja tests must pass on the patched tree.
if ! "$build/bin/test-jinja" >"$build/test-jinja.log" 2>&1; then
  echo "setup-llama: llama.cpp's test-jinja fails on the patched tree (see $build/test-jinja.log)" >&2
  exit 1
fi
echo "$patch_id" > "$stamp"
echo "$build"
