// Client disconnects cancel generation and free the slot; a full queue answers 503.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { client, makeModel, metric, metrics, post, sleep, startServer, tempDir } from './harness.js';

// ignore_eos: the tiny model may end its answer at once; these tests need a long generation.
const LONG = { model: 'tiny', max_tokens: 3500, temperature: 0, ignore_eos: true };
const user = (content) => [{ role: 'user', content }];

async function untilMetric(server, sample, min, ms = 10000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = metric(await metrics(server), sample) ?? 0;
    if (v >= min || Date.now() > deadline) return v;
    await sleep(50);
  }
}

describe('one slot, a queue of one', () => {
  let dir; let server; let openai;

  before(async () => {
    dir = tempDir('lifecycle');
    server = await startServer({
      model: makeModel(dir), args: ['--slots', '1', '--max-queue', '1', '--ctx', '4096'],
    });
    openai = client(server);
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a client that aborts a stream cancels it and frees the slot', async () => {
    const controller = new AbortController();
    const stream = await openai.chat.completions.create(
      { ...LONG, stream: true, messages: user('Tell me a very long story.') },
      { signal: controller.signal });
    let chunks = 0;
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta?.content) chunks++;
        if (chunks === 2) {
          controller.abort();
          break;  // chunks already buffered by the client are not counted
        }
      }
    } catch (e) {
      assert.equal(e.name, 'APIUserAbortError', String(e));
    }
    assert.equal(chunks, 2);
    assert.ok(await untilMetric(server, 'prefixd_requests_cancelled_total', 1) >= 1,
      'the cancellation is counted');
    const t0 = Date.now();
    const next = await openai.chat.completions.create({ model: 'tiny', max_tokens: 4, messages: user('next') });
    assert.equal(next.choices.length, 1);
    assert.ok(Date.now() - t0 < 15000, 'the one slot was free again');
    // The answer goes out before the slot's cache work (publish) ends: wait for it, bounded.
    let health = null;
    for (let i = 0; i < 100; i++) {
      health = await (await fetch(`${server.url}/health`)).json();
      if (health.slots_busy === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(health.slots_busy, 0);
    assert.match(server.log, /prefixd request .*stream=1 .*finish=cancelled.* cancelled=1/);
  });

  it('requests beyond the slot and the queue get 503 with Retry-After', async () => {
    const controller = new AbortController();
    const busy = await openai.chat.completions.create(
      { ...LONG, stream: true, messages: user('Occupy the slot.') }, { signal: controller.signal });
    const it = busy[Symbol.asyncIterator]();
    await it.next();  // the slot is taken once text flows
    const queued = post(server, '/v1/chat/completions', { model: 'tiny', max_tokens: 2, messages: user('wait') });
    const deadline = Date.now() + 10000;  // wait until it waits in the queue
    while ((await (await fetch(`${server.url}/health`)).json()).queue_depth < 1) {
      assert.ok(Date.now() < deadline, 'the second request never reached the queue');
      await sleep(20);
    }
    const refused = await post(server, '/v1/chat/completions', { model: 'tiny', max_tokens: 2, messages: user('no room') });
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.headers.get('retry-after'), '1');
    assert.equal(typeof refused.json.error.message, 'string');
    controller.abort();
    const waited = await queued;
    assert.equal(waited.status, 200, waited.text);
  });
});

// Two sequences generating at once through a real vocabulary's output layer (248K tokens,
// quantized Q8_0 by the generator): a call of two rows. On a CPU with AMX, ggml's AMX matrix
// product crashed the server on such calls (llama.cpp #20824); prefixd keeps the weights out
// of AMX buffers there. On a CPU without AMX this passes either way.
describe('two slots generating at once on a real vocabulary', () => {
  let dir; let server;

  before(async () => {
    dir = tempDir('lifecycle-vocab');
    server = await startServer({ model: makeModel(dir, 1, ['--vocab', 'qwen35']), args: ['--slots', '2'] });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers both, and the server serves on', async () => {
    const ask = (k) => post(server, '/v1/completions',
      { model: 'tiny', prompt: `hello ${k} world`, max_tokens: 200, temperature: 0, ignore_eos: true });
    const [a, b] = await Promise.all([ask(1), ask(2)]);
    for (const r of [a, b]) {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.usage.completion_tokens, 200);
    }
    const health = await fetch(`${server.url}/health`);
    assert.equal(health.status, 200);
    assert.equal(server.exited, false);
  });
});
