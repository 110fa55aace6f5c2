#!/usr/bin/env python3
"""A KV-event subscriber that keeps llm-d's index and answers questions on
stdin, one JSON line each on stdout, while the stream runs (deploy/llmd_index.py):

  count                      {"events": n, "messages": m, "gaps": g, "skipped": s,
                              "removed": {"<medium>": BlockRemoved hashes, ...},
                              "skipped_hashes": {"<medium>": n}, "live": {"<medium>": n}}
                             (live: engine hashes stored and not removed since, by medium)
  score {"tokens": [...], "model": M, "pod": P}
                             {"blocks": k}: llm-d's LongestPrefix match in 16-token chunks
  media {"pod": P}           {"<medium>": keys held, ...}
  restart                    {"ok": true}: the next message of each topic begins a new server
                             process's sequence (what it sent before this subscriber joined it
                             never arrives: that is no gap)
  stop                       {"done": true}, then it exits

Usage: llmd_indexer.py ENDPOINT [bind]. Prints "ready" on stderr once subscribed. A message
whose sequence is not the last one plus one counts as a gap, but the first after "restart".
"""
import json
import os
import select
import sys

import zmq

from kv_subscriber import receive

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy"))
from llmd_index import Index  # noqa: E402  deploy/llmd_index.py, beside the demo that uses it


def answer(index, counts, last_seq, line):
    verb, _, arg = line.strip().partition(" ")
    if verb == "count":
        return {"events": index.events, "messages": counts["messages"], "gaps": counts["gaps"],
                "skipped": index.skipped, "removed": index.removed,
                "skipped_hashes": index.skipped_hashes,
                "live": {m: len(h) for m, h in index.live.items()}}
    if verb == "score":
        q = json.loads(arg)
        return {"blocks": index.score(q["tokens"], q["model"], q["pod"])}
    if verb == "media":
        return index.media(json.loads(arg)["pod"])
    if verb == "restart":
        last_seq.clear()
        return {"ok": True}
    if verb == "stop":
        return {"done": True}
    return {"error": f"unknown command {verb!r}"}


def main():
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    sub.setsockopt(zmq.LINGER, 0)
    (sub.bind if sys.argv[2:] == ["bind"] else sub.connect)(sys.argv[1])
    print("ready", file=sys.stderr, flush=True)
    index = Index()
    counts = {"messages": 0, "gaps": 0}
    last_seq = {}
    while True:
        while sub.poll(0):
            msg = receive(sub)
            counts["messages"] += 1
            if msg["frames"] != 3:
                counts["gaps"] += 1
                continue
            prev = last_seq.get(msg["topic"])
            if prev is not None and msg["seq"] != prev + 1:
                counts["gaps"] += 1
            last_seq[msg["topic"]] = msg["seq"]
            index.apply(msg["topic"], msg["payload"])
        ready, _, _ = select.select([sys.stdin], [], [], 0.02)
        if not ready:
            continue
        line = sys.stdin.readline()
        if not line:
            return
        reply = answer(index, counts, last_seq, line)
        print(json.dumps(reply), flush=True)
        if "done" in reply:
            return


if __name__ == "__main__":
    main()
