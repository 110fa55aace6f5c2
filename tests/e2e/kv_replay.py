#!/usr/bin/env python3
"""Asks a KV-event replay socket (serve --kv-events-replay, docs/kv-events.md "Replay") for the
messages from a sequence on, as vLLM's subscriber does after a gap.

Usage: kv_replay.py ENDPOINT START [SECONDS]
Connects a ZMQ DEALER socket to ENDPOINT, sends ["", START as 8 bytes big-endian] (what a REQ
socket sends), and reads replies until the end marker (sequence -1) or SECONDS (default 5)
pass. Prints one JSON object: {"replies": [{"frames": n, "empty": bool, "seq": int (signed),
"payload_hex": str}, ...]}; "empty" is whether the delimiter frame was empty. It checks nothing
itself: the test (kv_replay.test.js) asserts on what it prints.
"""
import json
import sys
import time

import zmq


def main():
    endpoint, start = sys.argv[1], int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    replies = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not dealer.poll(50):
            continue
        frames = dealer.recv_multipart()
        reply = {"frames": len(frames), "empty": frames[0] == b""}
        if len(frames) == 3:
            reply["seq"] = int.from_bytes(frames[1], "big", signed=True)
            reply["payload_hex"] = frames[2].hex()
        replies.append(reply)
        if reply.get("seq") == -1:
            break
    json.dump({"replies": replies}, sys.stdout)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
