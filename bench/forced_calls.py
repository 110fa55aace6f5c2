#!/usr/bin/env python3
"""Forced tool calls, prefixd beside llama-server: the same chat completions request with
tool_choice "required" (two tools) and with a named function, on the tiny random qwen35 model
with each pinned template given (--chat-template on both servers, --jinja on llama-server),
greedy, max_tokens 300, thinking off.

Per template and request: the finish reason, the calls parsed (name and whether the arguments
validate against the tool's schema) and the first characters of any text. Not a timing bench:
what each server answers.

Writes <out>/forced-calls-vs-llama-server.md. Binds 127.0.0.1 only.

Usage: bench/forced_calls.py [--bin build/bin/prefixd] [--llama-server PATH]
       [--templates "Qwen3.5-4B openai-gpt-oss-120b ..."] [--out bench/results]
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router_swap import Server, free_port  # noqa: E402

TEMPLATES = ["Qwen3.5-4B", "meta-llama-Llama-3.1-8B-Instruct", "openai-gpt-oss-120b",
             "GLM-4.7-Flash", "moonshotai-Kimi-K2", "deepseek-ai-DeepSeek-V3.2",
             "unsloth-mistral-Devstral-Small-2507", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
             "google-gemma-4-31B-it", "LFM2.5-Instruct"]

TOOLS = [
    {"type": "function", "function": {"name": "forecast", "description": "Weather forecast",
     "parameters": {"type": "object", "required": ["days", "metric"],
                    "properties": {"days": {"type": "integer"}, "metric": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "clock", "description": "The time",
     "parameters": {"type": "object", "required": ["utc"],
                    "properties": {"utc": {"type": "boolean"}}}}},
]
CHOICES = {"required": "required",
           "named clock": {"type": "function", "function": {"name": "clock"}}}


def valid(name, args):
    try:
        a = json.loads(args)
    except (TypeError, ValueError):
        return False
    if name == "forecast":
        return isinstance(a.get("days"), int) and not isinstance(a.get("days"), bool) \
            and isinstance(a.get("metric"), bool)
    return name == "clock" and isinstance(a.get("utc"), bool)


def ask(port, choice):
    body = json.dumps({"model": "tiny", "max_tokens": 300, "temperature": 0, "tools": TOOLS,
                       "tool_choice": choice, "chat_template_kwargs": {"enable_thinking": False},
                       "messages": [{"role": "system", "content": "You are a weather agent."},
                                    {"role": "user", "content": "Weather in Paris?"}]})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode(errors="replace")
    if r.status != 200:
        return f"HTTP {r.status}: {data[:80]}"
    choice = json.loads(data)["choices"][0]
    msg = choice["message"]
    calls = msg.get("tool_calls") or []
    parts = [f"`{choice['finish_reason']}`"]
    if calls:
        parts.append(", ".join(f"{c['function']['name']}"
                               f"({'valid' if valid(c['function']['name'], c['function']['arguments']) else 'invalid'})"
                               for c in calls))
    else:
        parts.append("no call")
    text = (msg.get("content") or "").strip().replace("|", "\\|").replace("\n", " ")
    if text:
        parts.append(f"text `{text[:30]}…`")
    return ", ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin/prefixd")
    ap.add_argument("--llama-server", default=os.path.expanduser(
        "~/.cache/prefixd/llama.cpp-de3ff81/build-server/bin/llama-server"))
    ap.add_argument("--templates", default=" ".join(TEMPLATES))
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="prefixd-forced-")
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([args.bin, "make-test-model", "--arch", "qwen35", "--shape", "tiny",
                    "--out", model], check=True, stdout=subprocess.DEVNULL)
    rows = []
    for t in args.templates.split():
        tmpl_file = os.path.join(os.path.dirname(args.llama_server), "..", "..", "src", "models",
                                 "templates", t + ".jinja")
        answers = {}
        for name, cmd in (
            ("prefixd", [args.bin, "serve", "-m", model, "--host", "127.0.0.1", "--ctx", "4096",
                         "--chat-template", t, "--cache-dir", os.path.join(work, "cache-" + t)]),
            ("llama-server", [args.llama_server, "-m", model, "--host", "127.0.0.1", "-c", "4096",
                              "--jinja", "--chat-template-file", tmpl_file, "-np", "1"]),
        ):
            port = free_port()
            server = Server(f"{name} {t}", cmd + ["--port", str(port)],
                            os.path.join(work, f"{name}-{t}.log"))
            try:
                answers[name] = {c: ask(port, v) for c, v in CHOICES.items()}
            finally:
                server.stop()
        for c in CHOICES:
            rows.append((t, c, answers["prefixd"][c], answers["llama-server"][c]))
            print(f"{t:48} {c:12} prefixd: {answers['prefixd'][c]}  |  llama-server: {answers['llama-server'][c]}",
                  flush=True)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "forced-calls-vs-llama-server.md")
    with open(path, "w") as f:
        f.write("# Forced tool calls: prefixd beside llama-server\n\n")
        f.write("`python3 bench/forced_calls.py` — the tiny random qwen35 model with each template, "
                "chat completions, two tools (forecast, clock), greedy, max_tokens 300, thinking off. "
                "Valid: the arguments are of the tool's schema. llama-server is built from the same "
                "patched tree (docs/llama-patches.md, 0010 and 0011 included), with --jinja and "
                "--chat-template-file.\n\n")
        f.write("| template | tool_choice | prefixd | llama-server |\n|---|---|---|---|\n")
        for t, c, a, b in rows:
            f.write(f"| {t} | {c} | {a} | {b} |\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
