#!/usr/bin/env python3
"""The architecture sweep: every architecture the pinned llama.cpp's test-model
generator (test-llama-archs) supports, served by `prefixd serve`, with and without the cache.

For each generated model: serve it (127.0.0.1, a port the server picks, a fresh cache dir,
--ctx 4096 --no-flash-attn), replay a 5-request raw-prompt agent trace (growing prefixes, a branch,
a second session on the same system prompt; greedy, a few tokens each), probe the context limits
(a prompt beyond the trained context, a prompt as long as the context: a 400, never a crash),
stop the server; then replay the trace again with --no-cache. Per model it records the reused
tokens against the reusable ones, whether every output equals the --no-cache one, a refusal at
load (with the server's error) or a crash (the server died, exited non-zero, or timed out).

Exit status: 1 on any crash, any output mismatch not in MISMATCH_ALLOWED, a refusal of a
model not in REFUSAL_EXPECTED, or reuse below the block ceiling (inert: nothing reused);
0 otherwise.

docs/architectures.md explains the table; --doc rewrites its generated section.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# The generator writes context_length = 256 for every model (tests/test-llama-archs.cpp).
TRAINED_CTX = 256
BLOCK = 64          # --block-size: the trace crosses several block boundaries within 256 tokens
MAX_TOKENS = 4
CTX = 4096

SAMPLE = ["llama", "gpt2", "mamba2", "qwen35", "gemma3", "deepseek2", "qwen4exp", "dream"]

# Models whose output differs between the cache on and off for a reason that is not the cache's.
MISMATCH_ALLOWED = {
    # cogvlm's graph depends on the batch: its cold output changes with --batch alone, so a
    # restored run (which evaluates fewer tokens in its last chunk) need not match a cold one.
    "cogvlm": "cold output depends on the batch size (--batch alone changes it)",
}
# Models prefixd refuses at load, on purpose: they cannot serve causal completions.
REFUSAL_EXPECTED = {
    "dream": "diffusion", "llada": "diffusion", "llada-moe": "diffusion", "rnd1": "diffusion",
}


def words(tag, start, n):
    """n tokens of text: the test tokenizer cuts text into 5-character tokens, and each word
    here is 5 characters, so prompts that share text share tokens."""
    return "".join(f"{tag}{i % 1000:03d} " for i in range(start, start + n))


def trace():
    """Five prompts an agent would send: a system prompt, turns appended, a branch, a second
    session on the same system prompt, then the first session continuing. At most 240 tokens,
    so the models whose context is capped at their trained 256 run it too."""
    s, u1, a1 = words("s", 0, 100), words("u", 0, 40), words("a", 0, 30)
    u2, x, u3, a2 = words("v", 0, 30), words("x", 0, 40), words("t", 0, 60), words("b", 0, 40)
    return [s + u1, s + u1 + a1 + u2, s + u1 + a1 + x, s + u3, s + u1 + a1 + u2 + a2]


class Server:
    """One `prefixd serve` process; its stderr goes to a log file."""

    def __init__(self, prefixd, model, workdir, no_cache, timeout):
        self.log_path = os.path.join(workdir, "server-nocache.log" if no_cache else "server.log")
        self.timeout = timeout
        args = [prefixd, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0",
                "--ctx", str(CTX), "--no-flash-attn", "--slots", "1", "--threads", "2",
                "--block-size", str(BLOCK), "--batch", str(BLOCK), "--ubatch", str(BLOCK),
                "--ram-budget", "256M",
                "--cache-dir", os.path.join(workdir, "cache")]
        if no_cache:
            args.append("--no-cache")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.port = None
        self.ctx = None

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_listening(self):
        """Returns None when listening, else the exit code (the server refused or died)."""
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            m = re.search(r"prefixd listening .*port=(\d+).* ctx=(\d+)", self.text())
            if m:
                self.port, self.ctx = int(m.group(1)), int(m.group(2))
                return None
            if self.proc.poll() is not None:
                return self.proc.returncode
            time.sleep(0.05)
        raise TimeoutError(f"not listening after {self.timeout} s")

    def post(self, path, body):
        """(HTTP status, JSON body); raises on a dead server or a timeout."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def complete(self, prompt):
        return self.post("/v1/completions", {"prompt": prompt, "max_tokens": MAX_TOKENS,
                                             "temperature": 0})

    def stop(self):
        """Stops the server; returns its exit code (SIGKILL after the timeout: -9)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def shared_prefix(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def replay(server, prompts):
    """Per request: output text, prompt tokens, cached tokens, reusable tokens."""
    rows, seen = [], []
    for p in prompts:
        code, tok = server.post("/tokenize", {"content": p})
        if code != 200:
            raise RuntimeError(f"/tokenize: HTTP {code}: {tok}")
        tokens = tok["tokens"]
        code, r = server.complete(p)
        if code != 200:
            raise RuntimeError(f"/v1/completions: HTTP {code}: {r}")
        reusable = max([shared_prefix(s, tokens) for s in seen] + [0])
        rows.append({"text": r["choices"][0]["text"], "prompt": len(tokens),
                     "cached": r["usage"]["prompt_tokens_details"]["cached_tokens"],
                     "reusable": min(reusable, len(tokens) - 1)})
        seen.append(tokens)
    return rows


def probe_limits(server):
    """A prompt beyond the trained context is served or refused (400); one as long as the
    context is refused with a 400. Returns a problem, or None."""
    code, r = server.complete(words("p", 0, TRAINED_CTX + 64))
    if code not in (200, 400):
        return f"prompt beyond the trained context: HTTP {code}: {r}"
    code, r = server.complete(words("q", 0, server.ctx))
    if code != 400 or r.get("error", {}).get("code") != "context_length_exceeded":
        return (f"prompt as long as the context ({server.ctx}): HTTP {code} {r}, expected 400 "
                "context_length_exceeded")
    return None


def last_error(text):
    """The server's own error line (`prefixd serve: …`), or the log's last line."""
    lines = [l for l in text.splitlines() if l.strip()]
    for l in reversed(lines):
        if l.startswith("prefixd serve:"):
            return l[len("prefixd serve:"):].strip()
    return lines[-1][:300] if lines else "(no output)"


def notes_of(text):
    """What the server said at start about this model: a capped context, an inert codec."""
    keep = ("context capped", "cannot slice", "refused", "failed")
    out = []
    for l in text.splitlines():
        if l.startswith("prefixd: ") and any(k in l for k in keep) and l not in out:
            out.append(l[len("prefixd: "):])
    return out[:3]


def run_side(prefixd, model, workdir, no_cache, timeout, prompts):
    """Serves `model` once. Returns (status, detail, rows, server text)."""
    server = Server(prefixd, model, workdir, no_cache, timeout)
    rows, problem = None, None
    try:
        rc = server.wait_listening()
        if rc is not None:
            text = server.text()
            if rc > 0 and "prefixd serve:" in text:
                return "refused", last_error(text), None, text
            return "crashed", f"exited {rc} before listening: {last_error(text)}", None, text
        rows = replay(server, prompts)
        if not no_cache:
            problem = probe_limits(server)
    except (OSError, RuntimeError, TimeoutError, ValueError, KeyError) as e:
        problem = f"{type(e).__name__}: {e}"
    rc = server.stop()
    text = server.text()
    if problem is not None or rc != 0:
        detail = problem or f"exit code {rc} at shutdown"
        if rc != 0:
            detail += f" (server exit {rc}: {last_error(text)})"
        return "crashed", detail, rows, text
    return "ok", "", rows, text


def classify(rows):
    """full: every reusable token reused; ceiling: every request reused at least its block
    ceiling (the reusable length rounded down to --block-size); below; inert: nothing reused."""
    cached = sum(r["cached"] for r in rows)
    reusable = sum(r["reusable"] for r in rows)
    if cached == 0 and reusable > 0:
        return "inert"
    if all(r["cached"] >= r["reusable"] for r in rows):
        return "full"
    if all(r["cached"] >= r["reusable"] // BLOCK * BLOCK for r in rows):
        return "ceiling"
    return "below"


def sweep_one(prefixd, model, timeout):
    arch = re.sub(r"-(dense|moe)\.gguf$", "", os.path.basename(model))
    name = os.path.basename(model)[:-len(".gguf")]
    res = {"model": name, "arch": arch}
    workdir = tempfile.mkdtemp(prefix=f"prefixd-sweep-{name}-")
    prompts = trace()
    try:
        status, detail, on, text = run_side(prefixd, model, workdir, False, timeout, prompts)
        res["notes"] = notes_of(text)
        m = re.search(r"prefixd listening .* ctx=(\d+)", text)
        res["ctx"] = int(m.group(1)) if m else None
        if status != "ok":
            res.update(status=status, detail=detail)
            return res
        status, detail, off, _ = run_side(prefixd, model, workdir, True, timeout, prompts)
        if status != "ok":
            res.update(status="crashed", detail="--no-cache: " + detail)
            return res
        res["cached"] = sum(r["cached"] for r in on)
        res["reusable"] = sum(r["reusable"] for r in on)
        res["ceiling"] = sum(r["reusable"] // BLOCK * BLOCK for r in on)
        res["reuse"] = classify(on)
        res["requests"] = [f"{r['cached']}/{r['reusable']}" for r in on]
        res["equal"] = all(a["text"] == b["text"] for a, b in zip(on, off))
        res["status"] = "ok"
        if not res["equal"]:
            diff = [i for i, (a, b) in enumerate(zip(on, off)) if a["text"] != b["text"]]
            res["detail"] = f"output differs on request(s) {diff}"
        return res
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def failure_of(r):
    """Why this result fails the sweep, or None."""
    if r["status"] == "crashed":
        return "crashed: " + r["detail"]
    if r["status"] == "refused" and r["arch"] not in REFUSAL_EXPECTED:
        return "refused at load, not expected: " + r["detail"]
    if r["status"] == "ok" and not r["equal"] and r["arch"] not in MISMATCH_ALLOWED:
        return r["detail"]
    if r["status"] == "ok" and r.get("reuse") in ("inert", "below"):
        return f"reuse below the block ceiling: {r.get('cached')} of {r.get('reusable')}" \
            if r["reuse"] == "below" else "inert: nothing reused"
    return None


def verdict(r):
    if r["status"] == "refused":
        return "refused at load"
    if r["status"] == "crashed":
        return "**crashed**"
    reuse = {"full": "full reuse", "ceiling": "at block ceiling",
             "below": "**below ceiling**", "inert": "**inert**"}[r["reuse"]]
    if not r["equal"]:
        reuse += ", output differs" + (" (allowed)" if r["arch"] in MISMATCH_ALLOWED else "")
    return reuse


def counts_of(results):
    c = {"full": 0, "ceiling": 0, "below": 0, "inert": 0, "refused": 0, "crashed": 0,
         "mismatch": 0, "mismatch_allowed": 0}
    for r in results:
        if r["status"] != "ok":
            c[r["status"]] += 1
            continue
        c[r["reuse"]] += 1
        if not r["equal"]:
            c["mismatch_allowed" if r["arch"] in MISMATCH_ALLOWED else "mismatch"] += 1
    return c


def summary_line(results):
    c = counts_of(results)
    return (f"arch-sweep: {len(results)} models: {c['full']} full reuse, {c['ceiling']} at the "
            f"block ceiling, {c['below']} below it, {c['inert']} inert, {c['refused']} refused "
            f"at load, {c['crashed']} crashed, {c['mismatch']} output mismatches "
            f"(+{c['mismatch_allowed']} allowed)")


def markdown(results, commit):
    c = counts_of(results)
    out = [f"Generated by `scripts/arch-sweep.sh --doc` at prefixd {commit}: "
           f"{len(results)} models from `test-llama-archs -s 42`, block size {BLOCK}, "
           f"`--ctx {CTX} --no-flash-attn`, {MAX_TOKENS} greedy tokens a request.", "",
           "| outcome | models |", "|---|---:|",
           f"| full reuse (every reusable token), output equal | {c['full']} |",
           f"| at the block ceiling, output equal | {c['ceiling']} |",
           f"| below the block ceiling | {c['below']} |",
           f"| inert (nothing reused) | {c['inert']} |",
           f"| refused at load | {c['refused']} |",
           f"| crashed | {c['crashed']} |",
           f"| output differs from `--no-cache` (allowed: {', '.join(MISMATCH_ALLOWED)}) | "
           f"{c['mismatch']} (+{c['mismatch_allowed']} allowed) |", "",
           "| model | ctx | reused / reusable | block ceiling | outcome | notes |",
           "|---|---:|---:|---:|---|---|"]
    for r in results:
        notes = list(r.get("notes", []))
        if r.get("detail"):
            notes.insert(0, r["detail"])
        note = "; ".join(n.replace("|", "\\|") for n in notes)[:400]
        if r["status"] == "ok":
            reuse = f"{r['cached']} / {r['reusable']}"
            ceiling = str(r["ceiling"])
        else:
            reuse = ceiling = "–"
        out.append(f"| {r['model']} | {r.get('ctx') or '–'} | {reuse} | {ceiling} | "
                   f"{verdict(r)} | {note} |")
    return "\n".join(out) + "\n"


def write_doc(path, body):
    begin, end = "<!-- arch-sweep:begin -->", "<!-- arch-sweep:end -->"
    with open(path) as f:
        doc = f.read()
    i, j = doc.index(begin) + len(begin), doc.index(end)
    with open(path, "w") as f:
        f.write(doc[:i] + "\n" + body + doc[j:])


def generate(generator, archs, outdir):
    regex = ".*" if archs is None else "^(" + "|".join(re.escape(a) for a in archs) + ")$"
    subprocess.run([generator, "-s", "42", "-a", regex, "-o", outdir + "/"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return sorted(os.path.join(outdir, f) for f in os.listdir(outdir) if f.endswith(".gguf"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefixd", required=True, help="the prefixd binary")
    ap.add_argument("--generator", required=True, help="llama.cpp's test-llama-archs binary")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--sample", action="store_true", help=f"only {', '.join(SAMPLE)}")
    mode.add_argument("--arch", action="append", help="only these architectures (repeatable)")
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds a server may take to start, answer one request, or stop")
    ap.add_argument("--json", help="write the per-model results here")
    ap.add_argument("--doc", help="rewrite the generated section of this markdown file")
    a = ap.parse_args()

    archs = SAMPLE if a.sample else a.arch
    outdir = tempfile.mkdtemp(prefix="prefixd-sweep-models-")
    try:
        models = generate(a.generator, archs, outdir)
        if archs is not None:
            got = {re.sub(r"-(dense|moe)\.gguf$", "", os.path.basename(m)) for m in models}
            missing = sorted(set(archs) - got)
            if missing:
                print(f"arch-sweep: the generator wrote no model for {missing}", file=sys.stderr)
                return 1
        results, failures = [], []
        for i, model in enumerate(models):
            start = time.time()
            r = sweep_one(a.prefixd, model, a.timeout)
            results.append(r)
            why = failure_of(r)
            if why:
                failures.append(f"{r['model']}: {why}")
            print(f"[{i + 1}/{len(models)}] {r['model']}: {verdict(r)}"
                  + (f" {r['cached']}/{r['reusable']}" if r["status"] == "ok" else "")
                  + (f" - {r['detail']}" if r.get("detail") else "")
                  + f" ({time.time() - start:.1f} s)", flush=True)
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    if not results:
        print("arch-sweep: the generator wrote no model", file=sys.stderr)
        return 1
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.doc:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=os.path.dirname(os.path.abspath(a.doc))).stdout
        write_doc(a.doc, markdown(results, commit.strip() or "?"))
    for f in failures:
        print("arch-sweep: FAIL " + f)
    print(summary_line(results))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
