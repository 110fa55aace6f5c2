// Agent features of /v1/chat/completions through the official `openai` client:
// grammar-constrained tool calls (streamed and not), JSON-schema replies, logprobs, errors,
// and a tool loop whose second turn is restored from the cache — on real chat templates the
// pinned llama.cpp ships (--chat-template NAME).
//
// With random weights the model never starts a tool call by itself: the templates' grammars
// let a reply begin with free text. A forced call (tool_choice required or a named function)
// starts at the template's call marker, which the server decodes as the reply's first tokens;
// from there the grammar writes a well-formed call. No bias is needed.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { client, makeModel, post, startServer, tempDir } from './harness.js';

// Arguments the grammar bounds (an integer, a boolean), so that the random model ends its call;
// Qwen3.5 writes string arguments as free text up to </parameter>.
const FORECAST = {
  type: 'function',
  function: {
    name: 'forecast', description: 'Weather forecast',
    parameters: {
      type: 'object', required: ['days', 'metric'],
      properties: { days: { type: 'integer' }, metric: { type: 'boolean' } },
    },
  },
};
const CLOCK = {
  type: 'function',
  function: {
    name: 'clock', description: 'The time',
    parameters: { type: 'object', required: ['utc'], properties: { utc: { type: 'boolean' } } },
  },
};
const SYSTEM = 'You are a weather agent. Call tools when they help. '.repeat(8);

function assertForecastCall(call) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  assert.equal(call.function.name, 'forecast');
  const args = JSON.parse(call.function.arguments);
  assert.ok(Number.isInteger(args.days), call.function.arguments);
  assert.equal(typeof args.metric, 'boolean', call.function.arguments);
}

// Assembles a streamed reply from its chunks as agent SDKs do.
async function assemble(stream) {
  const out = { content: '', reasoning: '', calls: [], finish: null, roles: 0 };
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    const d = choice.delta;
    if (d.role) out.roles++;
    out.content += d.content ?? '';
    out.reasoning += d.reasoning_content ?? '';
    for (const tc of d.tool_calls ?? []) {
      const call = out.calls[tc.index] ??= { id: '', type: '', function: { name: '', arguments: '' } };
      if (tc.id) call.id = tc.id;
      if (tc.type) call.type = tc.type;
      call.function.name += tc.function?.name ?? '';
      call.function.arguments += tc.function?.arguments ?? '';
    }
    if (choice.finish_reason) out.finish = choice.finish_reason;
  }
  return out;
}

