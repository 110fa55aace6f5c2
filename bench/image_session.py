#!/usr/bin/env python3
"""Image bench: an agent session with a screenshot in it, on prefixd and on llama-server
(built from the same pinned llama.cpp), the same model, projector and flags.

One scenario, run on each server in turn (one server up at a time, the order alternating each
round; a fresh cache directory each round):
  A1..A8  one conversation of 8 turns: a fixed system prompt (~2K tokens) with two tool schemas
          and a task; turn 2 attaches a screenshot-sized PNG (--image-size, a synthetic pattern
          written here with zlib); later turns append tool calls with their results and user
          messages (a few hundred tokens each);
  B1, B2  a second conversation (the same system prompt, another task) with the same image in
          its first user message, then one tool result;
  A9      both servers restarted (prefixd on the same --cache-dir), then the first
          conversation's next turn.
Each request is sent as the last answer ends, or --pause-s seconds later (the time an agent
spends running its tool: what a server does between requests then leaves the next one).
Per request: TTFT (streamed; the first chunk whose delta carries text or a tool call), the
prompt tokens the server evaluated (prefixd: usage prompt_tokens - cached_tokens;
llama-server: timings.prompt_n) and the images the server encoded (prefixd: the change of
prefixd_images_encoded_total on /metrics; llama-server: the n_chunks of its "encoding mtmd
batch" trace lines, logged at -lv 4 by process_mtmd_chunk in tools/server/server-context.cpp).
TTFT is the median over the rounds; token and image counts come from the first round (a round
whose counts differ is listed under the table).

Usage: bench/image_session.py run --arch gemma3 --model M.gguf --mmproj M.mmproj.gguf
           --llama-server PATH [--bin build/bin/prefixd] [--shape tiny] [--rounds 3]
           [--threads 2] [--slots 2] [--ctx 8192] [--image-size 640x480] [--work DIR]
           [--ports 19700-19799] [--pause-s S] [--out RESULT.json]
       bench/image_session.py report RESULT.json... --md OUT.md [--command "..."]
Binds 127.0.0.1 only. docs/bench.md explains.
"""
import argparse
import base64
import http.client
import json
import os
import random
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib

# ---------------------------------------------------------------------------------------------
# The image

