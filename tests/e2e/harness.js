// Test harness: makes a tiny model with `prefixd make-test-model`, starts the real
// `prefixd serve` on 127.0.0.1 with a free port (--port 0; the port is read from the
// `prefixd listening` log line) and a temporary cache dir, waits for /health, and always
// stops it again (SIGTERM, then SIGKILL), even when a test fails or the runner dies.
// PREFIXD_E2E_LOG=1 prints each server's log when it stops.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';

export const BIN = process.env.PREFIXD_BIN;
if (!BIN) throw new Error('PREFIXD_BIN must name the prefixd binary');

const live = new Set();
process.on('exit', () => { for (const p of live) p.kill('SIGKILL'); });

export function tempDir(tag) {
  return mkdtempSync(join(tmpdir(), `prefixd-e2e-${tag}-`));
}

// A tiny random-weight qwen35 model (Qwen-style ChatML template); same seed, same model.
// `extra`: more make-test-model flags (--vocab qwen35 --template Qwen3.5-4B: the real ones).
export function makeModel(dir, seed = 1, extra = []) {
  const out = join(dir, 'tiny.gguf');
  execFileSync(BIN, ['make-test-model', '--arch', 'qwen35', '--shape', 'tiny',
    '--seed', String(seed), '--out', out, ...extra], { stdio: ['ignore', 'ignore', 'inherit'] });
  return out;
}

export function writeKeys(dir, keys, name = 'keys.txt') {
  const f = join(dir, name);
  writeFileSync(f, ['# test tenants', ...keys, ''].join('\n'));
  return f;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts `prefixd serve -m model` with extra flags; resolves once /health answers. With no
// `model`, `args` name the models (--models-dir: the router). `cacheDir`: a cache dir of the
// caller's (kept by stop()), else one in the server's temp dir. `adminKey`: the key the
// helpers below read /metrics with, for a server with keys on (it must be among its
// --admin-key-file's keys).
export async function startServer({ model, args = [], timeoutMs = 30000, cacheDir = '',
  adminKey = '' }) {
  const dir = tempDir('serve');
  const proc = spawn(BIN, ['serve', ...(model ? ['-m', model] : []), '--host', '127.0.0.1',
    '--port', '0', '--cache-dir', cacheDir || join(dir, 'cache'), '--threads', '1', ...args],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  live.add(proc);
  const server = { proc, dir, log: '', port: 0, exited: false, adminKey };
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => { server.log += d; });
  proc.on('exit', () => { server.exited = true; live.delete(proc); });
  // kill -9: the process dies at once, flushing nothing; its dir stays until stop().
  server.kill = async () => {
    if (!server.exited) proc.kill('SIGKILL');
    for (let i = 0; i < 100 && !server.exited; i++) await sleep(20);
  };
  server.stop = async () => {
    if (process.env.PREFIXD_E2E_LOG) console.error(server.log);  // the server's own log lines
    if (!server.exited) {
      proc.kill('SIGTERM');
      for (let i = 0; i < 100 && !server.exited; i++) await sleep(50);
      if (!server.exited) proc.kill('SIGKILL');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const deadline = Date.now() + timeoutMs;
    while (!server.port) {
      const m = /prefixd listening .*port=(\d+)/.exec(server.log);
      if (m) server.port = Number(m[1]);
      else if (server.exited || Date.now() > deadline) throw new Error(`serve did not start:\n${server.log}`);
      else await sleep(20);
    }
    server.url = `http://127.0.0.1:${server.port}`;
    for (;;) {
      try {
        const r = await fetch(`${server.url}/health`);
        if (r.ok) break;
      } catch { /* not accepting yet */ }
      if (Date.now() > deadline) throw new Error(`/health never answered:\n${server.log}`);
      await sleep(50);
    }
  } catch (e) {
    await server.stop();
    throw e;
  }
  return server;
}

export function client(server, apiKey = 'unused') {
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey, maxRetries: 0, timeout: 30000 });
}

// POST a raw body; returns { status, headers, json }.
export async function post(server, path, body, headers = {}) {
  const r = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, json, text };
}

// The server's /metrics page, read with its admin key where it has one; a page the server
// refuses is an error, never an empty page (a settle loop would wait out its bound on one).
export async function metrics(server) {
  const headers = server.adminKey ? { Authorization: `Bearer ${server.adminKey}` } : {};
  const r = await fetch(`${server.url}/metrics`, { headers });
  const text = await r.text();
  if (!r.ok) throw new Error(`GET /metrics answered ${r.status}: ${text}`);
  return text;
}

// The value of one sample ("name" or "name{labels}") on a /metrics page, or undefined.
export function metric(page, sample) {
  for (const line of page.split('\n')) {
    if (line.startsWith(sample + ' ')) return Number(line.slice(sample.length + 1));
  }
  return undefined;
}

