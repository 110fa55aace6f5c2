// API keys: requests need one, and each key's tenant has its own cache salt.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { client, makeModel, post, startServer, tempDir, writeKeys } from './harness.js';

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
