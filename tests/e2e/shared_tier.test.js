// The shared tier (--remote-cache) with a real redis-server: two prefixd servers on different
// cache dirs share one Redis. A conversation alternating between them reuses every turn's
// prefix from the other server, with output equal to a --no-cache server; tenants stay apart
// across servers; Redis killed -9 and restarted mid-trace, a corrupted value and a tiny
// maxmemory never fail a request.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import {
  client, makeModel, metric, metrics, remoteSettled, sleep, startRedis, startServer, tempDir,
  writeKeys,
  AGENT_TURNS as USERS,
} from './harness.js';

const SYSTEM = 'You are a build agent. Tools: read(path), write(path, text), run(cmd). '
  + 'Answer briefly and call one tool at a time. '.repeat(12);

const ask = (server, messages, apiKey) => client(server, apiKey).chat.completions.create(
  { model: 'tiny', messages, max_tokens: 8, temperature: 0 });

// A cache dir holding `secret` as its server secret: servers given the same one derive the
// same tenant salts from the same API keys (docs/deployment.md).
function cacheDirWithSecret(dir, name, secret) {
  const d = join(dir, name);
  mkdirSync(d, { recursive: true });
  if (secret) copyFileSync(secret, join(d, 'server-secret'));
  return d;
}

describe('two servers on one Redis', () => {
  let dir; let model; let redis; let a; let b; let cold;

  before(async () => {
    dir = tempDir('shared');
    model = makeModel(dir);
    redis = await startRedis();
    const shared = ['--remote-cache', redis.url];
    a = await startServer({ model, args: [...shared, '--cache-dir', join(dir, 'a')] });
    b = await startServer({ model, args: [...shared, '--cache-dir', join(dir, 'b')] });
    cold = await startServer({ model, args: ['--no-cache'] });
  });
  after(async () => {
    for (const s of [a, b, cold]) await s?.stop();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  // Runs the conversation turn by turn on alternating servers; each turn is checked against
  // the cold server. `between(turn)` runs before each turn. Returns each turn's usage. The
  // history holds fixed assistant text, not the model's answers: an answer's rows are cached
  // as they were decoded, which a cold prefill need not reproduce to the last bit on every
  // CPU (docs/architecture.md, "Exactness on each CPU"), so only prompts are reused here.
  async function trace(servers, between = async () => {}) {
    const messages = [{ role: 'system', content: SYSTEM }];
    const usages = [];
    for (let t = 0; t < USERS.length; t++) {
      await between(t);
      messages.push({ role: 'user', content: USERS[t] });
      const server = servers[t % servers.length];
      const got = await ask(server, messages);
      const want = await ask(cold, messages);
      assert.equal(got.choices[0].message.content, want.choices[0].message.content,
        `turn ${t}: output differs from a server with no cache`);
      usages.push(got.usage);
      await remoteSettled(server);
      messages.push({ role: 'assistant', content: `Noted: step ${t + 1} is done.` });
    }
    return usages;
  }

  it('the other server reuses each turn\'s prefix from the shared tier', async () => {
    const usages = await trace([a, b]);
    let reused = 0; let reusable = 0;
    for (let t = 1; t < usages.length; t++) {
      reusable += usages[t - 1].prompt_tokens;  // the whole previous prompt is a prefix
      reused += usages[t].prompt_tokens_details.cached_tokens;
    }
    assert.ok(reused / reusable >= 0.99, `reused ${reused} of ${reusable} reusable tokens`);
    for (const s of [a, b]) {
      const page = await metrics(s);
      assert.ok(metric(page, 'prefixd_cache_hits_total{tier="remote"}') >= 2,
        'every turn after the first restored from the shared tier');
      assert.equal(metric(page, 'prefixd_remote_up'), 1);
      assert.equal(metric(page, 'prefixd_remote_gets_total{outcome="corrupt"}'), 0);
    }
  });

  it('a corrupted value is a counted clean miss', async () => {
    const messages = [{ role: 'system', content: 'Corruption drill. '.repeat(40) },
      { role: 'user', content: 'Which records are bad?' }];
    await ask(a, messages);
    await remoteSettled(a);
    const keys = redis.cli(['--scan', '--pattern', 'pxd:1:*']).split('\n').filter(Boolean);
    assert.ok(keys.length > 0, 'records reached Redis');
    for (const k of keys) redis.cli(['-x', 'SET', k], 'garbage, not a record');
    const before = metric(await metrics(b), 'prefixd_remote_gets_total{outcome="corrupt"}');
    const got = await ask(b, messages);
    const want = await ask(cold, messages);
    assert.equal(got.choices[0].message.content, want.choices[0].message.content);
    assert.equal(got.usage.prompt_tokens_details.cached_tokens, 0, 'nothing garbled was restored');
    const after_ = metric(await metrics(b), 'prefixd_remote_gets_total{outcome="corrupt"}');
    assert.ok(after_ > before, 'the bad value was counted');
  });

  it('Redis killed -9 and restarted mid-trace fails no request', async () => {
    await redis.cli(['FLUSHALL']);
    const downsBefore = metric(await metrics(a), 'prefixd_remote_down_total');
    const usages = await trace([a, b], async (t) => {
      if (t === 2) await redis.kill();
      if (t === 4) {
        await redis.restart();
        await waitUp([a, b]);
      }
    });
    assert.equal(usages.length, USERS.length, 'every turn was answered');
    const page = await metrics(a);
    assert.ok(metric(page, 'prefixd_remote_down_total') > downsBefore, 'the outage was counted');
    assert.equal(metric(page, 'prefixd_remote_up'), 1, 'reconnected by itself');
    assert.match(a.log, /shared tier redis:\/\/127\.0\.0\.1:\d+\/0 is down/);
    const downLines = a.log.match(/shared tier .* is down/g).length;
    assert.ok(downLines <= 3, `logged once per change of state, not per request (${downLines})`);
    assert.ok(usages[5].prompt_tokens_details.cached_tokens >= usages[4].prompt_tokens,
      'after the restart the other server reuses the previous turn again');
  });

  // Sends a small request to each server until both report the shared tier up (reconnects
  // wait for a backoff of at most 5 s).
  async function waitUp(servers) {
    const deadline = Date.now() + 20000;
    for (const s of servers) {
      while (metric(await metrics(s), 'prefixd_remote_up') !== 1) {
        assert.ok(Date.now() < deadline, 'the shared tier never came back up');
        await ask(s, [{ role: 'user', content: 'ping' }]);
        await sleep(100);
      }
    }
  }
});

describe('tenants across servers', () => {
  let dir; let redis; let a; let b;

  before(async () => {
    dir = tempDir('shared-tenants');
    const model = makeModel(dir);
    redis = await startRedis();
    const keys = writeKeys(dir, ['sk-tenant-a', 'sk-tenant-b']);
    const admin = writeKeys(dir, ['sk-admin'], 'admin-keys.txt');
    const args = ['--remote-cache', redis.url, '--api-key-file', keys, '--admin-key-file', admin];
    a = await startServer({ model, args: [...args, '--cache-dir', join(dir, 'a')], adminKey: 'sk-admin' });
    // The same server secret on both: the same key is the same tenant on every server.
    const secret = join(dir, 'a', 'server-secret');
    b = await startServer({ model, args: [...args, '--cache-dir', cacheDirWithSecret(dir, 'b', secret)],
      adminKey: 'sk-admin' });
  });
  after(async () => {
    for (const s of [a, b]) await s?.stop();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a prefix cached for one key on one server is a hit for that key only', async () => {
    const messages = [{ role: 'system', content: 'Tenant drill. '.repeat(60) },
      { role: 'user', content: 'Whose cache is this?' }];
    const first = await ask(a, messages, 'sk-tenant-a');
    await remoteSettled(a);
    const other = await ask(b, messages, 'sk-tenant-b');
    assert.equal(other.usage.prompt_tokens_details.cached_tokens, 0, 'B never hits A\'s prefix');
    const same = await ask(b, messages, 'sk-tenant-a');
    assert.ok(same.usage.prompt_tokens_details.cached_tokens > 0,
      'A on the other server hits its own prefix');
    assert.equal(same.choices[0].message.content, first.choices[0].message.content);
  });
});

describe('a tiny maxmemory', () => {
  let dir; let redis; let a; let b; let cold;

  before(async () => {
    dir = tempDir('shared-evict');
    const model = makeModel(dir);
    // An empty Redis uses ~0.9 MB; each prompt below writes ~0.6 MB of records, so 12 prompts
    // overflow 4 MB about twice over while the newest few fit. (At 3 MB only the newest one or
    // two did, and Redis's LRU clock, a second wide, cannot tell apart keys written in the same
    // second: under a loaded CI run it evicted part of every prompt's records.)
    redis = await startRedis({ maxmemory: '4mb' });
    const shared = ['--remote-cache', redis.url];
    a = await startServer({ model, args: [...shared, '--cache-dir', join(dir, 'a')] });
    b = await startServer({ model, args: [...shared, '--cache-dir', join(dir, 'b')] });
    cold = await startServer({ model, args: ['--no-cache'] });
  });
  after(async () => {
    for (const s of [a, b, cold]) await s?.stop();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('evicts under Redis\'s own bound; every request is still served correctly', async () => {
    const prompts = [];
    for (let i = 0; i < 12; i++) {
      prompts.push([{ role: 'system', content: `Project ${i}. `.repeat(80) },
        { role: 'user', content: 'Summarize the project.' }]);
    }
    for (const p of prompts) await ask(a, p);
    await remoteSettled(a);
    const info = redis.cli(['INFO', 'stats']);
    assert.ok(Number(/evicted_keys:(\d+)/.exec(info)[1]) > 0, 'Redis evicted under maxmemory');
    for (const p of [...prompts].reverse()) {  // newest first: b's own writes evict too
      const got = await ask(b, p);
      const want = await ask(cold, p);
      assert.equal(got.choices[0].message.content, want.choices[0].message.content);
    }
    const page = await metrics(b);
    assert.equal(metric(page, 'prefixd_remote_gets_total{outcome="corrupt"}'), 0);
    assert.ok(metric(page, 'prefixd_cache_hits_total{tier="remote"}') >= 1,
      'the newest prompts survived in Redis');
  });
});