// Waits until the disk tier's bytes stop growing (the write-behind queue has drained).
export async function diskSettled(server, ms = 10000) {
  const deadline = Date.now() + ms;
  let last = -1; let same = 0;
  while (Date.now() < deadline && same < 3) {
    const v = metric(await metrics(server), 'prefixd_cache_bytes{tier="disk"}') ?? 0;
    same = v > 0 && v === last ? same + 1 : 0;
    last = v;
    await sleep(100);
  }
  return last;
}

// Waits until `server` has written what it published to the shared tier: nothing queued and
// the written count steady for three polls (bounded); returns that count.
export async function remoteSettled(server, ms = 10000) {
  const deadline = Date.now() + ms;
  let last = -1; let same = 0;
  while (Date.now() < deadline && same < 3) {
    const page = await metrics(server);
    const written = metric(page, 'prefixd_remote_puts_total{outcome="written"}') ?? 0;
    const queued = metric(page, 'prefixd_remote_queue_depth') ?? 1;
    same = queued === 0 && written === last ? same + 1 : 0;
    last = written;
    await sleep(100);
  }
  return last;
}

// Starts another program (a load balancer, say) as a child that dies with the test process;
// its stdout and stderr collect in `.log`. `stop()`: SIGTERM, then SIGKILL after 5 s, bounded.
export function startProcess(cmd, args) {
  const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(proc);
  const child = { proc, log: '', exited: false };
  for (const s of [proc.stdout, proc.stderr]) {
    s.setEncoding('utf8');
    s.on('data', (d) => { child.log += d; });
  }
  proc.on('error', (e) => { child.log += `${cmd}: ${e.message}\n`; child.exited = true; });
  proc.on('exit', () => { child.exited = true; live.delete(proc); });
  child.stop = async () => {
    if (!child.exited) proc.kill('SIGTERM');
    for (let i = 0; i < 100 && !child.exited; i++) await sleep(50);
    if (!child.exited) proc.kill('SIGKILL');
    for (let i = 0; i < 100 && !child.exited; i++) await sleep(20);
  };
  return child;
}

// A TCP port on 127.0.0.1 that was free a moment ago.
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// redis-cli against a test Redis; returns its stdout (trimmed). Bounded by a 5 s timeout.
export function redisCli(port, args, input) {
  return execFileSync('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args],
    { input, timeout: 5000, encoding: 'utf8' }).trim();
}

// Starts a real redis-server on a free loopback port (or `port`), persistence off, in its own
// temp dir; resolves once it answers PING (at most 10 s). `kill()` is kill -9; `restart()`
// starts an empty one on the same port; `stop()` kills it and removes its dir.
export async function startRedis({ maxmemory = '', port = 0 } = {}) {
  const redis = { port: port || await freePort(), dir: tempDir('redis'), proc: null };
  redis.url = `redis://127.0.0.1:${redis.port}`;
  redis.start = async () => {
    const args = ['--port', String(redis.port), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', '--dir', redis.dir, '--daemonize', 'no', '--loglevel', 'warning'];
    if (maxmemory) args.push('--maxmemory', maxmemory, '--maxmemory-policy', 'allkeys-lru');
    const proc = spawn('redis-server', args, { stdio: 'ignore' });
    live.add(proc);
    proc.exited = false;
    proc.on('exit', () => { proc.exited = true; live.delete(proc); });
    redis.proc = proc;
    const deadline = Date.now() + 10000;
    for (;;) {
      try { if (redisCli(redis.port, ['PING']) === 'PONG') return; } catch { /* not yet */ }
      if (proc.exited || Date.now() > deadline) throw new Error('redis-server did not start');
      await sleep(50);
    }
  };
  redis.kill = async () => {
    const proc = redis.proc;
    if (!proc || proc.exited) return;
    proc.kill('SIGKILL');
    for (let i = 0; i < 100 && !proc.exited; i++) await sleep(20);
  };
  redis.restart = async () => { await redis.kill(); await redis.start(); };
  redis.stop = async () => { await redis.kill(); rmSync(redis.dir, { recursive: true, force: true }); };
  redis.cli = (args, input) => redisCli(redis.port, args, input);
  await redis.start();
  return redis;
}

// The user turns of a small agent session (tool results coming back), for tests that replay one.
export const AGENT_TURNS = ['Run the tests and tell me what failed.',
  'Tool result: 2 failures in disk_store_test. Fix them.',
  'Tool result: wrote src/store/disk_store.cpp. Run the tests again.',
  'Tool result: all 41 tests passed. Commit it.',
  'Tool result: committed 1a2b3c. Now update the docs.',
  'Tool result: docs/cache.md updated. Anything else?'];

export { sleep };
