// The KV-event stream (serve --kv-events, docs/kv-events.md) read as llm-d's and Dynamo's
// indexers read it: a Python subscriber (pyzmq + msgpack, kv_subscriber.py) collects every
// message while an agent session runs, the cache is cleared and one more turn follows. The
// stream must be three frames a message, gapless sequences, decodable payloads whose blocks
// chain parent first over the prompts' own token ids (/v1/chat/completions/render), and
// replaying it (evictions included: a small RAM budget) must rebuild exactly the RAM tier's
// Blocks that /v1/cache/stats counts after the clear, remove every one of them before the
// clear's AllBlocksCleared, and carry the disk tier's Blocks (medium "DISK") too, and the
// slots' (medium "GPU": what their sequences hold, withdrawn when a slot drops it).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { AGENT_TURNS, client, freePort, makeModel, metric, metrics, post, sleep, startServer, tempDir,
  writeKeys } from './harness.js';
import { subscribe } from './kv_subscribe.js';

const BLOCK = 64;  // the cache's Block (--block-size)
const EVENT_BLOCK = 16;  // the stream's block (--kv-events-block-size, llm-d's)
const SYSTEM = 'You are a build agent. Tools: read(path), write(path, text), run(cmd). '
  + 'Answer briefly and call one tool at a time. '.repeat(6);

// The RAM tier's Blocks once the server is quiet (the last request's cache work is done: its
// published events steady over three polls).
async function cacheBlocks(server) {
  let last = -1;
  for (let steady = 0, i = 0; steady < 3 && i < 100; i++) {
    const p = metric(await metrics(server), 'prefixd_kv_events_total{outcome="published"}');
    steady = p === last ? steady + 1 : 0;
    last = p;
    await sleep(50);
  }
  const stats = await (await fetch(`${server.url}/v1/cache/stats`)).json();
  return stats.tiers.ram.blocks;
}

// Replays the events in order: the live blocks of each medium (hash -> the token ids from the
// first block on), checking parents come first. A clear removes each block before
// AllBlocksCleared (llm-d ignores AllBlocksCleared): the RAM blocks live just before that run of
// removals held what was cached at the clear (and what an eviction just before it removed).
// Returns, for each AllBlocksCleared, the RAM ("CPU") blocks live before that run of removals,
// then the RAM blocks live at the end; the disk's and the slots' at the end; how many RAM
// blocks were removed. The slots' blocks are all removed before each AllBlocksCleared.
function replay(messages) {
  const live = { CPU: new Map(), DISK: new Map(), GPU: new Map() };
  const snapshots = [];
  let removed = 0; let beforeRemovals = null; let lastWasRamRemoval = false;
  for (const m of messages) {
    for (const e of m.payload[1]) {
      const type = Array.isArray(e) ? e[0] : e.type;
      if (type === 'AllBlocksCleared') {
        assert.equal(live.CPU.size, 0, 'a RAM block was not removed before AllBlocksCleared');
        assert.equal(live.GPU.size, 0, 'a slot\'s block was not removed before AllBlocksCleared');
        snapshots.push(beforeRemovals ?? new Map());
      } else if (type === 'BlockStored') {
        const [hashes, parent, tokens, size, lora, medium] = e.slice(1);
        assert.ok(medium in live, `medium ${medium}`);
        assert.equal(size, EVENT_BLOCK);
        assert.equal(lora, null);
        assert.equal(tokens.length, hashes.length * EVENT_BLOCK);
        let chain = [];
        if (parent !== null) {
          assert.ok(live[medium].has(String(parent)), `${medium} BlockStored before its parent ${parent}`);
          chain = live[medium].get(String(parent));
        }
        hashes.forEach((h, j) => {
          assert.ok(BigInt(h) < 2n ** 63n, `hash ${h} is not below 2^63`);
          chain = chain.concat(tokens.slice(j * EVENT_BLOCK, (j + 1) * EVENT_BLOCK));
          live[medium].set(String(h), chain);
        });
      } else if (type === 'BlockRemoved') {
        const [hashes, medium] = e.slice(1);
        assert.ok(medium in live, `medium ${medium}`);
        if (medium === 'CPU' && !lastWasRamRemoval) beforeRemovals = new Map(live.CPU);
        for (const h of hashes) assert.ok(live[medium].delete(String(h)), `removed ${h}, never stored`);
        if (medium === 'CPU') removed += hashes.length;
        lastWasRamRemoval = medium === 'CPU';
        continue;
      } else {
        assert.fail(`unknown event ${JSON.stringify(e)}`);
      }
      lastWasRamRemoval = false;
    }
  }
  snapshots.push(live.CPU);
  return { snapshots, removed, disk: live.DISK, gpu: live.GPU };
}

