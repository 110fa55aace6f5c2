// The KV-event replay socket (serve --kv-events-replay, docs/kv-events.md "Replay") asked as
// vLLM's subscriber asks after a gap: one subscriber reads the stream from the start and drops
// its connection, more turns run, a second subscribes late; then a DEALER asks the replay
// socket from a sequence k inside the first one's messages. It must get exactly the messages
// k..last, each with the bytes the subscribers got on the stream, then vLLM's end marker.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AGENT_TURNS, client, makeModel, metric, metrics, sleep, startServer, tempDir } from './harness.js';
import { HERE, PYTHON, subscribe } from './kv_subscribe.js';

const STREAM = 'tcp://127.0.0.1:19941';
const REPLAY = 'tcp://127.0.0.1:19942';
const SYSTEM = 'You are a build agent. Tools: read(path), write(path, text), run(cmd). '
  + 'Answer briefly and call one tool at a time. '.repeat(6);

async function askReplay(start) {
  const { stdout } = await promisify(execFile)(PYTHON, [join(HERE, 'kv_replay.py'), REPLAY, String(start)]);
  return JSON.parse(stdout).replies;
}

// Waits until the stream has been quiet for three polls of /metrics.
async function quiet(server) {
  let last = -1;
  for (let steady = 0, i = 0; steady < 3 && i < 100; i++) {
    const p = metric(await metrics(server), 'prefixd_kv_events_total{outcome="published"}');
    steady = p === last ? steady + 1 : 0;
    last = p;
    await sleep(50);
  }
}

describe('serve --kv-events-replay', () => {
  let dir; let model;
  before(() => { dir = tempDir('kv-replay'); model = makeModel(dir); });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('replays the messages from a sequence on, as first sent, then the end marker', async () => {
    const server = await startServer({ model, args: ['--block-size', '64', '--alias', 'tiny',
      '--kv-events', STREAM, '--kv-events-replay', REPLAY, '--ram-budget', '96K'] });
    try {
      const openai = client(server);
      let messages = [{ role: 'system', content: SYSTEM }];
      const turn = async (text) => {
        messages = [...messages, { role: 'user', content: text }];
        const r = await openai.chat.completions.create(
          { model: 'tiny', messages, max_tokens: 8, temperature: 0 });
        messages = [...messages, { role: 'assistant', content: r.choices[0].message.content }];
      };
      const early = await subscribe(STREAM);
      for (const text of AGENT_TURNS.slice(0, 2)) await turn(text);
      await quiet(server);
      const seen = await early.finish();  // drops its connection
      for (const text of AGENT_TURNS.slice(2, 4)) await turn(text);  // it misses these
      await quiet(server);
      const late = await subscribe(STREAM);  // its subscription makes the server resend what it holds
      await quiet(server);
      const lateSeen = await late.finish();
      assert.ok(seen.length >= 4 && lateSeen.length > 0, `${seen.length}, ${lateSeen.length} messages`);

      const k = seen[Math.floor(seen.length / 2)].seq;
      const last = lateSeen.at(-1).seq;
      const replies = await askReplay(k);
      assert.ok(replies.length > 0, 'no answer');
      const end = replies.at(-1);
      assert.deepEqual(end, { frames: 3, empty: true, seq: -1, payload_hex: '' }, 'the end marker');
      const body = replies.slice(0, -1);
      assert.deepEqual(body.map((r) => r.seq), Array.from({ length: last - k + 1 }, (_, i) => k + i),
        'exactly the messages k..last');
      const bytes = new Map([...seen, ...lateSeen].map((m) => [m.seq, m.payload_hex]));
      for (const r of body) {
        assert.equal(r.frames, 3);
        assert.ok(r.empty, 'the delimiter frame is empty');
        if (bytes.has(r.seq)) assert.equal(r.payload_hex, bytes.get(r.seq), `message ${r.seq}'s bytes`);
      }
      const missed = body.filter((r) => !bytes.has(r.seq));
      assert.ok(missed.length > 0, 'no message was missed: the gap went untested');
      assert.ok(seen.at(-1).seq < missed[0].seq && missed.at(-1).seq < lateSeen[0].seq,
        'the missed messages lie between the two subscribers');

      assert.deepEqual((await askReplay(last + 1)).map((r) => r.seq), [-1], 'past the last: the marker alone');
      const held = metric(await metrics(server), 'prefixd_memory_bytes{owner="kv_replay"}');
      const kept = [...bytes.values()].reduce((n, h) => n + h.length / 2, 0);
      assert.ok(held >= kept, `the replay buffer's bytes (${held}) are not counted (${kept} seen)`);
    } finally {
      await server.stop();
    }
  });

  it('refuses --kv-events-replay without --kv-events', async () => {
    await assert.rejects(startServer({ model, timeoutMs: 5000,
      args: ['--kv-events-replay', REPLAY] }), /--kv-events-replay: with --kv-events/);
  });
});
