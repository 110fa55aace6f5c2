// API keys: requests need one, and each key's tenant has its own cache salt.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
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
});