const isPrefix = (a, b) => a.length <= b.length && a.every((t, i) => t === b[i]);

// The slots' blocks at the end are what one slot holds after serving `prompt` with at most
// `maxTokens` generated: the chain of its full Blocks, each block's tokens the prompt's and
// then generated ones, nothing of an earlier conversation.
function expectSlotHolds(gpu, prompt, maxTokens) {
  const chains = [...gpu.values()];
  assert.ok(chains.length > 0, 'no slot block is live');
  const longest = chains.reduce((a, c) => (c.length > a.length ? c : a), []);
  for (const chain of chains) assert.ok(isPrefix(chain, longest), 'two conversations on the slots');
  assert.ok(isPrefix(longest.slice(0, prompt.length), prompt), 'a slot block chain is not the prompt\'s');
  const held = Math.floor(prompt.length / BLOCK) * BLOCK;
  assert.ok(longest.length >= held && longest.length <= prompt.length + maxTokens,
    `the slot's blocks hold ${longest.length} tokens, the prompt ${prompt.length}`);
  assert.equal(longest.length % BLOCK, 0, 'a slot publishes whole Blocks');
  assert.equal(chains.length, longest.length / EVENT_BLOCK, 'a block of the slot is missing');
}

describe('serve --kv-events', () => {
  let dir; let model;
  before(() => { dir = tempDir('kv-events'); model = makeModel(dir); });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('publishes the RAM tier as vLLM KV events that replay to its Blocks', async () => {
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const server = await startServer({ model, args: ['--block-size', String(BLOCK),
      '--kv-events', endpoint, '--kv-events-pod', 'pod-a', '--alias', 'tiny',
      '--ram-budget', '96K'] });  // a few Blocks: the session evicts some
    try {
      const sub = await subscribe(endpoint);
      const openai = client(server);
      const prompts = [];
      let messages = [{ role: 'system', content: SYSTEM }];
      const turn = async (text) => {
        messages = [...messages, { role: 'user', content: text }];
        const rendered = await post(server, '/v1/chat/completions/render', { model: 'tiny', messages });
        assert.equal(rendered.status, 200, rendered.text);
        prompts.push(rendered.json.token_ids);
        const r = await openai.chat.completions.create(
          { model: 'tiny', messages, max_tokens: 8, temperature: 0 });
        messages = [...messages, { role: 'assistant', content: r.choices[0].message.content }];
      };
      for (const text of AGENT_TURNS.slice(0, 3)) await turn(text);
      const before = await cacheBlocks(server);
      assert.ok(before > 0, 'the session left no Block in RAM');
      assert.equal((await post(server, '/v1/cache/clear', {})).status, 200);
      await turn(AGENT_TURNS[3]);
      const afterClear = await cacheBlocks(server);
      await sleep(200);  // the publisher sends behind the requests
      const got = await sub.finish();
      const page = await metrics(server);

      assert.ok(got.length > 0, 'no message arrived');
      const sent = got.reduce((n, m) => n + m.payload[1].length, 0);
      assert.equal(metric(page, 'prefixd_kv_events_total{outcome="published"}'), sent,
        'the metric counts every event the subscriber got');
      assert.equal(metric(page, 'prefixd_kv_events_total{outcome="dropped"}'), 0);
      for (const m of got) {
        assert.equal(m.frames, 3, 'a message is [topic, sequence, payload]');
        assert.equal(m.topic, 'kv@pod-a@tiny');
        assert.equal(m.payload.length, 3);
        assert.equal(typeof m.payload[0], 'number');
        assert.ok(Math.abs(m.payload[0] - Date.now() / 1000) < 60, 'ts is not now, in seconds');
        assert.equal(m.payload[2], 0, 'data-parallel rank');
      }
      got.forEach((m, i) => {
        if (i > 0) assert.equal(m.seq, got[i - 1].seq + 1, 'sequence numbers go up by one');
      });

      const { snapshots: [atClear, atEnd, ...more], removed, disk, gpu } = replay(got);
      expectSlotHolds(gpu, prompts.at(-1), 8);
      assert.ok(disk.size > 0, 'the disk tier\'s blocks are not in the stream');
      for (const chain of disk.values()) {
        assert.ok(prompts.some((p) => isPrefix(chain, p)), 'a disk block chain is no prompt\'s prefix');
      }
      assert.ok(removed > 0, 'the RAM budget evicted no Block: BlockRemoved went untested');
      assert.equal(more.length, 0, 'one AllBlocksCleared: one clear');
      assert.ok(atEnd !== undefined, 'no AllBlocksCleared after POST /v1/cache/clear');
      assert.ok(atClear.size >= before * (BLOCK / EVENT_BLOCK), 'the clear removed fewer blocks than RAM held');
      assert.equal(atEnd.size, afterClear * (BLOCK / EVENT_BLOCK), 'replay after the clear');
      for (const chain of [...atClear.values(), ...atEnd.values()]) {
        assert.ok(prompts.some((p) => isPrefix(chain, p)),
          'a block chain is not a prefix of any prompt\'s token ids');
      }
    } finally {
      await server.stop();
    }
  });

  // One slot: a second conversation takes it, so the first one's blocks leave the slot's
  // medium; a subscriber that joins late is told what the slot holds; a clean stop withdraws it.
  it('publishes what the slots hold as medium GPU, and withdraws it', async () => {
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const server = await startServer({ model, args: ['--block-size', String(BLOCK),
      '--kv-events', endpoint, '--alias', 'tiny', '--slots', '1'] });
    let stopped = false;
    try {
      const sub = await subscribe(endpoint);
      const prompts = [];
      for (const system of [SYSTEM, `You are a review agent. ${SYSTEM}`]) {
        const messages = [{ role: 'system', content: system }, { role: 'user', content: AGENT_TURNS[0] }];
        prompts.push((await post(server, '/v1/chat/completions/render', { model: 'tiny', messages })).json.token_ids);
        await client(server).chat.completions.create({ model: 'tiny', messages, max_tokens: 8, temperature: 0 });
      }
      await cacheBlocks(server);
      await sleep(200);
      const got = (await sub.finish()).flatMap((m) => m.payload[1]);
      const gpuStored = got.filter((e) => e[0] === 'BlockStored' && e[6] === 'GPU');
      const gpuRemoved = new Set(got.filter((e) => e[0] === 'BlockRemoved' && e[2] === 'GPU').flatMap((e) => e[1]));
      const firstRoot = gpuStored.find((e) => e[2] === null && isPrefix(e[3], prompts[0]));
      assert.ok(firstRoot, 'the first conversation was never on the slot');
      assert.ok(firstRoot[1].every((h) => gpuRemoved.has(h)), 'the reused slot kept the first conversation');
      expectSlotHolds(replay([{ payload: [0, got, 0] }]).gpu, prompts[1], 8);

      const late = await subscribe(endpoint);  // the resend names what the slot holds
      await server.stop();
      stopped = true;
      await sleep(700);  // the stop's withdrawals arrive
      const lateEvents = (await late.finish()).flatMap((m) => m.payload[1]);
      const stores = lateEvents.filter((e) => e[0] === 'BlockStored');
      expectSlotHolds(replay([{ payload: [0, stores, 0] }]).gpu, prompts[1], 8);
      const { gpu, snapshots } = replay([{ payload: [0, lateEvents, 0] }]);
      assert.equal(gpu.size, 0, 'the stop left slot blocks in the index');
      assert.equal(snapshots.at(-1).size, 0, 'the stop left RAM blocks in the index');
    } finally {
      if (!stopped) await server.stop();
    }
  });

  it('names each event with a "type" key in the map encoding', async () => {
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const server = await startServer({ model, args: ['--block-size', String(BLOCK),
      '--kv-events', endpoint, '--kv-events-format', 'map'] });
    try {
      const sub = await subscribe(endpoint);
      await client(server).chat.completions.create({ model: 'tiny', max_tokens: 4,
        messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: AGENT_TURNS[0] }] });
      await sleep(200);
      const events = (await sub.finish()).flatMap((m) => m.payload[1]);
      assert.ok(events.length > 0, 'no event arrived');
      for (const e of events) {
        assert.equal(e.type, 'BlockStored');
        assert.equal(e.token_ids.length, e.block_hashes.length * EVENT_BLOCK);
        assert.equal(e.block_size, EVENT_BLOCK);
        assert.ok(['CPU', 'DISK', 'GPU'].includes(e.medium), e.medium);
      }
    } finally {
      await server.stop();
    }
  });

  it('publishes from a socket that connects with --kv-events-connect', async () => {
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const sub = await subscribe(endpoint, 'bind');
    const server = await startServer({ model, args: ['--block-size', String(BLOCK),
      '--kv-events-connect', endpoint, '--kv-events-pod', 'pod-b', '--alias', 'tiny'] });
    try {
      await sleep(300);  // the connection and the subscription reach the server's socket
      await client(server).chat.completions.create({ model: 'tiny', max_tokens: 4,
        messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: AGENT_TURNS[0] }] });
      await sleep(200);
      const got = await sub.finish();
      assert.ok(got.length > 0, 'no message arrived');
      for (const m of got) assert.equal(m.topic, 'kv@pod-b@tiny');
      assert.ok(got.flatMap((m) => m.payload[1]).some((e) => e[0] === 'BlockStored'));
    } finally {
      await server.stop();
    }
  });

  // With keys on every prompt is a tenant's (an admin key is a tenant too): its Blocks, in RAM
  // and on disk, reach the stream only with --kv-events-tenants.
  const tenantRun = async (extra) => {
    const keysDir = tempDir('kv-keys'); const adminDir = tempDir('kv-admin');
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const server = await startServer({ model, args: ['--block-size', String(BLOCK),
      '--kv-events', endpoint, '--alias', 'tiny', '--api-key-file', writeKeys(keysDir, ['k-tenant']),
      '--admin-key-file', writeKeys(adminDir, ['k-admin']), ...extra] });
    try {
      const sub = await subscribe(endpoint);
      const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: AGENT_TURNS[0] }];
      const auth = { Authorization: 'Bearer k-tenant' };
      const rendered = await post(server, '/v1/chat/completions/render', { model: 'tiny', messages }, auth);
      assert.equal(rendered.status, 200, rendered.text);
      await client(server, 'k-tenant').chat.completions.create({ model: 'tiny', max_tokens: 4, messages });
      const page = async () => (await fetch(`${server.url}/metrics`,
        { headers: { Authorization: 'Bearer k-admin' } })).text();
      let held = 0;
      for (let i = 0; i < 100 && held === 0; i++) {  // the request's Blocks reach RAM and the disk
        const p = await page();
        held = (metric(p, 'prefixd_cache_bytes{tier="disk"}') ?? 0) > 0 ? 1 : 0;
        await sleep(50);
      }
      assert.ok(held, 'the tenant\'s prompt was not cached');
      await sleep(300);
      const events = (await sub.finish()).flatMap((m) => m.payload[1]);
      return { events, prompt: rendered.json.token_ids, published: metric(await page(), 'prefixd_kv_events_total{outcome="published"}') };
    } finally {
      await server.stop();
      for (const d of [keysDir, adminDir]) rmSync(d, { recursive: true, force: true });
    }
  };

  it('keeps a tenant\'s Blocks off the stream without --kv-events-tenants', async () => {
    const { events, published } = await tenantRun([]);
    assert.deepEqual(events, [], 'a tenant\'s Blocks reached the stream');
    assert.equal(published, 0);
  });

  it('publishes a tenant\'s Blocks, RAM and disk, with --kv-events-tenants', async () => {
    const { events, prompt, published } = await tenantRun(['--kv-events-tenants']);
    const stored = events.filter((e) => e[0] === 'BlockStored');
    assert.ok(stored.some((e) => e[6] === 'CPU'), 'no RAM Block of the tenant');
    assert.ok(stored.some((e) => e[6] === 'DISK'), 'no disk Block of the tenant');
    for (const e of stored.filter((x) => x[2] === null)) {
      assert.ok(isPrefix(e[3], prompt), 'a first Block is not the tenant\'s prompt');
    }
    assert.equal(published, events.length);
  });

  it('refuses a block size that does not divide the cache\'s', async () => {
    await assert.rejects(startServer({ model, timeoutMs: 5000, args: ['--block-size', String(BLOCK),
      '--kv-events', `tcp://127.0.0.1:${await freePort()}`, '--kv-events-block-size', '24'] }),
    /does not divide/);
  });
});
