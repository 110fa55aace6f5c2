#!/usr/bin/env python3
"""Does a slot that speculates slow the slot beside it? Two concurrent greedy chat completions
of 512 tokens (ignore_eos) against one server started with --spec-type and --slots 2: stream A
always with "speculative.n_max": 0 (no speculation), stream B with N; prints A's and B's own
decode tokens/s (timings.predicted_per_second) for each round. Compare a run with N = 0 (both
plain) with one with N = 64.

Usage: bench/spec_mixed.py PORT N [--rounds 3]
"""
import argparse
import json
import threading
import urllib.request

PROMPTS = ("apple banana cherry dog", "seven rivers under the old bridge")


def one(port, prompt, n_max, out, i):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 512,
            "temperature": 0, "ignore_eos": True, "speculative.n_max": n_max}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        out[i] = json.load(r)["timings"]["predicted_per_second"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("n_max", type=int)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for _ in range(a.rounds):
        out = [0.0, 0.0]
        threads = [threading.Thread(target=one, args=(a.port, PROMPTS[0], 0, out, 0)),
                   threading.Thread(target=one, args=(a.port, PROMPTS[1], a.n_max, out, 1))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"B n_max {a.n_max}: A (no speculation) {out[0]:.0f} tok/s, B {out[1]:.0f} tok/s")


if __name__ == "__main__":
    main()