def png_bytes(width, height, rgb_rows):
    """A truecolor 8-bit PNG of RGB rows (each `width * 3` bytes), without filters."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    raw = b"".join(b"\x00" + bytes(row) for row in rgb_rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6))
            + chunk(b"IEND", b""))


def screenshot_rows(width, height, seed=7):
    """A synthetic screenshot: title bar, side bar, lines of "text" blocks, a gradient chart.
    The same arguments give the same pixels."""
    rng = random.Random(seed)
    line_len = {}
    rows = []
    for y in range(height):
        row = bytearray(width * 3)
        line, in_line = divmod(y - 40, 14)
        if line not in line_len:
            line_len[line] = rng.randint(width // 5, width - width // 4 - 20)
        for x in range(width):
            if y < 28:                                   # title bar
                c = (40, 44, 52) if x > 60 else ((255, 95, 86), (255, 189, 46), (39, 201, 63))[x // 20 % 3]
            elif x < width // 4:                         # side bar: a list of entries
                c = (33, 37, 43) if (y // 18) % 2 else (38, 42, 49)
                if 8 < x < width // 4 - 8 and 6 < y % 18 < 12 and (x * 7 + y) % 11 > 3:
                    c = (171, 178, 191)
            elif y > height * 2 // 3:                    # a chart
                v = (x * 255) // width
                bar = ((x // 16) * 37 + 11) % (height // 3)
                c = (v, 120, 255 - v) if height - y < bar else (250, 250, 250)
            else:                                        # editor text
                c = (30, 33, 39)
                if y >= 40 and 3 <= in_line < 11 and x - width // 4 - 12 < line_len[line]:
                    word = (x + 13 * line) // 9 % 7
                    if word != 0 and x > width // 4 + 12:
                        c = ((198, 120, 221), (97, 175, 239), (152, 195, 121), (229, 192, 123),
                             (224, 108, 117), (171, 178, 191))[(line + word) % 6]
            row[3 * x:3 * x + 3] = bytes(c)
        rows.append(row)
    return rows


def screenshot_png(width, height):
    return png_bytes(width, height, screenshot_rows(width, height))


# ---------------------------------------------------------------------------------------------
# The conversations

WORDS = ("the a to of and in is for that with on as this be it by are from or at an not file "
         "line error value return function class module test build cache request server client "
         "token prompt model layer state block prefix path index query result config option "
         "thread queue batch stream buffer window image pixel screen button panel render").split()
CODE = ("def {0}(self, {1}):", "    return {0}.{1}({2})", "if {0} is None:", "for {0} in {1}:",
        "    {0} = {1} + {2}", "raise ValueError('{0} {1}')", "{0}[{1}] = {2}", "# {0} {1} {2}")


def words(n, seed):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def code(n_lines, seed):
    rng = random.Random(seed)
    return "\n".join(rng.choice(CODE).format(*(rng.choice(WORDS) + str(rng.randint(0, 9))
                                               for _ in range(3))) for _ in range(n_lines))


TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "run_command", "description": "Run a shell command in the repository.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}},
]


def system_prompt(n_words):
    rules = [f"Rule {i}: {words(60, 100 + i)}." for i in range(max(1, n_words // 62))]
    return "You are a coding agent working in a user's repository.\n\n" + "\n".join(rules)


def tool_step(k, call_id, tool_words):
    """An assistant turn calling a tool, and the tool's result (file contents or output)."""
    name = ("read_file", "run_command")[k % 2]
    args = {"path": f"src/module{k}.py"} if name == "read_file" else {"command": f"pytest -k case{k}"}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": name, "arguments": json.dumps(args)}}]}
    body = code(tool_words // 6, 300 + k) if name == "read_file" else words(tool_words, 300 + k)
    return [call, {"role": "tool", "tool_call_id": call_id, "content": body}]


def answer_and_user(k, user_words):
    return [{"role": "assistant", "content": f"Step {k} done: {words(30, 500 + k)}."},
            {"role": "user", "content": f"Next: {words(user_words, 600 + k)}"}]


def image_part(data_url):
    return {"type": "image_url", "image_url": {"url": data_url}}


def session_a(data_url, system_words=750, tool_words=130, user_words=80):
    """The first conversation's requests, A1..A9 (A9 is sent after the restart)."""
    msgs = [{"role": "system", "content": system_prompt(system_words)},
            {"role": "user", "content": "Task: the settings page renders wrong. " + words(user_words, 1)}]
    out = [list(msgs)]
    msgs += [{"role": "assistant", "content": "Can you show me what you see?"},
             {"role": "user", "content": [
                 {"type": "text", "text": "Here is a screenshot of the page. " + words(40, 2)},
                 image_part(data_url)]}]
    out.append(list(msgs))
    # turns 3..9: tool, tool, user, tool, tool, user, tool
    for k, kind in enumerate(("tool", "tool", "user", "tool", "tool", "user", "tool"), start=3):
        msgs += tool_step(k, f"call_a{k}", tool_words) if kind == "tool" else answer_and_user(k, user_words)
        out.append(list(msgs))
    return out


def session_b(data_url, system_words=750, tool_words=130, user_words=80):
    """The second conversation: the same image in its first message, then a tool result."""
    msgs = [{"role": "system", "content": system_prompt(system_words)},
            {"role": "user", "content": [
                {"type": "text", "text": "Another task: compare with this screenshot. " + words(user_words, 3)},
                image_part(data_url)]}]
    out = [list(msgs)]
    msgs += tool_step(2, "call_b2", tool_words)
    out.append(list(msgs))
    return out


def scenario(data_url):
    """(label, what, messages, restart_before) for every request, in order."""
    a, b = session_a(data_url), session_b(data_url)
    what = {1: "task", 2: "+ screenshot", 5: "+ user text", 8: "+ user text"}
    steps = [(f"A{i + 1}", what.get(i + 1, "+ tool result"), m, False) for i, m in enumerate(a[:8])]
    steps += [("B1", "new conversation, same image", b[0], False),
              ("B2", "+ tool result", b[1], False),
              ("A9", "after a restart: A's next turn", a[8], True)]
    return steps


# ---------------------------------------------------------------------------------------------
# Servers

def port_in_range(lo, hi, taken=()):
    """A free TCP port on 127.0.0.1 in [lo, hi]."""
    for p in range(lo, hi + 1):
        if p in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    raise RuntimeError(f"no free port in {lo}-{hi}")


class Server:
    """One server process; `start` waits for /health (at most 300 s)."""

    def __init__(self, label, cmd, port, log_path):
        self.label, self.cmd, self.port, self.log_path = label, cmd, port, log_path
        self.proc = None
        open(log_path, "w").close()  # a restart appends to the same log

    def start(self):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.label} did not start; see {self.log_path}")

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.proc = None

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("GET", path)
        return c.getresponse().read().decode()


