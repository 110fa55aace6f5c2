// Off-host tensors (docs/backends.md): `prefixd serve --rpc` with every layer, the KV cache and
// the recurrent states on a real llama.cpp rpc-server (another process, over TCP), as on a GPU.
// The cache reuses across turns with answers equal to a cold server's on its own rpc-server
// (one rpc-server serves one client process at a time). Then the rpc-server is killed in the
// middle of a request: that request fails, the server stays up reporting the backend lost
// (llama.cpp would abort; patch 0008), and a server restarted on the same cache dir and a new
// rpc-server restores the conversation from disk, with the answer a cold run gives: nothing
// computed after the loss was published.
// Last, two servers on their own rpc-servers share a Redis: the second restores the first's
// prefix from the shared tier into its rpc-server.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import {
  client, diskSettled, freePort, makeModel, metric, metrics, post, remoteSettled, sleep, startProcess,
  startRedis, startServer, tempDir,
} from './harness.js';

const RPC_SERVER = process.env.PREFIXD_RPC_SERVER;
if (!RPC_SERVER) throw new Error('PREFIXD_RPC_SERVER must name llama.cpp\'s rpc-server');

const SYSTEM = 'You are a build agent. Tools: read(path), write(path, text), run(cmd). '
  + 'Answer briefly and call one tool at a time. '.repeat(10);
const turn1 = [
  { role: 'system', content: SYSTEM },
  { role: 'user', content: 'Run the tests and tell me what failed.' },
];
const turn2 = [
  ...turn1,
  { role: 'assistant', content: 'Running the tests now.' },
  { role: 'user', content: 'Tool result: 2 failures in disk_store_test. Fix them.' },
];
const ask = (openai, messages) => openai.chat.completions.create(
  { model: 'tiny', messages, max_tokens: 8, temperature: 0 });

// Whether 127.0.0.1:port accepts a TCP connection now.
const accepts = (port) => new Promise((resolve) => {
  const sock = connect({ host: '127.0.0.1', port });
  sock.on('connect', () => { sock.destroy(); resolve(true); });
  sock.on('error', () => resolve(false));
});

// A real rpc-server on a free loopback port; resolves once it accepts connections (10 s max;
// its banner is printed through a pipe's buffer, so the port is what is watched).
async function startRpcServer() {
  const port = await freePort();
  const rpc = startProcess(RPC_SERVER, ['-H', '127.0.0.1', '-p', String(port), '-t', '1']);
  rpc.endpoint = `127.0.0.1:${port}`;
  const deadline = Date.now() + 10000;
  while (!await accepts(port)) {
    if (rpc.exited || Date.now() > deadline) throw new Error(`rpc-server did not start:\n${rpc.log}`);
    await sleep(50);
  }
  return rpc;
}

