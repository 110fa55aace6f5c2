#!/usr/bin/env python3
"""Compares the streamed answers of two `prefixd bench --out` runs of the same trace, request by
request: prefixd with the cache on against prefixd --no-cache (greedy, temperature 0), the
"output = cache off" column of bench/run-vs-llama-server.sh's report.

Usage: output_check.py ON.json OFF.json [--out CHECK.json]
Prints one line and writes {"requests", "equal", "differ": [index...], "missing": [index...]}.
Exits 3 when an answer differs or is missing (as prefixd_engine_bench does on a mismatch).
"""
import argparse
import json
import sys


def answers(path):
    rows = json.load(open(path))["requests"]
    return {r["index"]: r.get("output") for r in rows}


def compare(on, off):
    differ, missing, equal = [], [], 0
    for i in sorted(set(on) | set(off)):
        a, b = on.get(i), off.get(i)
        if a is None or b is None:
            missing.append(i)
        elif a == b:
            equal += 1
        else:
            differ.append(i)
    return {"requests": len(set(on) | set(off)), "equal": equal, "differ": differ,
            "missing": missing}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("on")
    ap.add_argument("off")
    ap.add_argument("--out")
    a = ap.parse_args()
    check = compare(answers(a.on), answers(a.off))
    if a.out:
        json.dump(check, open(a.out, "w"), indent=1)
    print(f"output = cache off: {check['equal']} of {check['requests']} answers equal"
          + (f"; differ at {check['differ']}" if check["differ"] else "")
          + (f"; missing at {check['missing']}" if check["missing"] else ""))
    return 0 if not check["differ"] and not check["missing"] else 3


if __name__ == "__main__":
    sys.exit(main())
