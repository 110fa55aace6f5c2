#!/usr/bin/env python3
"""What the cache's work after a prefill costs the decode that follows it.

A chat of --messages short messages (one capture point each) is prefilled cold, then
--tokens tokens are streamed; the gaps between the streamed tokens are timed on the client.
After the first token prefixd publishes the prompt's Blocks and Snapshots (publish_ms, on the
slot's thread, before the second token) and the disk tier writes them behind the request (on
its own thread, the CPU the decode threads share): with a recurrent model's states of tens of
MB at every capture point, that is most of what the decode of the next tokens waits for.
The same chat runs against `prefixd serve` with the cache on and with --no-cache, each on a
fresh server, --rounds times alternating which goes first; the report is per run and the ratio
of the medians (decode ms, cache on / cache off).

Usage: bench/decode_after_prefill.py --model M.gguf [--prefixd build/bin/prefixd]
       [--messages 24] [--tokens 16] [--rounds 2] [--threads 2] [--extra "serve flags"]
Writes nothing; prints one line per run and the ratio. docs/bench.md ("Disk writes") explains.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat(n_messages):
    msgs = [{"role": "system", "content": "You are a helpful agent."}]
    for i in range(n_messages):
        text = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(40))
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{text} {i}"})
    if msgs[-1]["role"] == "assistant":
        msgs.append({"role": "user", "content": "go on"})
    return msgs


def wait_healthy(url, proc, limit_s=600):
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("server did not become healthy")


def run_once(args, cache_on, work):
    port = free_port()
    cache_dir = os.path.join(work, "cache")
    shutil.rmtree(cache_dir, ignore_errors=True)
    cmd = [args.prefixd, "serve", "-m", args.model, "--alias", "bench", "--port", str(port),
           "--slots", "1", "--ctx", str(args.ctx), "--threads", str(args.threads),
           "--cache-dir", cache_dir] + args.extra.split()
    if not cache_on:
        cmd.append("--no-cache")
    with open(os.path.join(work, "server.log"), "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        body = json.dumps({"model": "bench", "messages": chat(args.messages),
                           "max_tokens": args.tokens, "ignore_eos": True, "temperature": 0,
                           "stream": True, "stream_options": {"include_usage": True}}).encode()
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        times, timings = [], {}
        with urllib.request.urlopen(req, timeout=3600) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                d = json.loads(line[5:])
                if d.get("choices") and d["choices"][0].get("delta", {}).get("content"):
                    times.append(time.time())
                timings = d.get("timings", timings)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    gaps = [1000 * (b - a) for a, b in zip(times, times[1:])]
    return {"cache": "on" if cache_on else "off", "prompt_n": timings.get("prompt_n"),
            "captures": timings.get("captures", 0), "publish_ms": timings.get("publish_ms", 0),
            "decode_ms": timings.get("predicted_ms"), "gaps": gaps}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prefixd", default="build/bin/prefixd")
    ap.add_argument("--messages", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--extra", default="")
    args = ap.parse_args()
    decode = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="prefixd-decode-after-") as work:
        for rnd in range(args.rounds):
            for cache_on in ((True, False) if rnd % 2 == 0 else (False, True)):
                r = run_once(args, cache_on, work)
                decode[r["cache"]].append(r["decode_ms"])
                print(f"round {rnd} cache {r['cache']:3}: prompt {r['prompt_n']} tokens, "
                      f"{r['captures']} captures, publish {r['publish_ms']:.0f} ms, decode "
                      f"{r['decode_ms']:.0f} ms, gaps ms: "
                      + " ".join(f"{g:.0f}" for g in r["gaps"]), flush=True)
    on, off = statistics.median(decode["on"]), statistics.median(decode["off"])
    print(f"decode ms, median: cache on {on:.0f}, cache off {off:.0f}; on / off {on / off:.3f}")


if __name__ == "__main__":
    main()
