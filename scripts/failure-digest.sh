#!/usr/bin/env bash
# Prints, for each test that failed in the last ctest run, the lines that say why: TAP `not ok`
# blocks (node --test) and GoogleTest failures, with a few lines after each. test.sh prints it
# last, so a log that keeps only its head and tail still shows why a run failed.
# Usage: scripts/failure-digest.sh [BUILD_DIR]
set -euo pipefail
log="${1:-build}/Testing/Temporary/LastTest.log"
[[ -f "$log" ]] || { echo "failure digest: no $log"; exit 0; }
awk '
  /^[0-9]+\/[0-9]+ Testing: / { name = $3; n = 0; delete buf; next }
  /^Test Passed\./ { n = 0; delete buf; next }
  /^Test Failed\./ || /^Test Timeout/ || /^Exception/ {
    print "==== failed: " name " ====";
    shown = 0; after = 0;
    for (i = 1; i <= n && shown < 150; i++) {
      if (buf[i] ~ /not ok |Failure$|Failure:|FAILED|error:|Error:|AssertionError|timed out|Timeout/) after = 24;
      if (after > 0) { print buf[i]; shown++; after--; }
    }
    if (shown == 0) for (i = (n > 40 ? n - 40 : 1); i <= n; i++) print buf[i];
    n = 0; delete buf; next
  }
  { buf[++n] = $0 }
' "$log"
