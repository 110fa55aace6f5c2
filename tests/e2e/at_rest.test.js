// The cache at rest with `serve --encrypt-cache`: the records a conversation leaves on disk
// hold none of its token ids (they do without the flag), a restart with the flag reads them
// back as disk hits, and a server without the key never uses them.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { client, diskSettled, makeModel, metric, metrics, post, sleep, startServer, tempDir } from './harness.js';

const SYSTEM = 'You are the release agent of a private repository named quartz-falcon. '
  + 'Keep the signing keys out of every log and answer in one line. '.repeat(10);
const turn1 = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Ship 4.2.0.' }];
const turn2 = [...turn1, { role: 'assistant', content: 'Tagging 4.2.0.' },
  { role: 'user', content: 'Tool result: tagged. Publish it.' }];
const ask = async (server, messages) => (await client(server).chat.completions.create(
  { model: 'tiny', messages, max_tokens: 4, temperature: 0 })).usage;

function filesUnder(dir) {
  return readdirSync(dir, { recursive: true }).map((f) => join(dir, f)).filter((f) => statSync(f).isFile());
}

// Whether any record file holds `ids` (16 consecutive token ids of the prompt) as stored.
function recordsHold(cacheDir, ids) {
  const needle = Buffer.alloc(4 * ids.length);
  ids.forEach((t, i) => needle.writeInt32LE(t, 4 * i));
  return filesUnder(join(cacheDir, 'records')).some((f) => readFileSync(f).includes(needle));
}

describe('serve --encrypt-cache', () => {
  let dir; let model; let ids;
  before(() => { dir = tempDir('at-rest'); model = makeModel(dir); });
  after(() => rmSync(dir, { recursive: true, force: true }));

  async function served(cacheDir, extra, body) {
    const server = await startServer({ model, args: ['--cache-dir', cacheDir, ...extra] });
    try { return await body(server); } finally { await server.stop(); }
  }

  it('leaves the token ids in the clear without it: the check below can fail', async () => {
    const plain = join(dir, 'plain');
    await served(plain, [], async (s) => {
      const t = await post(s, '/tokenize', { content: SYSTEM });
      ids = t.json.tokens.slice(40, 56);
      assert.equal(ids.length, 16);
      await ask(s, turn1);
      assert.ok(await diskSettled(s) > 0);
    });
    assert.ok(recordsHold(plain, ids), 'plain records hold the prompt\'s token ids');
  });

  it('leaves none of them on disk, and reads its records back after a restart', async () => {
    const sealed = join(dir, 'sealed');
    await served(sealed, ['--encrypt-cache'], async (s) => {
      await ask(s, turn1);
      assert.ok(await diskSettled(s) > 0);
    });
    assert.ok(!recordsHold(sealed, ids), 'no record holds the prompt\'s token ids');
    await served(sealed, ['--encrypt-cache'], async (s) => {
      const u = await ask(s, turn2);
      assert.ok(u.prompt_tokens_details.cached_tokens > 0, 'the restart reads the sealed records');
      // Counted once the request's cache work is done, a moment after the answer.
      let hits = 0;
      for (let i = 0; i < 50 && hits < 1; i++) {
        hits = metric(await metrics(s), 'prefixd_cache_hits_total{tier="disk"}') ?? 0;
        if (hits < 1) await sleep(100);
      }
      assert.ok(hits >= 1, 'a disk hit');
    });
    // A server without the key: the sealed records are no use to it, and none is served.
    await served(sealed, [], async (s) => {
      const u = await ask(s, turn2);
      assert.equal(u.prompt_tokens_details.cached_tokens, 0, 'records it cannot open are misses');
    });
  });

  it('refuses to start without a cache directory to take its key from', async () => {
    await assert.rejects(startServer({ model, args: ['--cache-dir', 'none', '--encrypt-cache'] }),
      /--encrypt-cache needs a cache directory/);
  });
});
