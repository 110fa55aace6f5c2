#!/usr/bin/env python3
"""The table of bench/run-binary-ab.sh: two prefixd request logs, request by request.

Usage: binary_ab_table.py A.log B.log [--title T]
Reads each completion's line of `prefixd serve`'s request log (docs/http-api.md, "Request log")
and prints, per request and summed, prompt tokens, captures, capture_ms, publish_ms, queue_ms and
restore_ms of both servers. The first line of each log is the bench's warm-up request: left out.
"""
import argparse
import re
import sys

FIELDS = ("prompt_tokens", "evaluated", "captures", "capture_ms", "publish_ms", "queue_ms",
          "restore_ms")


def requests(path):
    """The completions of one request log, each a dict of FIELDS (floats)."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if " prompt_tokens=" not in line or " publish_ms=" not in line:
                continue
            row = {}
            for name in FIELDS:
                m = re.search(r"\b" + name + r"=([0-9.]+)", line)
                row[name] = float(m.group(1)) if m else 0.0
            out.append(row)
    return out[1:]  # the warm-up


def table(a, b, title):
    lines = [f"# {title}", "",
             "| # | prompt | evaluated | captures | capture_ms A | capture_ms B | publish_ms A "
             "| publish_ms B | queue_ms A | queue_ms B | restore_ms A | restore_ms B |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    sums = {k: [0.0, 0.0] for k in ("capture_ms", "publish_ms", "queue_ms", "restore_ms")}
    for i, (ra, rb) in enumerate(zip(a, b), 1):
        cells = [str(i), f"{ra['prompt_tokens']:.0f}", f"{ra['evaluated']:.0f}",
                 f"{ra['captures']:.0f}"]
        for k in sums:
            sums[k][0] += ra[k]
            sums[k][1] += rb[k]
            cells += [f"{ra[k]:.1f}", f"{rb[k]:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    total = ["sum", "", "", ""]
    for k in sums:
        total += [f"**{sums[k][0]:.0f}**", f"**{sums[k][1]:.0f}**"]
    lines.append("| " + " | ".join(total) + " |")
    if len(a) != len(b):
        lines += ["", f"The logs differ in length: A {len(a)} requests, B {len(b)}."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--title", default="prefixd A against prefixd B")
    args = ap.parse_args()
    a, b = requests(args.a), requests(args.b)
    if not a or not b:
        sys.exit("binary_ab_table.py: no completions in " + (args.a if not a else args.b))
    sys.stdout.write(table(a, b, args.title))


if __name__ == "__main__":
    main()
