// One request cannot take the server down: bodies that made the scheduler thread throw (a
// grammar that has ended while ignore_eos masks the end of generation) get a clear answer,
// while a stream on the other slot completes and /health stays up.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { makeModel, post, startServer, tempDir } from './harness.js';

const user = (content) => [{ role: 'user', content }];
const noThinking = { chat_template_kwargs: { enable_thinking: false } };

// Bodies whose grammar completes after a few tokens; ignore_eos forbids the end-of-generation
// token the grammar then allows alone. The grammar's end is the answer's end: finish "stop".
const GRAMMAR_ENDS = [
  { response_format: { type: 'json_schema', json_schema: { name: 'b', schema: { type: 'boolean' } } } },
  { response_format: { type: 'json_schema', json_schema: { name: 'e', schema: { enum: ['yes', 'no'] } } } },
  { response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'integer', maximum: 9, minimum: 0 } } } },
];

describe('a request that used to crash the server', () => {
  let dir; let server;
  before(async () => {
    dir = tempDir('hostile');
    server = await startServer({ model: makeModel(dir), args: ['--slots', '2', '--ctx', '2048'] });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('ends at its grammar\'s end, and the other slot\'s stream completes', async () => {
    const long = fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: user('Write a long story.'), max_tokens: 200, ignore_eos: true,
        stream: true, stream_options: { include_usage: true }, ...noThinking }),
    }).then((r) => r.text());
    for (const format of GRAMMAR_ENDS) {
      for (const stream of [false, true]) {
        const body = { messages: user('hi'), max_tokens: 64, ignore_eos: true, stream, ...format, ...noThinking };
        const r = await post(server, '/v1/chat/completions', body);
        assert.equal(r.status, 200, r.text);
        if (stream) {
          assert.match(r.text, /"finish_reason":"stop"/);
          assert.match(r.text, /data: \[DONE\]/);
        } else {
          assert.equal(r.json.choices[0].finish_reason, 'stop');
          JSON.parse(r.json.choices[0].message.content);  // what the grammar allowed
        }
      }
    }
    const story = await long;
    assert.match(story, /"finish_reason":"length"/, 'the other slot\'s stream completed');
    assert.match(story, /"completion_tokens":200/);
    const health = await fetch(`${server.url}/health`);
    assert.equal(health.status, 200);
  });
});
