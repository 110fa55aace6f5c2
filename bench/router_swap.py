#!/usr/bin/env python3
"""Model swap bench: a model's first request after a swap, on prefixd's router and on
llama-server's router (built from the same pinned source), against a cold prefill.

Both routers serve the same two generated models (default: qwen35 and llama of --shape) with
room for one (--models-max 1), the same threads, context, batch and ubatch. Per router:
  1. model A gets a chat of about --prompt-tokens tokens (a cold prefill; the router loads A);
  2. per round: model B gets a short request (A is unloaded to make room), then A gets the
     chat so far plus a new user turn: the swapped-in model's first request, whose time is the
     load, the restore (prefixd: from its disk tier) and the new tokens' prefill.
The cold reference is the same requests on `prefixd serve -m A --no-cache`, loaded already: a
whole prefill, no load. The load time is prefixd's router's own (`model_loaded load_ms`).
Times are whole responses with max_tokens 1 (time to first token plus one decode step).

Writes <out>/router-swap-<shape>.md and .json. Binds 127.0.0.1 only.

Usage: bench/router_swap.py [--bin build/bin/prefixd] [--llama-server PATH] [--shape tiny]
       [--prompt-tokens 16000] [--rounds 3] [--threads 2] [--out bench/results]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

WORDS = ("alpha beta gamma delta parse token cache layer model state block prefix suffix read "
         "write file path line column error value result index table query server client "
         "thread slot queue batch stream").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def long_text(n_words):
    # Numbered words: a tokenizer cannot fold the text into a few repeated tokens.
    return " ".join(f"{WORDS[i % len(WORDS)]}{i % 97}" for i in range(n_words))


class Server:
    def __init__(self, name, cmd, log_path):
        self.name = name
        self.port = int(cmd[cmd.index("--port") + 1])
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not start; see {log_path}")

    def ask(self, model, messages):
        body = json.dumps({"model": model, "messages": messages, "max_tokens": 1,
                           "temperature": 0}).encode()
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        start = time.perf_counter()
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        seconds = time.perf_counter() - start
        if r.status != 200:
            raise RuntimeError(f"{self.name}: {r.status} {data[:300]!r}")
        usage = json.loads(data)["usage"]
        return {"s": seconds, "prompt": usage["prompt_tokens"],
                "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def sessions(prompt_words, rounds):
    """The chat A sees at each step: the first (long) one, then one more turn per round."""
    msgs = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Read this and wait for questions.\n" + long_text(prompt_words)}]
    out = [list(msgs)]
    for k in range(rounds):
        msgs = msgs + [{"role": "assistant", "content": f"Ready ({k})."},
                       {"role": "user", "content": f"Question {k}: which words appear most, and where?"}]
        out.append(list(msgs))
    return out


def run_router(server, chats):
    first = server.ask("a", chats[0])
    swaps = []
    for chat in chats[1:]:
        server.ask("b", [{"role": "user", "content": "a short request for the other model"}])
        swaps.append(server.ask("a", chat))
    return {"first": first, "swaps": swaps}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(here, "..", "build", "bin", "prefixd"))
    ap.add_argument("--llama-server", default=os.path.expanduser(
        "~/.cache/prefixd/llama.cpp-de3ff81/build-server/bin/llama-server"))
    ap.add_argument("--shape", default="tiny")
    ap.add_argument("--arch-a", default="qwen35")
    ap.add_argument("--arch-b", default="llama")
    ap.add_argument("--prompt-tokens", type=int, default=16000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(here, "results"))
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="prefixd-router-swap-")
    try:
        models = os.path.join(work, "models")
        os.makedirs(models)
        for name, arch, seed in (("a", args.arch_a, 1), ("b", args.arch_b, 2)):
            subprocess.run([args.bin, "make-test-model", "--arch", arch, "--shape", args.shape,
                            "--seed", str(seed), "--out", os.path.join(models, name + ".gguf")],
                           check=True, stdout=subprocess.DEVNULL)
        ctx = args.prompt_tokens * 2 + 4096
        common = ["--threads", str(args.threads), "--batch", "2048", "--ubatch", "512"]
        chats = sessions(int(args.prompt_tokens / 4.4), args.rounds)  # ~4.4 tokens a word

        results = {}
        p = free_port()
        prefixd = Server("prefixd router", [args.bin, "serve", "--models-dir", models,
                                            "--models-max", "1", "--host", "127.0.0.1", "--port", str(p),
                                            "--cache-dir", os.path.join(work, "cache"), "--slots", "1",
                                            "--ctx", str(ctx)] + common, os.path.join(work, "prefixd.log"))
        try:
            results["prefixd"] = run_router(prefixd, chats)
        finally:
            prefixd.stop()
        log_text = open(prefixd.log_path).read()
        loads = [float(m) for m in re.findall(r"model_loaded model=a .*?load_ms=([0-9.]+)", log_text)]
        # Where a swapped-in request's time went, as model a's server logged it.
        parts = {}
        for line in re.findall(r"^prefixd\[a\] request .*$", log_text, re.M)[1:]:
            for key in ("prepare_ms", "restore_ms", "prefill_ms", "ttft_ms", "total_ms"):
                m = re.search(rf" {key}=([0-9.]+)", line)
                if m:
                    parts.setdefault(key, []).append(float(m.group(1)))

        p = free_port()
        llama = Server("llama-server router", [args.llama_server, "--models-dir", models,
                                               "--models-max", "1", "--host", "127.0.0.1", "--port", str(p),
                                               "-np", "1", "-c", str(ctx), "-t", str(args.threads),
                                               "-b", "2048", "-ub", "512", "--jinja", "--cache-ram", "4096",
                                               "--ctx-checkpoints", "64", "--checkpoint-min-step", "0"],
                       os.path.join(work, "llama-server.log"))
        try:
            results["llama-server"] = run_router(llama, chats)
        finally:
            llama.stop()

        p = free_port()
        cold = Server("prefixd --no-cache", [args.bin, "serve", "-m", os.path.join(models, "a.gguf"),
                                             "--alias", "a", "--host", "127.0.0.1", "--port", str(p),
                                             "--no-cache", "--slots", "1", "--ctx", str(ctx)] + common,
                      os.path.join(work, "cold.log"))
        try:
            results["cold"] = [cold.ask("a", chat) for chat in chats[1:]]
        finally:
            cold.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = lambda xs: statistics.median(xs)
    swap_p = med([r["s"] for r in results["prefixd"]["swaps"]])
    swap_l = med([r["s"] for r in results["llama-server"]["swaps"]])
    cold_s = med([r["s"] for r in results["cold"]])
    load_s = med(loads[1:]) / 1000 if len(loads) > 1 else float("nan")
    prompt = results["prefixd"]["swaps"][-1]["prompt"]
    rows = [
        ("prefixd router, swapped-in first request", swap_p,
         med([r["cached"] for r in results["prefixd"]["swaps"]])),
        ("llama-server router, swapped-in first request", swap_l,
         med([r["cached"] for r in results["llama-server"]["swaps"]])),
        ("cold prefill (prefixd --no-cache, loaded)", cold_s, 0),
    ]
    summary = {
        "shape": args.shape, "prompt_tokens": prompt, "rounds": args.rounds,
        "threads": args.threads, "swap_prefixd_s": swap_p, "swap_llama_server_s": swap_l,
        "cold_prefill_s": cold_s, "load_s": load_s,
        "target_s": 0.1 * cold_s + load_s,
        "meets_cold_target": swap_p <= 0.1 * cold_s + load_s,
        "meets_llama_server": swap_p <= swap_l, "raw": results, "load_ms": loads,
        "model_server_ms": parts,
    }
    os.makedirs(args.out, exist_ok=True)
    name = f"router-swap-{args.shape}"
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(summary, f, indent=1)
    lines = [f"# Model swap: the first request after a swap ({args.shape}, {prompt} prompt tokens)",
             "",
             f"Run: `bench/router_swap.py --shape {args.shape} --prompt-tokens {args.prompt_tokens} "
             f"--rounds {args.rounds} --threads {args.threads}`; models a = {args.arch_a}, "
             f"b = {args.arch_b}; --models-max 1; medians of {args.rounds} swaps.",
             "", "| | time (max_tokens 1) | cached tokens |", "|---|---:|---:|"]
    lines += [f"| {label} | {s * 1000:.0f} ms | {int(c)} |" for label, s, c in rows]
    lines += ["",
              f"- prefixd's load of model a (its router's `load_ms`, median of the swaps): "
              f"{load_s * 1000:.0f} ms",
              f"- target 0.1 × cold + load = {summary['target_s'] * 1000:.0f} ms: "
              f"{'met' if summary['meets_cold_target'] else 'NOT met'}",
              "- inside model a's server, medians (its request log): " +
              ", ".join(f"{k} {med(v):.0f}" for k, v in parts.items()),
              f"- prefixd / llama-server router: {swap_p / swap_l:.3f} "
              f"({'met' if summary['meets_llama_server'] else 'NOT met'})", ""]
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0 if summary["meets_cold_target"] and summary["meets_llama_server"] else 1


if __name__ == "__main__":
    sys.exit(main())