describe('serve --rpc: the tensors in a real rpc-server', () => {
  let dir; let model; let cacheDir;
  const stops = [];

  before(() => {
    dir = tempDir('rpc');
    model = makeModel(dir);
    cacheDir = join(dir, 'cache');
  });
  after(async () => {
    for (const stop of stops.reverse()) await stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('reuses across turns, reports a lost rpc-server without dying, restores from disk after', async () => {
    const rpcWarm = await startRpcServer();
    const rpcCold = await startRpcServer();
    stops.push(() => rpcWarm.stop(), () => rpcCold.stop());
    const rpcArgs = (rpc) => ['--rpc', rpc.endpoint, '--gpu-layers', '-1'];
    const cold = await startServer({ model, args: ['--no-cache', ...rpcArgs(rpcCold)] });
    stops.push(() => cold.stop());
    const warm = await startServer({ model, args: ['--cache-dir', cacheDir, ...rpcArgs(rpcWarm)] });
    stops.push(() => warm.stop());
    assert.match(warm.log, /devices="?RPC0 \(127\.0\.0\.1:\d+\)/, 'the layers are on the rpc-server');

    const r1 = await ask(client(warm), turn1);
    const c1 = await ask(client(cold), turn1);
    assert.equal(r1.choices[0].message.content, c1.choices[0].message.content);
    const r2 = await ask(client(warm), turn2);
    const c2 = await ask(client(cold), turn2);
    assert.equal(r2.choices[0].message.content, c2.choices[0].message.content);
    assert.ok(r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens,
      `turn 2 reused ${r2.usage.prompt_tokens_details.cached_tokens} of turn 1's ${r1.usage.prompt_tokens}`);
    assert.ok(await diskSettled(warm) > 0, 'nothing reached the disk tier');

    // The rpc-server dies while the server generates (killed once the first tokens streamed):
    // that answer never ends, the server stays up and says the backend is lost (/health 503,
    // every request an error naming the rpc-server), and nothing computed after is published.
    const res = await fetch(`${warm.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', messages: turn2, max_tokens: 2000, temperature: 0,
        ignore_eos: true, stream: true }),
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    let streamed = new TextDecoder().decode((await reader.read()).value);
    rpcWarm.proc.kill('SIGKILL');
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        streamed += new TextDecoder().decode(value);
      }
    } catch { /* the connection was cut */ }
    assert.doesNotMatch(streamed, /"finish_reason":"length"/, 'the answer cannot have completed');
    assert.match(streamed, /backend lost/, 'the stream ends with the error');
    const health = await fetch(`${warm.url}/health`);
    assert.equal(health.status, 503);
    assert.equal((await health.json()).status, 'backend_lost');
    const next = await post(warm, '/v1/chat/completions', { model: 'tiny', messages: turn1, max_tokens: 4 });
    assert.equal(next.status, 500);
    assert.match(next.json.error.message, new RegExp(`backend lost: the rpc-server at ${rpcWarm.endpoint}`));
    assert.ok(!warm.exited, 'the server keeps running');
    assert.match(warm.log, /its devices are lost/);
    await warm.stop();

    // A new rpc-server, the same cache dir: turn 2's prefix comes back from disk.
    const rpcAgain = await startRpcServer();
    stops.push(() => rpcAgain.stop());
    const again = await startServer({ model, args: ['--cache-dir', cacheDir, ...rpcArgs(rpcAgain)] });
    stops.push(() => again.stop());
    const r3 = await ask(client(again), turn2);
    assert.equal(r3.choices[0].message.content, c2.choices[0].message.content);
    assert.ok(r3.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens,
      `restored ${r3.usage.prompt_tokens_details.cached_tokens} after the restart`);
    assert.equal(metric(await metrics(again), 'prefixd_cache_hits_total{tier="disk"}'), 1);
  });

  it('two servers on their own rpc-servers share a prefix through Redis', async () => {
    const redis = await startRedis();
    stops.push(() => redis.stop());
    const rpcs = [await startRpcServer(), await startRpcServer(), await startRpcServer()];
    for (const r of rpcs) stops.push(() => r.stop());
    const shared = (rpc, name) => ['--rpc', rpc.endpoint, '--gpu-layers', '-1', '--remote-cache',
      redis.url, '--cache-dir', join(dir, `shared-${name}`)];
    const a = await startServer({ model, args: shared(rpcs[0], 'a') });
    stops.push(() => a.stop());
    const b = await startServer({ model, args: shared(rpcs[1], 'b') });
    stops.push(() => b.stop());
    const cold = await startServer({ model, args: ['--no-cache', '--rpc', rpcs[2].endpoint, '-ngl', '-1'] });
    stops.push(() => cold.stop());
    const r1 = await ask(client(a), turn1);
    assert.ok(await remoteSettled(a) > 0, 'nothing reached the shared tier');
    const r2 = await ask(client(b), turn2);
    const c2 = await ask(client(cold), turn2);
    assert.equal(r2.choices[0].message.content, c2.choices[0].message.content);
    assert.equal(r2.usage.prompt_tokens_details.cached_tokens, r1.usage.prompt_tokens,
      'the whole first prompt came from the shared tier into the other server\'s rpc-server');
    assert.equal(metric(await metrics(b), 'prefixd_cache_hits_total{tier="remote"}'), 1);
  });
});
