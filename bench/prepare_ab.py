#!/usr/bin/env python3
"""Two builds of prefixd_prepare_bench side by side: each case run by both binaries in turn,
the order alternating round by round, so that a noisy machine weighs on both alike. Prints the
medians per case and binary of the bench's total, render, tokenize and points columns over
the requests after the first two (the first renders every prefix).

Usage: bench/prepare_ab.py --before OLD_BIN --after NEW_BIN [--rounds 4] [--gemma3 MODEL.gguf]
  qwen35-16k: the generated qwen35 model, a conversation to 16K tokens;
  gemma3-tiny-6k (with --gemma3): that model, 2K system tokens, 300-token tool results, to 6K.
"""
import argparse
import statistics
import subprocess

COLUMNS = {"total": 4, "render": 6, "tokenize": 7, "points": 8}


def run(binary, args):
    out = subprocess.run([binary] + args, capture_output=True, text=True, timeout=900).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) > 10 and f[0].isdigit() and int(f[0]) >= 2:
            rows.append({k: float(f[i]) for k, i in COLUMNS.items()})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--gemma3", help="a gemma3 GGUF (make-test-model --arch gemma3 --shape tiny)")
    a = ap.parse_args()
    cases = {"qwen35-16k": ["--max-prompt-tokens", "16000"]}
    if a.gemma3:
        cases["gemma3-tiny-6k"] = ["--model", a.gemma3, "--max-prompt-tokens", "6000",
                                   "--system-tokens", "2000", "--tool-tokens", "300"]
    bins = {"before": a.before, "after": a.after}
    rows = {}
    for r in range(a.rounds):
        for case, args in cases.items():
            for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                rows.setdefault((case, name), []).extend(run(bins[name], args))
    for (case, name), rs in sorted(rows.items()):
        med = {k: statistics.median(x[k] for x in rs) for k in COLUMNS}
        print(f"{case:16s} {name:6s} n={len(rs):3d} " +
              " ".join(f"{k} {v:6.1f}" for k, v in med.items()))


if __name__ == "__main__":
    main()
