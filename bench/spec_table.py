#!/usr/bin/env python3
"""The speculative-decoding table of bench/run-spec-bench.sh.

Reads the per-round results `run-<shape>-<label>-<round>.json` (each `prefixd bench --decode
--decode-reps 1`) of four servers: prefixd and llama-server, each with and without the same
--spec-type. For every stream count: the median over the rounds of the aggregate tokens/s, the
acceptance of each speculating server (drafted tokens taken / drafted, summed over every
stream of every round), and the ratios prefixd is held to: prefixd with speculation over
llama-server with it (>= 0.95) and over prefixd without it.

Usage: spec_table.py --runs DIR --spec-type T --model M --out spec.json --md spec.md
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

LABELS = ("prefixd", "prefixd-spec", "llama-server", "llama-server-spec")
FLOOR = 0.95
NAME = re.compile(r"run-(?P<shape>[a-z0-9]+)-(?P<label>[a-z-]+)-(?P<round>\d+)\.json$")


def collect(runs_dir):
    """{streams: {label: {"tps": [per round], "drafted": n, "accepted": n}}}, max_tokens."""
    table, tokens = {}, 0
    for path in sorted(glob.glob(os.path.join(runs_dir, "run-*.json"))):
        m = NAME.search(os.path.basename(path))
        if not m or m["label"] not in LABELS:
            continue
        with open(path) as f:
            run = json.load(f)
        tokens = run["max_tokens"]
        for result in run["results"]:
            cell = table.setdefault(result["streams"], {}).setdefault(
                m["label"], {"tps": [], "drafted": 0, "accepted": 0})
            cell["tps"].append(result["tokens_per_s"])
            for r in result["runs"]:
                for s in r["streams"]:
                    if s.get("draft_n", -1) >= 0:
                        cell["drafted"] += s["draft_n"]
                        cell["accepted"] += s["draft_n_accepted"]
    return table, tokens


def summarize(table, tokens):
    rows = []
    for n in sorted(table):
        cells = table[n]
        med = {label: statistics.median(c["tps"]) for label, c in cells.items()}
        row = {"streams": n, "max_tokens": tokens, "tokens_per_s": med,
               "rounds": len(cells.get("prefixd-spec", {}).get("tps", [])),
               "acceptance": {label: (c["accepted"] / c["drafted"] if c["drafted"] else None)
                              for label, c in cells.items() if label.endswith("-spec")}}
        if med.get("prefixd-spec") and med.get("llama-server-spec"):
            row["ratio_to_llama_server_spec"] = med["prefixd-spec"] / med["llama-server-spec"]
            row["meets"] = row["ratio_to_llama_server_spec"] >= FLOOR
        if med.get("prefixd-spec") and med.get("prefixd"):
            row["speedup"] = med["prefixd-spec"] / med["prefixd"]
        if med.get("llama-server-spec") and med.get("llama-server"):
            row["llama_server_speedup"] = med["llama-server-spec"] / med["llama-server"]
        rows.append(row)
    return rows


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def markdown(rows, spec_type, model):
    out = [f"# Speculative decoding ({spec_type}): prefixd vs llama-server, {model}", "",
           "Median over interleaved rounds of the aggregate tokens/s of N concurrent streams "
           "(`ignore_eos`, greedy; bench/decode.h); acceptance = drafted tokens taken / drafted. "
           f"The floor: prefixd with speculation >= {FLOOR}x llama-server with it.", "",
           "| streams | tokens | rounds | prefixd | prefixd spec | llama-server | llama-server spec "
           "| spec / llama-server spec | prefixd speedup | llama-server speedup "
           "| acceptance prefixd | acceptance llama-server |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t, a = r["tokens_per_s"], r["acceptance"]
        ratio = fmt(r.get("ratio_to_llama_server_spec"), ".3f")
        if "meets" in r and not r["meets"]:
            ratio += " (below)"
        out.append(f"| {r['streams']} | {r['max_tokens']} | {r['rounds']} | {fmt(t.get('prefixd'))} "
                   f"| {fmt(t.get('prefixd-spec'))} | {fmt(t.get('llama-server'))} "
                   f"| {fmt(t.get('llama-server-spec'))} | {ratio} | {fmt(r.get('speedup'), '.2f')}x "
                   f"| {fmt(r.get('llama_server_speedup'), '.2f')}x "
                   f"| {fmt(a.get('prefixd-spec'), '.3f')} | {fmt(a.get('llama-server-spec'), '.3f')} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--spec-type", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--md", required=True)
    a = ap.parse_args()
    table, tokens = collect(a.runs)
    if not table:
        print(f"spec_table: no run-*.json in {a.runs}", file=sys.stderr)
        return 1
    rows = summarize(table, tokens)
    with open(a.out, "w") as f:
        json.dump({"spec_type": a.spec_type, "model": a.model, "rows": rows}, f, indent=1)
    with open(a.md, "w") as f:
        f.write(markdown(rows, a.spec_type, a.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
