#!/usr/bin/env python3
"""Draft model history bench: what caching the draft model's KV (DraftHistory) saves a session
that comes back after a restart, with --model-draft.

A qwen35 target and a llama draft of the same vocabulary (both generated, --shape). Per run:
  1. a server on a fresh cache dir answers a raw prompt of about --prompt-words words (8 tokens);
     it is stopped (its disk tier flushed);
  2. per round, two restarts on copies of that cache dir, one after the other:
       with:    the copy as it is (the target's and the draft's records);
       without: the copy with the draft's records removed (those of no domain the dir
                remembers: the target's domains are under <dir>/domains), as before the
                draft's history was cached;
     each answers the prompt plus a few hundred new words (16 tokens). Both restore the
     target's prefix from disk; only the first gets the draft's history from it.
Reported per round: the request's wall time, the draft model's decoded and restored history
tokens (/metrics), cached tokens and the generated text (equal in both: verification decides
every token).

Writes <out>/draft-history-<shape>.md and .json. Binds 127.0.0.1 only.

Usage: bench/draft_history.py [--bin build/bin/prefixd] [--shape tiny] [--prompt-words 12000]
       [--rounds 3] [--threads 2] [--out bench/results]
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router_swap import Server, free_port, long_text  # noqa: E402


def complete(server, prompt, max_tokens):
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True}).encode()
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=3600)
    start = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    seconds = time.perf_counter() - start
    if r.status != 200:
        raise RuntimeError(f"{server.name}: {r.status} {data[:300]!r}")
    out = json.loads(data)
    usage = out["usage"]
    return {"s": seconds, "prompt": usage["prompt_tokens"],
            "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            "text": out["choices"][0]["text"]}


def metric(server, name):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    c.request("GET", "/metrics")
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return 0


def strip_draft_records(cache_dir):
    """Removes the records of every domain the cache dir does not remember (the draft's)."""
    targets = set(os.listdir(os.path.join(cache_dir, "domains")))
    removed = 0
    for root, _, files in os.walk(os.path.join(cache_dir, "records")):
        for f in files:
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                head = fh.read(12 + 96)
            if len(head) < 108:
                continue
            if head[76:108].hex() not in targets:  # the domain: docs/disk-format.md
                os.remove(path)
                removed += 1
    # Without its index the disk tier rebuilds it from the files that are there.
    index = os.path.join(cache_dir, "index.log")
    if os.path.exists(index):
        os.remove(index)
    return removed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/prefixd")
    ap.add_argument("--shape", default="tiny")
    ap.add_argument("--prompt-words", type=int, default=12000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="prefixd-draft-history-")
    try:
        target = os.path.join(work, "target.gguf")
        draft = os.path.join(work, "draft.gguf")
        for arch, seed, path in (("qwen35", 1, target), ("llama", 2, draft)):
            subprocess.run([a.bin, "make-test-model", "--arch", arch, "--shape", a.shape,
                            "--seed", str(seed), "--out", path], check=True,
                           stdout=subprocess.DEVNULL)

        def serve(name, cache_dir):
            port = free_port()
            cmd = [a.bin, "serve", "-m", target, "--alias", "bench", "--host", "127.0.0.1",
                   "--port", str(port), "--threads", str(a.threads), "--slots", "1",
                   "--ctx", "65536", "--cache-dir", cache_dir, "--spec-type", "draft",
                   "--model-draft", draft]
            return Server(name, cmd, os.path.join(work, name + ".log"))

        prompt = long_text(a.prompt_words)
        follow = long_text(a.prompt_words + 300)  # the prompt, then ~300 new words
        base = os.path.join(work, "cache")
        s = serve("fill", base)
        try:
            fill = complete(s, prompt, 8)
        finally:
            s.stop()
        rows = []
        for rnd in range(a.rounds):
            row = {"round": rnd}
            for mode in ("with", "without"):
                d = os.path.join(work, f"cache-{mode}-{rnd}")
                shutil.copytree(base, d)
                if mode == "without":
                    row["removed_records"] = strip_draft_records(d)
                s = serve(f"{mode}-{rnd}", d)
                try:
                    r = complete(s, follow, 16)
                    r["draft_prefill"] = metric(s, "prefixd_draft_prefill_tokens_total")
                    r["draft_restored"] = metric(s, "prefixd_draft_restored_tokens_total")
                finally:
                    s.stop()
                shutil.rmtree(d, ignore_errors=True)
                row[mode] = r
            row["same_text"] = row["with"]["text"] == row["without"]["text"]
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items()}, default=str)[:400], flush=True)
        med_with = statistics.median(r["with"]["s"] for r in rows)
        med_without = statistics.median(r["without"]["s"] for r in rows)
        lines = [
            f"# Draft model history after a restart ({a.shape}: qwen35 target, llama draft)",
            "",
            f"`python3 bench/draft_history.py --shape {a.shape} --prompt-words {a.prompt_words} "
            f"--rounds {a.rounds}`; {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores. "
            f"Fill: {fill['prompt']} prompt tokens. Each round: the prompt plus ~300 words, "
            "16 tokens, on a restart whose disk tier holds the draft's history (with) and on one "
            "whose draft records were removed (without).",
            "",
            "| round | prompt | cached | with: s | draft decoded / restored | without: s | "
            "draft decoded / restored | same text |",
            "|---:|---:|---:|---:|---:|---:|---:|:---:|",
        ]
        for r in rows:
            w, o = r["with"], r["without"]
            lines.append(f"| {r['round']} | {w['prompt']} | {w['cached']} | {w['s']:.3f} | "
                         f"{w['draft_prefill']} / {w['draft_restored']} | {o['s']:.3f} | "
                         f"{o['draft_prefill']} / {o['draft_restored']} | {r['same_text']} |")
        lines += ["", f"Median request time: with {med_with:.3f} s, without {med_without:.3f} s "
                  f"(ratio {med_with / med_without:.3f})."]
        os.makedirs(a.out, exist_ok=True)
        md = os.path.join(a.out, f"draft-history-{a.shape}.md")
        with open(md, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(a.out, f"draft-history-{a.shape}.json"), "w") as f:
            json.dump({"fill": fill, "rows": rows}, f, indent=1)
        print("\n".join(lines))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
