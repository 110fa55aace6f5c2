#!/usr/bin/env bash
# Checks the lock contracts (PREFIXD_GUARDED_BY, PREFIXD_REQUIRES, ... in util/thread_annotations.h)
# with clang's thread-safety analysis: clang++ -fsyntax-only over every translation unit of src/
# that includes util/mutex.h (directly or through a header of src/), with the flags the build
# used (BUILD_DIR/compile_commands.json, the compiler replaced by clang++). Any warning fails the
# check and is printed. test.sh runs it after the build, before the tests.
# Usage: scripts/check-thread-safety.sh [BUILD_DIR]   (PREFIXD_JOBS: parallel clang runs, 2)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(cd "${1:-build}" && pwd)"
if ! command -v clang++ >/dev/null 2>&1; then
  echo "check-thread-safety: clang++ not found (scripts/setup-deps.sh installs clang)" >&2
  exit 2
fi
[[ -f "$build_dir/compile_commands.json" ]] || {
  echo "check-thread-safety: no $build_dir/compile_commands.json (build first)" >&2
  exit 2
}
python3 - "$here" "$build_dir/compile_commands.json" "${PREFIXD_JOBS:-2}" <<'EOF'
import concurrent.futures, json, os, re, shlex, subprocess, sys

root, db_path, jobs = sys.argv[1], sys.argv[2], max(1, int(sys.argv[3]))
src = os.path.join(root, "src")
target = os.path.join(src, "util", "mutex.h")
# -Wthread-safety-beta adds the lock order (PREFIXD_ACQUIRED_BEFORE/AFTER).
CHECK = ["-Wthread-safety", "-Wthread-safety-beta", "-Werror=thread-safety"]
# GCC's options clang does not take. The build's own warnings are GCC's business; this check
# looks at locks only.
GCC_ONLY = re.compile(r"^(-W.*|-w|-fconcepts-diagnostics-depth=.*|-fno-gnu-unique|"
                      r"-fmax-include-depth=.*|-fipa-.*|-flto.*|-ffat-lto-objects)$")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
deps = {}
def reaches_mutex_h(path, seen=()):
    """Whether `path` includes util/mutex.h, directly or through headers of src/."""
    if path == target:
        return True
    if path in deps:
        return deps[path]
    if path in seen:
        return False
    found = False
    with open(path, errors="replace") as f:
        for inc in INCLUDE.findall(f.read()):
            for base in (os.path.dirname(path), src):
                cand = os.path.normpath(os.path.join(base, inc))
                if os.path.isfile(cand):
                    found = reaches_mutex_h(cand, seen + (path,))
                    break
            if found:
                break
    deps[path] = found
    return found

def clang_args(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out, skip = ["clang++"], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a == "-c" or a == entry["file"] or GCC_ONLY.match(a):
            pass
        else:
            out.append(a)
    return out + ["-fsyntax-only"] + CHECK + [entry["file"]]

units = []
for e in json.load(open(db_path)):
    f = os.path.normpath(os.path.join(e["directory"], e["file"]))
    if f.startswith(src + os.sep) and reaches_mutex_h(f):
        e["file"] = f
        units.append(e)
if not units:
    sys.exit("check-thread-safety: no translation unit of src/ includes util/mutex.h")

def check(entry):
    p = subprocess.run(clang_args(entry), cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], p.returncode, p.stderr

failed = 0
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    for f, rc, err in pool.map(check, sorted(units, key=lambda e: e["file"])):
        if rc != 0 or "warning:" in err:
            failed += 1
            print(err, end="" if err.endswith("\n") else "\n", file=sys.stderr, flush=True)
print(f"check-thread-safety: {len(units)} translation units, {failed} with findings",
      file=sys.stderr)
sys.exit(1 if failed else 0)
EOF
