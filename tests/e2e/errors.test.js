// Bad input gets a 4xx in the OpenAI error shape, and the server keeps serving.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import OpenAI from 'openai';
import { client, makeModel, post, startServer, tempDir } from './harness.js';

const CTX = 512;
const user = (content) => [{ role: 'user', content }];

function assertError(r, status, { param, code } = {}) {
  assert.equal(r.status, status, r.text);
  const e = r.json?.error;
  assert.ok(e && typeof e === 'object', `not the OpenAI error shape: ${r.text}`);
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e && 'code' in e, r.text);
  if (param !== undefined) assert.equal(e.param, param, r.text);
  if (code !== undefined) assert.equal(e.code, code, r.text);
}

describe('bad input', () => {
  let dir; let server;

  before(async () => {
    dir = tempDir('errors');
    server = await startServer({
      model: makeModel(dir), args: ['--ctx', String(CTX), '--max-body', '64K'],
    });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const chat = (body) => post(server, '/v1/chat/completions', body);

  it('malformed JSON', async () => {
    assertError(await chat('{"messages": [ {"role": "user", '), 400);
    assertError(await chat('null'), 400);
    assertError(await chat(''), 400);
  });

  it('wrong types', async () => {
    assertError(await chat({ messages: 'hello' }), 400, { param: 'messages' });
    assertError(await chat({ messages: [{ role: 'user', content: 42 }] }), 400, { param: 'messages' });
    assertError(await chat({ messages: [{ role: 'king', content: 'x' }] }), 400, { param: 'messages' });
    assertError(await chat({ messages: user('x'), temperature: 'warm' }), 400, { param: 'temperature' });
    assertError(await chat({ messages: user('x'), max_tokens: '5' }), 400, { param: 'max_tokens' });
    assertError(await chat({ messages: user('x'), stream: 'yes' }), 400, { param: 'stream' });
    assertError(await chat({ messages: user('x'), stop: [1, 2] }), 400, { param: 'stop' });
    assertError(await post(server, '/v1/completions', { prompt: { text: 'x' } }), 400, { param: 'prompt' });
    assertError(await post(server, '/tokenize', { content: 7 }), 400, { param: 'content' });
    assertError(await post(server, '/detokenize', { tokens: ['a'] }), 400, { param: 'tokens' });
  });

  it('missing fields', async () => {
    assertError(await chat({ model: 'tiny' }), 400, { param: 'messages' });
    assertError(await chat({ messages: [] }), 400, { param: 'messages' });
    assertError(await post(server, '/v1/completions', { model: 'tiny' }), 400, { param: 'prompt' });
  });

  it('an unknown model is 404 model_not_found, as OpenAI answers', async () => {
    assertError(await chat({ model: 'gpt-4o', messages: user('x') }), 404,
      { param: 'model', code: 'model_not_found' });
    await assert.rejects(
      client(server).chat.completions.create({ model: 'gpt-4o', messages: user('x') }),
      (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  });

  it('out-of-range parameters', async () => {
    assertError(await chat({ messages: user('x'), max_tokens: 0 }), 400, { param: 'max_tokens' });
    assertError(await chat({ messages: user('x'), max_tokens: CTX + 1 }), 400, { param: 'max_tokens' });
    assertError(await chat({ messages: user('x'), temperature: 2.5 }), 400, { param: 'temperature' });
    assertError(await chat({ messages: user('x'), temperature: -1 }), 400, { param: 'temperature' });
    assertError(await chat({ messages: user('x'), top_p: 1.1 }), 400, { param: 'top_p' });
    assertError(await chat({ messages: user('x'), n: 3 }), 400, { param: 'n' });
    assertError(await post(server, '/v1/completions', { prompt: [1, 2, 1e9] }), 400, { param: 'prompt' });
    assertError(await post(server, '/detokenize', { tokens: [-1] }), 400, { param: 'tokens' });
    await assert.rejects(
      client(server).chat.completions.create({ model: 'tiny', messages: user('x'), temperature: 9 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  });

  it('a prompt over the context is 400 context_length_exceeded', async () => {
    const long = 'lorem ipsum dolor sit amet '.repeat(200);
    assertError(await chat({ messages: user(long) }), 400, { code: 'context_length_exceeded' });
    assertError(await chat({ messages: user(long), stream: true }), 400, { code: 'context_length_exceeded' });
    assertError(await post(server, '/v1/completions', { prompt: long }), 400,
      { param: 'prompt', code: 'context_length_exceeded' });
  });

  it('a body over --max-body is 413', async () => {
    const big = 'x'.repeat(100 * 1024);
    assertError(await chat({ messages: user(big) }), 413);
  });

  it('unknown routes are 404 and wrong methods 405, in the same shape', async () => {
    const r1 = await fetch(`${server.url}/v1/nowhere`);
    assertError({ status: r1.status, text: '', json: await r1.json() }, 404);
    const r2 = await fetch(`${server.url}/v1/chat/completions`);
    assertError({ status: r2.status, text: '', json: await r2.json() }, 405);
  });

  it('still serves after all of that', async () => {
    const r = await client(server).chat.completions.create({
      model: 'tiny', messages: user('still there?'), max_tokens: 3,
    });
    assert.equal(r.choices.length, 1);
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
  });
});
