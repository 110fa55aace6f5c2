#!/usr/bin/env python3
"""A KV-event subscriber as llm-d's and Dynamo's indexers read the stream (docs/kv-events.md).

Usage: kv_subscriber.py ENDPOINT SECONDS [bind]
Connects a ZMQ SUB socket to ENDPOINT (binds it with "bind": serve --kv-events-connect), collects messages until SECONDS pass or a line
"stop" arrives on stdin, then prints one JSON object: every message as
{"frames": n, "topic": str, "seq": int, "payload": the decoded msgpack, "payload_hex": its
bytes}. It checks nothing
itself: the test (kv_events.test.js) asserts on what it prints. It prints "ready" on stderr
once subscribed.
"""
import json
import select
import sys
import time

import msgpack
import zmq


def receive(sub):
    """One message as the test reads it; the frames are counted before anything is decoded."""
    frames = sub.recv_multipart()
    msg = {"frames": len(frames), "topic": frames[0].decode("utf-8", "replace")}
    if len(frames) == 3:
        msg["seq"] = int.from_bytes(frames[1], "big") if len(frames[1]) == 8 else -1
        msg["payload"] = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
        msg["payload_hex"] = frames[2].hex()  # the bytes as sent, for kv_replay.test.js
    return msg


def main():
    endpoint, seconds = sys.argv[1], float(sys.argv[2])
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.LINGER, 0)
    if sys.argv[3:] == ["bind"]:
        sub.bind(endpoint)
    else:
        sub.connect(endpoint)
    print("ready", file=sys.stderr, flush=True)
    messages = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sub.poll(50):
            messages.append(receive(sub))
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if ready and sys.stdin.readline().strip() == "stop":
            while sub.poll(300):  # what is already on its way
                messages.append(receive(sub))
            break
    json.dump({"messages": messages}, sys.stdout)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