def prefixd_images_encoded(server):
    for line in server.get("/metrics").splitlines():
        if line.startswith("prefixd_images_encoded_total "):
            return int(float(line.split()[1]))
    raise RuntimeError("/metrics has no prefixd_images_encoded_total (no --mmproj?)")


LLAMA_ENCODE = re.compile(r"encoding mtmd batch from idx = \d+, n_chunks = (\d+)")


def llama_images_encoded(log_text):
    """The image chunks llama-server encoded, from its -lv 4 log."""
    return sum(int(n) for n in LLAMA_ENCODE.findall(log_text))


def llama_server_encoded(server):
    time.sleep(0.3)  # the log is written by common_log's own thread
    with open(server.log_path, errors="replace") as f:
        return llama_images_encoded(f.read())


def delta_has_output(choice):
    d = choice.get("delta") or {}
    return bool(d.get("content") or d.get("reasoning_content") or d.get("tool_calls"))


def stream_chat(port, messages, max_tokens):
    """One streamed chat request: TTFT, wall, usage and timings (the last ones seen)."""
    body = json.dumps({"model": "bench", "messages": messages, "tools": TOOLS,
                       "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"port {port}: HTTP {r.status}: {r.read()[:400]!r}")
    first_choice = first_output = None
    usage, timings, error = None, None, None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        j = json.loads(line[5:])
        now = (time.perf_counter() - t0) * 1000
        if j.get("error"):
            error = j["error"]
        choices = j.get("choices") or []
        if choices:
            first_choice = first_choice if first_choice is not None else now
            if first_output is None and delta_has_output(choices[0]):
                first_output = now
        usage = j.get("usage") or usage
        timings = j.get("timings") or timings
    total = (time.perf_counter() - t0) * 1000
    if usage is None and timings is None:
        raise RuntimeError(f"port {port}: the stream ended without usage or timings ({error})")
    ttft = first_output if first_output is not None else (first_choice if first_choice is not None else total)
    return {"ttft_ms": ttft, "total_ms": total, "usage": usage, "timings": timings,
            "error": error, "no_output": first_output is None}


def evaluated_tokens(label, res):
    """prefixd: prompt - cached (usage); llama-server: timings.prompt_n."""
    u, t = res["usage"] or {}, res["timings"] or {}
    if label == "llama-server" and "prompt_n" in t:
        return int(t["prompt_n"])
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return int(u["prompt_tokens"]) - int(cached)


def prompt_tokens(res):
    u, t = res["usage"] or {}, res["timings"] or {}
    if "prompt_tokens" in u:
        return int(u["prompt_tokens"])
    return int(t.get("prompt_n", 0)) + int(t.get("cache_n", 0))


def run_scenario(label, server, steps, encoded, max_tokens, log, pause_s=0.0):
    """Sends every step to one server (restarting it where a step says), `pause_s` seconds
    after the answer before (an agent running its tool); a row per step."""
    rows = []
    server.start()
    try:
        seen = encoded(server)
        for name, what, msgs, restart in steps:
            if restart:
                server.stop()
                server.start()
                seen = encoded(server)
            if rows and pause_s > 0:
                time.sleep(pause_s)
            res = stream_chat(server.port, msgs, max_tokens)
            now = encoded(server)
            row = {"turn": name, "what": what, "ttft_ms": round(res["ttft_ms"], 1),
                   "total_ms": round(res["total_ms"], 1), "prompt": prompt_tokens(res),
                   "evaluated": evaluated_tokens(label, res), "images_encoded": now - seen}
            if res["error"]:
                row["error"] = str(res["error"])[:200]
            if res["no_output"]:
                row["no_output"] = True
            seen = now
            rows.append(row)
            log(f"{label} {name}: prompt {row['prompt']} evaluated {row['evaluated']} "
                f"images {row['images_encoded']} TTFT {row['ttft_ms']:.0f} ms")
    finally:
        server.stop()
    return rows


def server_commands(a, port_p, port_l, cache_dir):
    common_b = ["--threads", str(a.threads)]
    prefixd = [a.bin, "serve", "-m", a.model, "--mmproj", a.mmproj, "--alias", "bench",
               "--host", "127.0.0.1", "--port", str(port_p), "--cache-dir", cache_dir,
               "--slots", str(a.slots), "--ctx", str(a.ctx), "--batch", "2048", "--ubatch", "512",
               ] + common_b + a.prefixd_extra.split()
    # llama-server's best caching flags of this version, as bench/run-vs-llama-server.sh gives
    # them, with --cache-ram at its default; -lv 4 logs every mtmd batch it encodes.
    llama = [a.llama_server, "-m", a.model, "--mmproj", a.mmproj, "--alias", "bench",
             "--host", "127.0.0.1", "--port", str(port_l), "-np", str(a.slots),
             "-c", str(a.slots * a.ctx), "-t", str(a.threads), "-b", "2048", "-ub", "512",
             "--jinja", "--ctx-checkpoints", "64", "--checkpoint-min-step", "0", "-lv", "4",
             ] + (["--swa-full"] if a.arch in ("gemma3", "gemma4") else []) + a.llama_extra.split()
    return prefixd, llama


def cmd_run(a):
    log = lambda msg: print(f"[{time.strftime('%H:%M:%S')}] {a.arch}: {msg}", file=sys.stderr, flush=True)
    w, h = (int(v) for v in a.image_size.split("x"))
    png = screenshot_png(w, h)
    data_url = "data:image/png;base64," + base64.b64encode(png).decode()
    steps = scenario(data_url)
    lo, hi = (int(v) for v in a.ports.split("-"))
    work = a.work or tempfile.mkdtemp(prefix="prefixd-images-")
    os.makedirs(work, exist_ok=True)
    rounds = []
    for r in range(a.rounds):
        port_p = port_in_range(lo, hi)
        port_l = port_in_range(lo, hi, taken=(port_p,))
        tag = f"{a.arch}-{a.shape}-pause{a.pause_s:g}-{r}"
        cache = os.path.join(work, f"cache-{tag}")
        shutil.rmtree(cache, ignore_errors=True)
        cmd_p, cmd_l = server_commands(a, port_p, port_l, cache)
        servers = {
            "prefixd": (Server("prefixd", cmd_p, port_p, os.path.join(work, f"{tag}-prefixd.log")),
                        prefixd_images_encoded),
            "llama-server": (Server("llama-server", cmd_l, port_l,
                                    os.path.join(work, f"{tag}-llama-server.log")),
                             llama_server_encoded),
        }
        order = ["prefixd", "llama-server"] if r % 2 == 0 else ["llama-server", "prefixd"]
        result = {}
        for label in order:
            server, encoded = servers[label]
            log(f"round {r + 1}/{a.rounds}: {label}")
            result[label] = run_scenario(label, server, steps, encoded, a.max_tokens, log,
                                         a.pause_s)
        rounds.append(result)
        if r == 0:
            commands = {"prefixd": " ".join(cmd_p), "llama-server": " ".join(cmd_l)}
        shutil.rmtree(cache, ignore_errors=True)
    out = {"arch": a.arch, "shape": a.shape, "image": f"{w}x{h} PNG, {len(png)} bytes",
           "rounds": a.rounds, "threads": a.threads, "slots": a.slots, "ctx": a.ctx,
           "max_tokens": a.max_tokens, "pause_s": a.pause_s, "commands": commands,
           "runs": rounds}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    log(f"wrote {a.out}")


# ---------------------------------------------------------------------------------------------
# Report

COUNTS = ("prompt", "evaluated", "images_encoded")


def summarize(result):
    """Per turn: median TTFT of each server over the rounds, counts of the first round, and
    the rounds whose counts differ from it."""
    runs = result["runs"]
    rows, differ = [], []
    for i, first in enumerate(runs[0]["prefixd"]):
        row = {"turn": first["turn"], "what": first["what"]}
        for label in ("prefixd", "llama-server"):
            per_round = [run[label][i] for run in runs]
            row[label] = {"ttft_ms": statistics.median(x["ttft_ms"] for x in per_round)}
            row[label].update({k: per_round[0][k] for k in COUNTS})
            errors = [x["error"] for x in per_round if x.get("error")]
            if errors:
                row[label]["error"] = errors[0]
            for r, x in enumerate(per_round[1:], start=2):
                if any(x[k] != per_round[0][k] for k in COUNTS):
                    differ.append(f"{label} {first['turn']} round {r}: "
                                  + ", ".join(f"{k} {x[k]}" for k in COUNTS))
        rows.append(row)
    return rows, differ


def ratio(a, b):
    return f"{a / b:.2f}" if b else "n/a"


def table(result):
    rows, differ = summarize(result)
    pause = result.get("pause_s", 0)
    when = (f"{pause:g} s between an answer and the next request" if pause
            else "each request sent as the last answer ends")
    lines = [f"### {result['arch']} ({result['shape']}), {when}", "",
             "| turn | what | prompt tokens | TTFT prefixd (ms) | TTFT llama-server (ms) | ratio | "
             "evaluated prefixd | evaluated llama-server | images encoded prefixd | "
             "images encoded llama-server |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    tot = {"prefixd": [0, 0], "llama-server": [0, 0]}
    for row in rows:
        p, l = row["prefixd"], row["llama-server"]
        prompt = str(p["prompt"]) if p["prompt"] == l["prompt"] else f"{p['prompt']} / {l['prompt']}"
        lines.append(f"| {row['turn']} | {row['what']} | {prompt} | {p['ttft_ms']:.0f} | "
                     f"{l['ttft_ms']:.0f} | {ratio(p['ttft_ms'], l['ttft_ms'])} | {p['evaluated']} | "
                     f"{l['evaluated']} | {p['images_encoded']} | {l['images_encoded']} |")
        for label in tot:
            tot[label][0] += row[label]["evaluated"]
            tot[label][1] += row[label]["images_encoded"]
    lines.append(f"| all | | | | | | {tot['prefixd'][0]} | {tot['llama-server'][0]} | "
                 f"{tot['prefixd'][1]} | {tot['llama-server'][1]} |")
    after = [r for r in rows if r["turn"] not in ("A1", "A2")]
    slower = [r["turn"] for r in after if r["prefixd"]["ttft_ms"] > r["llama-server"]["ttft_ms"]]
    lines += ["", f"Turns after the image where prefixd's TTFT is above llama-server's: "
              f"{', '.join(slower) if slower else 'none'}."]
    notes = [f"{label} {r['turn']}: {r[label]['error']}" for r in rows
             for label in ("prefixd", "llama-server") if r[label].get("error")]
    if notes:
        lines += ["", "Error events in the stream (the prompt was processed; its numbers are the "
                  "stream's timings): " + "; ".join(notes) + "."]
    if differ:
        lines += ["", "Rounds whose counts differ from the first: " + "; ".join(differ) + "."]
    return lines


def cmd_report(a):
    results = []
    for path in a.results:
        with open(path) as f:
            results.append(json.load(f))
    r0 = results[0]
    lines = ["# Images: an agent session with a screenshot, prefixd vs llama-server", "",
             f"Run: `{a.command}` ({time.strftime('%Y-%m-%d')}; {a.notes})." if a.command else "",
             "",
             f"Each model: the scenario of `bench/image_session.py` (docs/bench.md, \"Images\"): "
             f"conversation A of 8 turns (A2 attaches the screenshot), conversation B with the "
             f"same image, then both servers restarted and A's next turn (A9). One server up at "
             f"a time, the order alternating; TTFT is the median of {r0['rounds']} rounds "
             f"(streamed, first delta with output; {r0['max_tokens']} tokens, ignore_eos), counts "
             f"are the first round's. {r0['threads']} threads, {r0['slots']} slots of "
             f"{r0['ctx']} tokens each. The image: {r0['image']}. Ratio: prefixd / llama-server. "
             f"Prompt tokens: prefixd's / llama-server's where they differ.", ""]
    for r in results:
        lines += table(r) + ["", "Commands (round 1):", "",
                             f"- prefixd: `{r['commands']['prefixd']}`",
                             f"- llama-server: `{r['commands']['llama-server']}`", ""]
    text = "\n".join(lines) + "\n"
    with open(a.md, "w") as f:
        f.write(text)
    print(text)


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--arch", required=True)
    run.add_argument("--shape", default="tiny")
    run.add_argument("--model", required=True)
    run.add_argument("--mmproj", required=True)
    run.add_argument("--bin", default=os.path.join(here, "..", "build", "bin", "prefixd"))
    run.add_argument("--llama-server", required=True)
    run.add_argument("--rounds", type=int, default=3)
    run.add_argument("--threads", type=int, default=2)
    run.add_argument("--slots", type=int, default=2)
    run.add_argument("--ctx", type=int, default=8192)
    run.add_argument("--max-tokens", type=int, default=4)
    run.add_argument("--image-size", default="640x480")
    run.add_argument("--pause-s", type=float, default=0.0)
    run.add_argument("--ports", default="19700-19799")
    run.add_argument("--prefixd-extra", default="")
    run.add_argument("--llama-extra", default="")
    run.add_argument("--work", default="")
    run.add_argument("--out", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("results", nargs="+")
    rep.add_argument("--md", required=True)
    rep.add_argument("--command", default="")
    rep.add_argument("--notes", default="")
    a = ap.parse_args(argv)
    (cmd_run if a.cmd == "run" else cmd_report)(a)


if __name__ == "__main__":
    main()
