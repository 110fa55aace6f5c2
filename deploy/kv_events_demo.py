#!/usr/bin/env python3
"""The driver of deploy/kv-events-demo.sh: llm-d's view of a fleet beside HAProxy's routing.

It binds a ZMQ SUB socket at ENDPOINT, where every server of the fleet publishes its KV events
(deploy/fleet.sh --kv-events), and keeps llm-d's index of them (llmd_index.py). Then it runs
agent sessions through the fleet's front URL, turn by turn, each naming itself in an
x-session-id header (HAProxy hashes it). Before each turn it tokenizes the prompt as llm-d does
(POST /v1/chat/completions/render) and asks the index which pod holds how much of it; after it,
it prints that beside the server HAProxy chose (X-Prefixd-Server) and what that server restored
(usage.prompt_tokens_details.cached_tokens):

  session 2 turn 3  haproxy fleet-2 restored 256  llm-d fleet-1 176, fleet-2 256  same

"same": the pod llm-d scores highest holds at least as much as any other and is the one HAProxy
chose; "tie": several pods score highest (a shared system prompt, say), HAProxy's among them;
"differs": llm-d would have sent the turn elsewhere. The last line counts them, e.g.
"turns: 12, llm-d's best pod is HAProxy's: 8 same, 4 tie, 0 differs".

Usage: kv_events_demo.py --endpoint tcp://127.0.0.1:P --front URL --pods fleet-1,fleet-2
       [--model ID] [--sessions 4] [--turns 3]
"""
import argparse
import json
import os
import sys
import time
import urllib.request

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llmd_index import BLOCK, Index  # noqa: E402

SYSTEM = ("You are a build agent. Tools: read(path), write(path, text), run(cmd). "
          + "Answer briefly and call one tool at a time. " * 6)
TASKS = ["Fix the failing disk store test.", "Add a flag for the log level.",
         "Write the release notes for 2.1.", "Find why the build is slow.",
         "Rename the config option.", "Review the last commit."]
REPLIES = ["Tool result: 2 failures in disk_store_test. Fix them.",
           "Tool result: wrote src/store/disk_store.cpp. Run the tests again.",
           "Tool result: all tests pass. Summarize what changed."]


class Stream:
    """The SUB socket and llm-d's index of what arrived on it."""

    def __init__(self, endpoint):
        self.sub = zmq.Context().socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.bind(endpoint)
        self.index = Index()

    def drain(self, quiet_s=0.4, most_s=10.0):
        """Applies what arrives until nothing has for quiet_s (at most most_s)."""
        deadline = time.monotonic() + most_s
        while time.monotonic() < deadline and self.sub.poll(int(quiet_s * 1000)):
            frames = self.sub.recv_multipart()
            if len(frames) == 3:
                self.index.apply(frames[0].decode(), msgpack.unpackb(frames[2], raw=False))


def post(url, body, session):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "x-session-id": session})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r), r.headers.get("X-Prefixd-Server", "?")


def verdict(scores, chosen):
    best = max(scores.values())
    top = [p for p, s in scores.items() if s == best]
    if chosen not in top:
        return "differs"
    return "same" if len(top) == 1 else "tie"


def run_turn(args, stream, session, messages):
    stream.drain()
    rendered, _ = post(f"{args.front}/v1/chat/completions/render",
                       {"model": args.model, "messages": messages}, session)
    tokens = rendered["token_ids"]
    scores = {p: stream.index.score(tokens, args.model, p) * BLOCK for p in args.pods}
    answer, server = post(f"{args.front}/v1/chat/completions",
                          {"model": args.model, "messages": messages, "max_tokens": 8,
                           "temperature": 0}, session)
    restored = answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
    messages.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
    return server, restored, scores


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--front", required=True)
    ap.add_argument("--pods", required=True)
    ap.add_argument("--model", default="")
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    args = ap.parse_args()
    args.pods = args.pods.split(",")
    stream = Stream(args.endpoint)
    if not args.model:
        with urllib.request.urlopen(f"{args.front}/v1/models", timeout=30) as r:
            args.model = json.load(r)["data"][0]["id"]
    chats = [[{"role": "system", "content": SYSTEM},
              {"role": "user", "content": TASKS[s % len(TASKS)] + f" (session {s + 1})"}]
             for s in range(args.sessions)]
    counts = {"same": 0, "tie": 0, "differs": 0}
    for t in range(args.turns):
        for s, messages in enumerate(chats):
            server, restored, scores = run_turn(args, stream, f"demo-{s + 1}", messages)
            v = verdict(scores, server)
            counts[v] += 1
            held = ", ".join(f"{p} {n}" for p, n in scores.items())
            print(f"session {s + 1} turn {t + 1}  haproxy {server} restored {restored}  "
                  f"llm-d {held}  {v}", flush=True)
            messages.append({"role": "user", "content": REPLIES[t % len(REPLIES)]})
    total = sum(counts.values())
    print(f"turns: {total}, llm-d's best pod is HAProxy's: {counts['same']} same, "
          f"{counts['tie']} tie, {counts['differs']} differs", flush=True)


if __name__ == "__main__":
    main()
