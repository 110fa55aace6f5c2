#!/usr/bin/env python3
"""GB/s of one TCP stream over 127.0.0.1 (a sender process, a receiver reading into a reused
buffer): the ceiling of ggml-rpc's transport on this machine, for bench/run-backend-restore.sh.
Usage: loopback_bandwidth.py [MB] (default 1024); prints the GB/s."""
import multiprocessing
import socket
import sys
import time


def send(port, total, chunk):
    with socket.create_connection(("127.0.0.1", port)) as s:
        buf = b"\0" * chunk
        sent = 0
        while sent < total:
            s.sendall(buf)
            sent += chunk


def main():
    total = int(sys.argv[1] if len(sys.argv) > 1 else 1024) << 20
    chunk = 4 << 20
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    sender = multiprocessing.Process(target=send, args=(srv.getsockname()[1], total, chunk))
    sender.start()
    conn, _ = srv.accept()
    view = memoryview(bytearray(chunk))
    got = 0
    start = time.perf_counter()
    while got < total:
        n = conn.recv_into(view)
        if n == 0:
            break
        got += n
    elapsed = time.perf_counter() - start
    sender.join()
    print(f"{got / elapsed / 1e9:.2f}")


if __name__ == "__main__":
    main()