describe('chat tools on Qwen3.5-4B', () => {
  let dir; let server; let openai;

  before(async () => {
    dir = tempDir('tools');
    server = await startServer({
      model: makeModel(dir), args: ['--chat-template', 'Qwen3.5-4B', '--ctx', '4096'],
    });
    openai = client(server);
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Weather in Paris?' }];
  const forced = {
    model: 'tiny', max_tokens: 300, messages, tools: [FORECAST, CLOCK], tool_choice: 'required',
    enable_thinking: false,
  };

  // Reusable = the tokens a turn's prompt shares with the previous turn's, both as the server
  // renders and tokenizes them (/apply-template); cached must cover at least 99% of them.
  it('a 5-turn loop of the model\'s own tool calls reuses >= 0.99 of the reusable tokens', async () => {
    const tools = [FORECAST, CLOCK];
    const history = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Plan my week.' }];
    const tokensOf = async (msgs) => {
      const r = await post(server, '/apply-template', { messages: msgs, tools, enable_thinking: false });
      assert.equal(r.status, 200, r.text);
      return r.json.tokens;
    };
    let previous = null;
    let sumCached = 0; let sumReusable = 0;
    for (let turn = 0; turn < 5; turn++) {
      const current = await tokensOf(history);
      const r = await openai.chat.completions.create({
        model: 'tiny', max_tokens: 300, messages: history, tools, tool_choice: 'required',
        enable_thinking: false,
      });
      assert.equal(r.usage.prompt_tokens, current.length);
      if (previous) {
        let shared = 0;
        while (shared < previous.length && previous[shared] === current[shared]) shared++;
        const cached = Math.min(r.usage.prompt_tokens_details.cached_tokens, shared);
        assert.ok(cached >= 0.99 * shared, `turn ${turn}: cached ${cached} of ${shared} reusable`);
        sumCached += cached; sumReusable += shared;
      }
      previous = current;
      const msg = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(msg));
      history.push({ role: 'assistant', content: msg.content, tool_calls: msg.tool_calls });
      for (const call of msg.tool_calls) {
        history.push({ role: 'tool', tool_call_id: call.id, content: `{"ok": ${turn}}` });
      }
    }
    assert.ok(sumReusable > 0);
    assert.ok(sumCached >= 0.99 * sumReusable, `${sumCached} of ${sumReusable}`);
  });

  it('tool_choice required gives a parsed call of the schema', async () => {
    const r = await openai.chat.completions.create(forced);
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    assertForecastCall(choice.message.tool_calls[0]);
  });

  it('streams the same call as delta.tool_calls pieces', async () => {
    const full = await openai.chat.completions.create(forced);
    const streamed = await assemble(await openai.chat.completions.create({
      ...forced, stream: true,
    }));
    assert.equal(streamed.roles, 1);
    assert.equal(streamed.finish, 'tool_calls');
    assert.equal(streamed.calls.length, 1);
    assertForecastCall(streamed.calls[0]);
    const want = full.choices[0].message.tool_calls[0];
    assert.equal(streamed.calls[0].function.name, want.function.name);
    assert.deepEqual(JSON.parse(streamed.calls[0].function.arguments), JSON.parse(want.function.arguments));
  });

  it('a named function is the one called', async () => {
    const r = await openai.chat.completions.create({
      ...forced, tool_choice: { type: 'function', function: { name: 'clock' } },
    });
    const call = r.choices[0].message.tool_calls?.[0];
    assert.ok(call, JSON.stringify(r.choices[0]));
    assert.equal(call.function.name, 'clock');
    assert.equal(typeof JSON.parse(call.function.arguments).utc, 'boolean');
  });

  it('response_format json_schema gives JSON of the schema', async () => {
    const r = await openai.chat.completions.create({
      model: 'tiny', max_tokens: 200, messages, enable_thinking: false,
      response_format: {
        type: 'json_schema',
        json_schema: {
          name: 'answer', strict: true,
          schema: {
            type: 'object', required: ['n', 'ok'], additionalProperties: false,
            properties: { n: { type: 'integer' }, ok: { type: 'boolean' } },
          },
        },
      },
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    const reply = JSON.parse(r.choices[0].message.content);
    assert.ok(Number.isInteger(reply.n) && typeof reply.ok === 'boolean', r.choices[0].message.content);
  });

  it('reports logprobs as OpenAI does', async () => {
    const r = await openai.chat.completions.create({
      model: 'tiny', max_tokens: 4, messages, logprobs: true, top_logprobs: 3,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, r.usage.completion_tokens);
    for (const t of content) {
      assert.equal(typeof t.token, 'string');
      assert.ok(t.logprob <= 0);
      assert.ok(Array.isArray(t.bytes));
      assert.equal(t.top_logprobs.length, 3);
      assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob);
      assert.ok(t.logprob <= t.top_logprobs[0].logprob + 1e-6);
    }
  });

  it('refuses bad agent fields with 400 naming the parameter', async () => {
    const cases = [
      [{ tools: [FORECAST], tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
      [{ tool_choice: 'required' }, 'tool_choice'],
      [{ response_format: { type: 'yaml' } }, 'response_format'],
      [{ logit_bias: { 99999999: 1 } }, 'logit_bias'],
      [{ top_logprobs: 2 }, 'top_logprobs'],
      [{ reasoning_effort: 'extreme' }, 'reasoning_effort'],
      [{ chat_template_kwargs: 'x' }, 'chat_template_kwargs'],
    ];
    for (const [extra, param] of cases) {
      await assert.rejects(
        openai.chat.completions.create({ model: 'tiny', max_tokens: 2, messages, ...extra }),
        (e) => e.status === 400 && e.param === param,
        JSON.stringify(extra));
    }
  });

  it('a tool loop restores the conversation before the tool call from the cache', async () => {
    const first = await openai.chat.completions.create(forced);
    const msg = first.choices[0].message;
    assert.equal(msg.tool_calls?.length, 1, JSON.stringify(msg));
    const history = [...messages, msg,
      { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '{"temp": 21}' }];
    const second = await openai.chat.completions.create({
      model: 'tiny', max_tokens: 4, messages: history, tools: [FORECAST, CLOCK], enable_thinking: false,
    });
    const cached = second.usage.prompt_tokens_details.cached_tokens;
    // The whole first prompt but its generation prompt comes back (its tail capture point).
    assert.ok(cached >= first.usage.prompt_tokens - 8, `${cached} of ${first.usage.prompt_tokens}`);
    assert.ok(cached < second.usage.prompt_tokens);
  });
});

describe('chat tools on Llama-3.1-8B-Instruct', () => {
  let dir; let server; let openai;

  before(async () => {
    dir = tempDir('tools-llama');
    server = await startServer({
      model: makeModel(dir),
      args: ['--chat-template', 'meta-llama-Llama-3.1-8B-Instruct', '--ctx', '4096'],
    });
    openai = client(server);
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  // (json_object alone lets a random model write one endless key: the schema bounds it.)
  it('response_format json_schema gives JSON of the schema', async () => {
    const r = await openai.chat.completions.create({
      model: 'tiny', max_tokens: 200, messages: [{ role: 'user', content: 'JSON please' }],
      response_format: {
        type: 'json_schema',
        json_schema: {
          name: 'answer',
          schema: {
            type: 'object', required: ['n'], additionalProperties: false,
            properties: { n: { type: 'integer' } },
          },
        },
      },
    });
    assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].message.content);
    assert.ok(Number.isInteger(JSON.parse(r.choices[0].message.content).n));
  });

  it('a tool call sent back restores the turns before it', async () => {
    const history = [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'Weather in Paris?' },
    ];
    const first = await openai.chat.completions.create({
      model: 'tiny', max_tokens: 4, messages: history, tools: [FORECAST],
    });
    const call = { id: 'call_1', type: 'function', function: { name: 'forecast', arguments: '{"days":1,"metric":true}' } };
    const second = await openai.chat.completions.create({
      model: 'tiny', max_tokens: 4, tools: [FORECAST],
      messages: [...history, { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' }],
    });
    const cached = second.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached >= first.usage.prompt_tokens - 8, `${cached} of ${first.usage.prompt_tokens}`);
  });
});
