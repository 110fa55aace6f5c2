// The disk tier across a crash: serve a conversation, kill -9 the server, restart it on the
// same cache dir and send the next turn. Its prefix comes back from disk (cached tokens = the
// reusable length, which here is the whole first prompt) and the answer equals a cold run's.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { client, diskSettled, makeModel, metric, metrics, sleep, startServer, tempDir } from './harness.js';

const SYSTEM = 'You are a build agent. Tools: read(path), write(path, text), run(cmd). '
  + 'Answer briefly and call one tool at a time. '.repeat(12);
const turn1 = [
  { role: 'system', content: SYSTEM },
  { role: 'user', content: 'Run the tests and tell me what failed.' },
];
const turn2 = [
  ...turn1,
  { role: 'assistant', content: '<think>Run them first.</think>Running the tests now.' },
  { role: 'user', content: 'Tool result: 2 failures in disk_store_test. Fix them.' },
];
const ask = (openai, messages) => openai.chat.completions.create(
  { model: 'tiny', messages, max_tokens: 12, temperature: 0 });

describe('kill -9 and restart on the same cache dir', () => {
  let dir; let model; let cacheDir;

  before(() => {
    dir = tempDir('restart');
    model = makeModel(dir);
    cacheDir = join(dir, 'cache');
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('reuses the prefix from disk with output equal to a cold run', async () => {
    const first = await startServer({ model, args: ['--cache-dir', cacheDir] });
    let r1;
    try {
      r1 = await ask(client(first), turn1);
      assert.ok(await diskSettled(first) > 0, 'nothing reached the disk tier');
    } finally {
      first.proc.kill('SIGKILL');  // no flush, no clean shutdown
      await first.stop();
    }
    const second = await startServer({ model, args: ['--cache-dir', cacheDir] });
    const cold = await startServer({ model, args: ['--no-cache'] });
    try {
      const warm = await ask(client(second), turn2);
      const want = await ask(client(cold), turn2);
      assert.equal(warm.choices[0].message.content, want.choices[0].message.content);
      assert.equal(warm.usage.prompt_tokens_details.cached_tokens, r1.usage.prompt_tokens,
        'the whole first prompt is the reusable prefix of the second');
      assert.equal(want.usage.prompt_tokens_details.cached_tokens, 0);
      const page = await metrics(second);
      assert.equal(metric(page, 'prefixd_cache_hits_total{tier="disk"}'), 1);
    } finally {
      await second.stop();
      await cold.stop();
    }
  });

  it('a second server on the same cache dir is refused with a clear error', async () => {
    const owner = await startServer({ model, args: ['--cache-dir', cacheDir] });
    try {
      await assert.rejects(startServer({ model, args: ['--cache-dir', cacheDir] }),
        /is in use by pid \d+/);
      assert.equal((await ask(client(owner), turn1)).choices.length, 1, 'the owner still serves');
    } finally {
      await owner.stop();
    }
  });
});
