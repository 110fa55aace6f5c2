#!/usr/bin/env bash
# The README's run command: sets up and builds if needed, generates the demo model on first use,
# then starts prefixd on it with the default cache directory. Extra flags go to prefixd.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
PREFIXD_TARGET=prefixd bash scripts/build.sh >&2
build_dir="${BUILD_DIR:-build}"
data_dir="${PREFIXD_HOME:-$HOME/.cache/prefixd}"
demo="$data_dir/models/demo-qwen35-tiny.gguf"
if [[ ! -f "$demo" ]]; then
  mkdir -p "$(dirname "$demo")"
  "$build_dir/bin/prefixd" make-test-model --arch qwen35 --shape tiny --seed 1 --out "$demo.tmp"
  mv "$demo.tmp" "$demo"
fi
if "$build_dir/bin/prefixd" serve --help >/dev/null 2>&1; then
  exec "$build_dir/bin/prefixd" serve -m "$demo" --cache-dir "$data_dir/cache" "$@"
fi
exec "$build_dir/bin/prefixd" run -m "$demo" -p "${PREFIXD_DEMO_PROMPT:-<|im_start|>user
Hello!<|im_end|>
<|im_start|>assistant
}" "$@"
