// API keys: requests need one, and each key's tenant has its own cache salt.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { client, makeModel, post, sleep, startServer, tempDir, writeKeys } from './harness.js';

describe('API keys', () => {
  let dir; let server;

  before(async () => {
    dir = tempDir('tenancy');
    server = await startServer({
      model: makeModel(dir),
      args: ['--slots', '4', '--ctx', '2048',
        '--api-key-file', writeKeys(dir, ['sk-tenant-a', 'sk-tenant-b'])],
    });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const request = {
    model: 'tiny', max_tokens: 3,
    messages: [{ role: 'system', content: 'A long shared system prompt. '.repeat(4) },
      { role: 'user', content: 'What is cached?' }],
  };

  it('refuses requests without a valid key with 401', async () => {
    const r = await post(server, '/v1/chat/completions', request);
    assert.equal(r.status, 401);
    assert.equal(r.json.error.code, 'invalid_api_key');
    await assert.rejects(client(server, 'sk-wrong').chat.completions.create(request),
      (e) => e instanceof OpenAI.AuthenticationError);
    assert.equal((await post(server, '/tokenize', { content: 'x' })).status, 401);
    assert.equal((await fetch(`${server.url}/health`)).status, 200, '/health stays open');
  });

  it('gives each key its own cache: a prefix cached for A is not a hit for B', async () => {
    const a = client(server, 'sk-tenant-a');
    const b = client(server, 'sk-tenant-b');
    const first = await a.chat.completions.create(request);
    assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
    const again = await a.chat.completions.create(request);
    assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, 'A hits its own prefix');
    const other = await b.chat.completions.create(request);
    assert.equal(other.usage.prompt_tokens_details.cached_tokens, 0, 'B never hits A\'s prefix');
    const otherAgain = await b.chat.completions.create(request);
    assert.ok(otherAgain.usage.prompt_tokens_details.cached_tokens > 0, 'B hits its own prefix');
    assert.match(server.log, /tenant=[0-9a-f]{8} /);
    assert.doesNotMatch(server.log, /sk-tenant/, 'keys never reach the log');
  });

  it('shows each tenant only its own slot sessions', async () => {
    const stats = async (key) => (await (await fetch(`${server.url}/v1/cache/stats`,
      { headers: { Authorization: `Bearer ${key}` } })).json()).slots;
    const [a, b] = [await stats('sk-tenant-a'), await stats('sk-tenant-b')];
    const sessions = (slots) => slots.filter((s) => s.session !== null).map((s) => s.session);
    // Both tenants ran the same chat (above): each sees its own slot's session, never the
    // other's, though both slots hold the same tokens.
    assert.equal(sessions(a).length, 1, JSON.stringify(a));
    assert.equal(sessions(b).length, 1, JSON.stringify(b));
    assert.notEqual(sessions(a)[0], sessions(b)[0], 'the sessions differ by tenant');
    for (let i = 0; i < a.length; i++) {
      assert.ok(a[i].session === null || b[i].session === null, `slot ${i} shown to both`);
      if (a[i].session === null) assert.equal(a[i].n_tokens, 0, 'no length of another tenant');
    }
  });
});

describe('admin keys and x-api-key', () => {
  let dir; let server;

  before(async () => {
    dir = tempDir('admin');
    const admin = join(dir, 'admin.txt');
    writeFileSync(admin, '# admins\nsk-admin\n');
    server = await startServer({
      model: makeModel(dir),
      args: ['--ctx', '2048', '--api-key-file', writeKeys(dir, ['sk-tenant']),
        '--admin-key-file', admin],
    });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('lets only admin keys clear the cache', async () => {
    const tenant = await post(server, '/v1/cache/clear', '', { Authorization: 'Bearer sk-tenant' });
    assert.equal(tenant.status, 403);
    assert.equal(tenant.json.error.code, 'admin_key_required');
    assert.equal((await post(server, '/v1/cache/clear', '')).status, 401);
    const admin = await post(server, '/v1/cache/clear', '', { 'x-api-key': 'sk-admin' });
    assert.equal(admin.status, 200);
    assert.equal(admin.json.cleared, true);
  });

  it('takes the key from x-api-key as from Authorization', async () => {
    const body = { max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
    assert.equal((await post(server, '/v1/chat/completions', body, { 'x-api-key': 'sk-tenant' })).status, 200);
    const wrong = await post(server, '/v1/chat/completions', body, { 'x-api-key': 'sk-nope' });
    assert.equal(wrong.status, 401);
    assert.match(wrong.json.error.message, /x-api-key/);
    assert.equal((await client(server, 'sk-admin').chat.completions.create(body)).object,
      'chat.completion', 'an admin key is a tenant too');
  });
});

describe('what one tenant sees of another', () => {
  // Under this server secret the two tenant keys' 8-hex-digit log labels collide (21e90f31,
  // found by a birthday search): everything below is scoped by the tenant, not by its label.
  const SECRET = 'label-collision-test-secret-0032';
  const A = 'tenant-17198'; const B = 'tenant-20660'; const ADMIN = 'sk-admin';
  let dir; let server;

  before(async () => {
    dir = tempDir('isolation');
    const cacheDir = join(dir, 'cache');
    mkdirSync(cacheDir, { mode: 0o700 });
    writeFileSync(join(cacheDir, 'server-secret'), SECRET, { mode: 0o600 });
    const admin = join(dir, 'admin.txt');
    writeFileSync(admin, `${ADMIN}\n`);
    server = await startServer({
      model: makeModel(dir), cacheDir,
      args: ['--slots', '4', '--ctx', '2048', '--api-key-file', writeKeys(dir, [A, B]),
        '--admin-key-file', admin],
    });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const auth = (key) => ({ Authorization: `Bearer ${key}` });
  const get = async (path, key) => {
    const r = await fetch(`${server.url}${path}`, { headers: key ? auth(key) : {} });
    const text = await r.text();
    const json = r.headers.get('content-type')?.includes('json') ? JSON.parse(text) : null;
    return { status: r.status, text, json };
  };
  const getJson = async (path, key) => {
    const r = await get(path, key);
    assert.equal(r.status, 200, `${path}: ${r.text}`);
    return r.json;
  };
  // A tenant's stats once its disk tier share has stopped growing (writes go behind).
  const settledStats = async (key) => {
    let last = ''; let same = 0; let stats;
    for (let i = 0; i < 100 && same < 3; i++) {
      stats = await getJson('/v1/cache/stats', key);
      const now = JSON.stringify(stats.tiers);
      same = now === last ? same + 1 : 0;
      last = now;
      await sleep(100);
    }
    return stats;
  };
  const chat = (key, user) => client(server, key).chat.completions.create({
    model: 'tiny', max_tokens: 3,
    messages: [{ role: 'system', content: 'A long shared system prompt. '.repeat(4) },
      { role: 'user', content: user }],
  });

  it('the two keys share a log label (the premise of what follows)', async () => {
    const [a, b] = [await getJson('/v1/cache/stats', A), await getJson('/v1/cache/stats', B)];
    assert.equal(a.caller.tenant, '21e90f31');
    assert.equal(b.caller.tenant, a.caller.tenant);
  });

  it('a tenant\'s cache counters and stats do not move with another tenant\'s requests', async () => {
    await chat(B, 'What is cached?');
    const bCounters = await getJson('/v1/cache', B);
    const bStats = await settledStats(B);
    const everyone = await getJson('/v1/cache', ADMIN);
    assert.equal(bCounters.requests, 1);

    const sum = { prompt: 0, cached: 0, generated: 0 };
    for (const user of ['What is cached?', 'What is cached, again?']) {
      const r = await chat(A, user);
      sum.prompt += r.usage.prompt_tokens;
      sum.cached += r.usage.prompt_tokens_details.cached_tokens;
      sum.generated += r.usage.completion_tokens;
    }
    assert.ok(sum.cached > 0, 'A hit its own prefix');
    await settledStats(A);

    assert.deepEqual(await getJson('/v1/cache', B), bCounters, 'B\'s counters moved with A\'s requests');
    const bAfter = await getJson('/v1/cache/stats', B);
    assert.deepEqual(bAfter.totals, bStats.totals, 'B\'s totals moved with A\'s requests');
    assert.deepEqual(bAfter.tiers, bStats.tiers, 'B\'s share of the tiers moved with A\'s requests');
    const a = await getJson('/v1/cache', A);
    assert.equal(a.requests, 2);
    assert.equal(a.prompt_tokens, sum.prompt);
    assert.equal(a.cached_tokens, sum.cached);
    assert.equal(a.generated_tokens, sum.generated);
    const all = await getJson('/v1/cache', ADMIN);
    assert.equal(all.requests, everyone.requests + 2, 'the admin sees every tenant\'s');
    assert.equal(all.prompt_tokens, everyone.prompt_tokens + sum.prompt);
    assert.ok('bytes_by_tier' in all);
    // Nothing every tenant's traffic moves is shown to a tenant.
    assert.equal(bCounters.scope, 'tenant');
    for (const field of ['bytes_by_tier', 'evictions_by_tier', 'slots_busy', 'queue_depth']) {
      assert.ok(!(field in bCounters), `a tenant is shown ${field}`);
    }
    assert.equal(bStats.queue_depth, null);
    assert.equal(bStats.tiers.ram.evictions, null);
  });

  it('serves /metrics to admin keys only, and /v1/models names no file', async () => {
    const tenant = await get('/metrics', A);
    assert.equal(tenant.status, 403);
    assert.equal(tenant.json.error.code, 'admin_key_required');
    assert.equal((await get('/metrics')).status, 401);
    const page = await get('/metrics', ADMIN);
    assert.equal(page.status, 200);
    assert.match(page.text, /^prefixd_completions_total \d+$/m);
    const models = await get('/v1/models', A);
    assert.equal(models.status, 200);
    assert.equal(models.json.data[0].id, 'tiny');
    assert.ok(!models.text.includes(dir) && !models.text.includes('.gguf'), models.text);
  });

  it('shows each tenant its own recent requests, numbered by its own count', async () => {
    const b = (await getJson('/v1/requests/recent', B)).requests;
    assert.equal(b.length, 1, JSON.stringify(b));
    assert.equal(b[0].seq, 1);
    const a = (await getJson('/v1/requests/recent', A)).requests;
    assert.deepEqual(a.map((r) => r.seq), [1, 2]);
    await chat(B, 'And now?');
    const next = (await getJson('/v1/requests/recent?after=1', B)).requests;
    assert.deepEqual(next.map((r) => r.seq), [2], 'B\'s second request is its number 2');
    const all = await getJson('/v1/requests/recent', ADMIN);
    assert.equal(all.scope, 'all');
    assert.equal(all.requests.length, 4);
  });
});
