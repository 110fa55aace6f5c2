#!/usr/bin/env python3
"""The decode table of bench/run-decode.sh.

Reads the per-round results `run-<shape>-<label>-<round>.json` (each the output of
`prefixd bench --decode --decode-reps 1`), takes for every shape, server and stream count the
median over the rounds of the aggregate tokens/s, and the ratios of prefixd (cache on) to
prefixd --no-cache and to llama-server, with the floors prefixd is held to (>= 0.97: the cache
costs decode at most 3%; >= 0.95: within 5% of llama-server).

Usage: decode_table.py --runs DIR --out decode.json --md decode.md
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

LABELS = ("prefixd", "prefixd-no-cache", "llama-server")
THRESHOLDS = {"prefixd-no-cache": 0.97, "llama-server": 0.95}
NAME = re.compile(r"run-(?P<shape>[a-z0-9]+)-(?P<label>[a-z-]+)-(?P<round>\d+)\.json$")


def collect(runs_dir):
    """{shape: {label: {streams: [tokens/s per round]}}} and the max_tokens per shape."""
    table, tokens = {}, {}
    for path in sorted(glob.glob(os.path.join(runs_dir, "run-*.json"))):
        m = NAME.search(os.path.basename(path))
        if not m or m["label"] not in LABELS:
            continue
        with open(path) as f:
            run = json.load(f)
        tokens[m["shape"]] = run["max_tokens"]
        per_label = table.setdefault(m["shape"], {}).setdefault(m["label"], {})
        for result in run["results"]:
            per_label.setdefault(result["streams"], []).append(result["tokens_per_s"])
    return table, tokens


def summarize(table, tokens):
    rows = []
    for shape, per_label in table.items():
        streams = sorted({s for by_streams in per_label.values() for s in by_streams})
        for n in streams:
            med = {label: statistics.median(per_label[label][n])
                   for label in LABELS if n in per_label.get(label, {})}
            row = {"shape": shape, "streams": n, "max_tokens": tokens[shape],
                   "rounds": len(per_label.get("prefixd", {}).get(n, [])),
                   "tokens_per_s": med,
                   "all_rounds": {label: per_label[label][n] for label in med}}
            if "prefixd" in med:
                for other, floor in THRESHOLDS.items():
                    if other in med and med[other] > 0:
                        ratio = med["prefixd"] / med[other]
                        row[f"ratio_to_{other}"] = ratio
                        row[f"meets_{other}"] = ratio >= floor
            rows.append(row)
    return rows


def markdown(rows):
    out = ["# Decode throughput: prefixd (cache on) vs --no-cache vs llama-server", "",
           "Median over interleaved rounds of the aggregate tokens/s of N concurrent streams "
           "(`ignore_eos`, greedy; bench/decode.h). The floors: cache on >= 0.97x --no-cache "
           "and >= 0.95x llama-server.", "",
           "| model | streams | tokens/stream | rounds | prefixd | --no-cache | llama-server "
           "| on / off | on / llama-server |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t = r["tokens_per_s"]

        def cell(label):
            return f"{t[label]:.1f}" if label in t else "-"

        def ratio(other):
            key = f"ratio_to_{other}"
            if key not in r:
                return "-"
            return f"{r[key]:.3f}" + ("" if r[f"meets_{other}"] else " (below)")
        out.append(f"| qwen35 {r['shape']} | {r['streams']} | {r['max_tokens']} | {r['rounds']} "
                   f"| {cell('prefixd')} | {cell('prefixd-no-cache')} | {cell('llama-server')} "
                   f"| {ratio('prefixd-no-cache')} | {ratio('llama-server')} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--md", required=True)
    a = ap.parse_args()
    table, tokens = collect(a.runs)
    if not table:
        print(f"decode_table: no run-*.json in {a.runs}", file=sys.stderr)
        return 1
    rows = summarize(table, tokens)
    with open(a.out, "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    with open(a.md, "w") as f:
        f.write(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
