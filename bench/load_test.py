#!/usr/bin/env python3
"""Load test: many concurrent clients against `prefixd serve` with a small queue.

Starts `prefixd serve` (a tiny generated model unless --model is given) with --slots and
--max-queue, runs --clients closed-loop clients for --seconds, each sending chat completions
(a shared system prompt, a per-client user turn, some streamed), then checks:

  * every request got a result (200 with a parsable body) or 503 with Retry-After; anything
    else — another status, a reset connection, a client timeout — is a failure;
  * the server's RSS, sampled every 100 ms, stays under the bound
        idle RSS after start (model + contexts + runtime) + --ram-budget + --margin;
    and the RAM tier's bytes (GET /v1/cache) stay under --ram-budget;
  * no disk record is lost or damaged: after SIGTERM (which flushes the disk tier) the store
    holds at least the bytes the server reported for its disk tier, nothing was dropped when it
    was reopened, `prefixd cache verify` is clean, and a restarted server restores prompts of the
    run from disk.

Writes <out>/load-<label>.json and .md (p50/p95/p99 latency of results and of 503s, counts, RSS).
Exit code 0 when every check passes, 1 otherwise. Binds 127.0.0.1 only.

Usage: bench/load_test.py --bin build/bin/prefixd [--seconds 60] [--clients 64] [--slots 2]
       [--max-queue 8] [--ram-budget 64M] [--margin-mib 128] [--model F.gguf] [--out DIR]
       [--label NAME] [--keep-alive]
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SYSTEM = ("You are a coding agent. Tools: read_file(path), write_file(path, text), "
          "run(cmd). Answer tersely. ") * 6


def size_bytes(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)(?:i?B)?", text.strip(), re.I)
    if not m:
        raise ValueError(f"bad size {text}")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))
    return s[k]


class Server:
    def __init__(self, args, model, cache_dir, log_path):
        cmd = [args.bin, "serve", "-m", model, "--alias", "load", "--host", "127.0.0.1",
               "--port", "0", "--cache-dir", cache_dir, "--slots", str(args.slots),
               "--max-queue", str(args.max_queue), "--ctx", str(args.ctx),
               "--ram-budget", args.ram_budget, "--block-size", str(args.block_size),
               "--threads", str(args.threads)]
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = self._wait_port()
        self._wait_health()

    def _wait_port(self):
        deadline = time.time() + 120
        while time.time() < deadline:
            with open(self.log_path) as f:
                m = re.search(r"prefixd listening .*port=(\d+)", f.read())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("serve did not start:\n" + open(self.log_path).read()[-2000:])

    def _wait_health(self):
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("/health never answered")

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = -9
        self.log.close()
        return rc


def chat_body(client, turn, stream):
    return json.dumps({
        "model": "load", "max_tokens": 8 + (turn % 9), "temperature": 0, "stream": stream,
        "messages": [{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": f"client {client} turn {turn}: list files"}]})


def one_request(port, body, stream, timeout, conn=None):
    """Returns (status, retry_after, ok_body, seconds, conn)."""
    t0 = time.monotonic()
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if conn is None:
        headers["Connection"] = "close"
    c.request("POST", "/v1/chat/completions", body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    seconds = time.monotonic() - t0
    ok = False
    if r.status == 200:
        if stream:
            events = [e[6:] for e in data.decode("utf-8", "replace").split("\n\n") if e.startswith("data: ")]
            ok = bool(events) and events[-1] == "[DONE]" and all(
                e == "[DONE]" or json.loads(e) is not None for e in events)
        else:
            ok = "choices" in json.loads(data)
    else:
        try:
            ok = "error" in json.loads(data)
        except ValueError:
            ok = False
    if conn is None or r.getheader("Connection", "").lower() == "close":
        c.close()
        c = None
    return r.status, r.getheader("Retry-After"), ok, seconds, c


def run_clients(args, port, stats):
    deadline = time.monotonic() + args.seconds
    lock = threading.Lock()

    def client(i):
        rng = random.Random(args.seed * 1000 + i)
        conn = None
        turn = 0
        while time.monotonic() < deadline:
            stream = rng.random() < 0.3
            body = chat_body(i, turn, stream)
            turn += 1
            try:
                status, retry, ok, secs, conn = one_request(
                    port, body, stream, args.request_timeout, conn if args.keep_alive else None)
                if not args.keep_alive:
                    conn = None
            except Exception as e:  # reset, timeout, bad framing: all failures
                conn = None
                with lock:
                    stats["failures"].append(f"client {i}: {type(e).__name__}: {e}")
                continue
            with lock:
                stats["by_status"][status] = stats["by_status"].get(status, 0) + 1
                if status == 200 and ok:
                    stats["latency_ok"].append(secs)
                elif status == 503 and retry and ok:
                    stats["latency_503"].append(secs)
                else:
                    stats["failures"].append(f"client {i}: status {status} retry={retry} ok={ok}")
            if status == 503 and retry:
                time.sleep(float(retry) * rng.uniform(0.2, 0.6))  # a client that honours it

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def sample_rss(pid, stop, out, server_port, ram_out):
    n = 0
    while not stop.is_set():
        out.append(rss_bytes(pid))
        n += 1
        if n % 10 == 0:  # the RAM tier's own count, once a second
            try:
                c = http.client.HTTPConnection("127.0.0.1", server_port, timeout=10)
                c.request("GET", "/v1/cache")
                ram_out.append(json.loads(c.getresponse().read())["bytes_by_tier"].get("ram", 0))
                c.close()
            except Exception:
                pass
        stop.wait(0.1)


def disk_checks(args, model, work, reported_disk_bytes):
    cache = os.path.join(work, "cache")
    stats = subprocess.run([args.bin, "cache", "stats", "--cache-dir", cache],
                           capture_output=True, text=True)
    verify = subprocess.run([args.bin, "cache", "verify", "--cache-dir", cache],
                            capture_output=True, text=True)
    m = re.search(r"bytes:\s+(\d+)", stats.stdout)
    store_bytes = int(m.group(1)) if m else -1
    m = re.search(r"records:\s+(\d+)", stats.stdout)
    records = int(m.group(1)) if m else -1
    # Restart on the same directory: prompts of the run must restore from disk.
    server = Server(args, model, cache, os.path.join(work, "server2.log"))
    hits = 0
    for i in range(4):
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        c.request("POST", "/v1/chat/completions", body=chat_body(i, 0, False),
                  headers={"Content-Type": "application/json"})
        usage = json.loads(c.getresponse().read())["usage"]
        c.close()
        hits += usage["prompt_tokens_details"]["cached_tokens"] > 0
    server.stop()
    return {"store_records": records, "store_bytes": store_bytes,
            "reported_disk_bytes": reported_disk_bytes,
            "dropped_at_open": "dropped" in stats.stdout,
            "verify_rc": verify.returncode, "verify": verify.stdout.strip(),
            "restart_hits_of_4": hits}


def write_report(args, result, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"load-{args.label}")
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    r = result
    ms = lambda v: "n/a" if v is None else f"{1000 * v:.0f}"
    lines = [
        f"# Load test: {args.clients} clients, {args.slots} slots, --max-queue {args.max_queue}, "
        f"{args.seconds} s",
        "",
        f"Model: `{r['model']}` ({r['model_bytes'] / 2**20:.1f} MiB), ctx {args.ctx} per slot, "
        f"--ram-budget {args.ram_budget}, block size {args.block_size}, "
        f"{'keep-alive' if args.keep_alive else 'one connection per request'}; "
        f"machine: {os.cpu_count()} cores. `bench/load_test.py` wrote this.",
        "",
        "| | count | p50 ms | p95 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
        f"| results (200) | {len(r['latency_ok_s'])} | {ms(r['p50_ok_s'])} | {ms(r['p95_ok_s'])} | "
        f"{ms(r['p99_ok_s'])} |",
        f"| overloaded (503 + Retry-After) | {len(r['latency_503_s'])} | {ms(r['p50_503_s'])} | "
        f"{ms(r['p95_503_s'])} | {ms(r['p99_503_s'])} |",
        "",
        f"Statuses: {r['by_status']}; failures (other status, reset, timeout): "
        f"{len(r['failures'])}.",
        "",
        f"RSS: idle after start {r['rss_idle'] / 2**20:.0f} MiB, peak {r['rss_peak'] / 2**20:.0f} "
        f"MiB, bound {r['rss_bound'] / 2**20:.0f} MiB (idle + RAM budget + {args.margin_mib} MiB "
        f"margin). RAM tier peak {r['ram_tier_peak'] / 2**20:.1f} MiB of "
        f"{r['ram_budget'] / 2**20:.0f} MiB.",
        "",
        f"Disk: {r['disk']['store_records']} records, {r['disk']['store_bytes']} bytes on disk "
        f"after SIGTERM (server reported {r['disk']['reported_disk_bytes']} before it); dropped "
        f"at reopen: {r['disk']['dropped_at_open']}; `cache verify`: {r['disk']['verify']!r}; "
        f"restarted server restored {r['disk']['restart_hits_of_4']} of 4 prompts.",
        "",
        "Checks: " + ("all passed" if r["passed"] else "FAILED: " + "; ".join(r["problems"])),
        "",
    ]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines))
    return base


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", default="")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--max-queue", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ram-budget", default="64M")
    ap.add_argument("--margin-mib", type=int, default=128)
    ap.add_argument("--request-timeout", type=float, default=120)
    ap.add_argument("--keep-alive", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--label", default="tiny")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    ap.add_argument("--min-ok", type=int, default=1, help="results (200) required to pass")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="prefixd-load.")
    try:
        model = args.model
        if not model:
            model = os.path.join(work, "tiny.gguf")
            subprocess.run([args.bin, "make-test-model", "--arch", "llama", "--shape", "tiny",
                            "--out", model], check=True, stdout=subprocess.DEVNULL)
        server = Server(args, model, os.path.join(work, "cache"), os.path.join(work, "server.log"))
        # One request first, so that the idle RSS includes the contexts' buffers.
        one_request(server.port, chat_body(-1, 0, False), False, 120)
        time.sleep(0.5)
        rss_idle = rss_bytes(server.proc.pid)
        stats = {"by_status": {}, "latency_ok": [], "latency_503": [], "failures": []}
        rss, ram = [], []
        stop = threading.Event()
        sampler = threading.Thread(target=sample_rss,
                                   args=(server.proc.pid, stop, rss, server.port, ram))
        sampler.start()
        run_clients(args, server.port, stats)
        stop.set()
        sampler.join()
        time.sleep(2)  # write-behind settles
        cache_stats = json.loads(server.get("/v1/cache")[1])
        reported_disk = cache_stats["bytes_by_tier"].get("disk", 0)
        serve_rc = server.stop()
        disk = disk_checks(args, model, work, reported_disk)

        budget = size_bytes(args.ram_budget)
        bound = rss_idle + budget + args.margin_mib * 2**20
        problems = []
        if stats["failures"]:
            problems.append(f"{len(stats['failures'])} requests without a result or 503: "
                            + "; ".join(stats["failures"][:3]))
        if len(stats["latency_ok"]) < args.min_ok:
            problems.append(f"only {len(stats['latency_ok'])} results")
        if max(rss, default=0) > bound:
            problems.append(f"RSS peak {max(rss)} over the bound {bound}")
        if max(ram, default=0) > budget:
            problems.append(f"RAM tier {max(ram)} over the budget {budget}")
        if serve_rc != 0:
            problems.append(f"serve exited {serve_rc} on SIGTERM")
        if disk["verify_rc"] != 0 or disk["dropped_at_open"]:
            problems.append("disk records damaged: " + disk["verify"])
        if disk["store_bytes"] < reported_disk:
            problems.append(f"disk holds {disk['store_bytes']} bytes, server reported {reported_disk}")
        if disk["restart_hits_of_4"] == 0:
            problems.append("a restarted server restored nothing from disk")
        lat_ok, lat_503 = stats["latency_ok"], stats["latency_503"]
        result = {
            "model": os.path.basename(model), "model_bytes": os.path.getsize(model),
            "args": vars(args), "by_status": stats["by_status"],
            "failures": stats["failures"][:50], "n_failures": len(stats["failures"]),
            "latency_ok_s": lat_ok, "latency_503_s": lat_503,
            "p50_ok_s": percentile(lat_ok, 50), "p95_ok_s": percentile(lat_ok, 95),
            "p99_ok_s": percentile(lat_ok, 99), "p50_503_s": percentile(lat_503, 50),
            "p95_503_s": percentile(lat_503, 95), "p99_503_s": percentile(lat_503, 99),
            "rss_idle": rss_idle, "rss_peak": max(rss, default=0), "rss_bound": bound,
            "ram_budget": budget, "ram_tier_peak": max(ram, default=0),
            "engine_stats": cache_stats, "disk": disk, "problems": problems,
            "passed": not problems}
        base = write_report(args, result, args.out)
        print(open(base + ".md").read())
        return 0 if not problems else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
