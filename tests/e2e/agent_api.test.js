// The agent APIs through their official clients against the real server: the OpenAI Responses
// API (`openai` responses.create) and the Anthropic Messages API (`@anthropic-ai/sdk`
// messages.create / messages.stream / messages.countTokens), each in a multi-turn tool loop
// whose second request must report cached tokens.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import { client, makeModel, post, startServer, tempDir, writeKeys } from './harness.js';

const SYSTEM = 'You are a coding agent. Use the tools to read files before you answer.';
const WEATHER = {
  name: 'get_weather',
  description: 'The weather in a city',
  schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

describe('Agent APIs', () => {
  let dir; let server; let openai; let anthropic;

  before(async () => {
    dir = tempDir('agent');
    server = await startServer({ model: makeModel(dir), args: ['--slots', '2', '--ctx', '2048'] });
    openai = client(server);
    anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  describe('OpenAI Responses API', () => {
    const tools = [{ type: 'function', name: WEATHER.name, description: WEATHER.description,
      parameters: WEATHER.schema, strict: false }];

    function assertUsage(usage) {
      assert.ok(usage.input_tokens > 0, JSON.stringify(usage));
      assert.ok(Number.isInteger(usage.output_tokens), JSON.stringify(usage));
      assert.equal(usage.total_tokens, usage.input_tokens + usage.output_tokens);
      assert.ok(Number.isInteger(usage.input_tokens_details.cached_tokens), JSON.stringify(usage));
    }

    it('answers responses.create with tools', async () => {
      const r = await openai.responses.create({
        model: 'tiny', instructions: SYSTEM, input: 'What is the weather in Paris?', tools,
        max_output_tokens: 12, temperature: 0, store: false,
      });
      assert.equal(r.object, 'response');
      assert.match(r.id, /^resp_/);
      assert.equal(r.model, 'tiny');
      assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
      if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
      assert.ok(r.output.length >= 1);
      for (const item of r.output) assert.ok(['message', 'reasoning', 'function_call'].includes(item.type));
      assert.equal(typeof r.output_text, 'string');  // the client's own join of output_text parts
      assertUsage(r.usage);
      assert.ok(r.usage.output_tokens <= 12);
    });

    it('streams the same answer as events, in order, ending with the usage', async () => {
      const request = { model: 'tiny', instructions: SYSTEM, input: 'Stream the weather.', tools,
        max_output_tokens: 10, temperature: 0 };
      const full = await openai.responses.create(request);
      const stream = await openai.responses.create({ ...request, stream: true });
      const types = []; let text = ''; let last = null; let seq = -1;
      for await (const event of stream) {
        types.push(event.type);
        assert.equal(event.sequence_number, seq + 1, `sequence_number after ${seq}`);
        seq = event.sequence_number;
        if (event.type === 'response.output_text.delta') text += event.delta;
        last = event;
      }
      assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
      assert.ok(['response.completed', 'response.incomplete'].includes(last.type), last.type);
      assert.equal(last.response.status, full.status);
      assert.equal(text, full.output_text);
      assert.ok(types.includes('response.output_item.added'));
      assert.ok(types.includes('response.output_item.done'));
      assertUsage(last.response.usage);
      assert.equal(last.response.usage.output_tokens, full.usage.output_tokens);
    });

    it('runs a 5-turn tool loop statelessly; each turn reuses the previous prompt from the cache', async () => {
      let input = [{ role: 'user', content: 'What is the weather in Paris?' }];
      let previous = null;
      for (let turn = 0; turn < 5; turn++) {
        const r = await openai.responses.create({
          model: 'tiny', instructions: SYSTEM, input, tools, max_output_tokens: 8, temperature: 0 });
        if (previous) {
          assert.ok(r.usage.input_tokens > previous.usage.input_tokens);
          // The previous prompt is a prefix of this one (less the generation prompt's few tokens).
          assert.ok(r.usage.input_tokens_details.cached_tokens >= previous.usage.input_tokens - 8,
            `turn ${turn}: ${JSON.stringify(r.usage)} after ${previous.usage.input_tokens} tokens`);
        }
        // The model's output items go back as they came, then a call and its result. (A random
        // model cannot choose a tool; the call item is the client's, in the shape the API uses.)
        input = [...input, ...r.output,
          { type: 'function_call', call_id: `call_${turn}`, name: WEATHER.name, arguments: '{"city":"Paris"}' },
          { type: 'function_call_output', call_id: `call_${turn}`, output: `{"temperature":${20 + turn}}` }];
        previous = r;
      }
    });

    it('refuses previous_response_id and names bad fields', async () => {
      await assert.rejects(
        openai.responses.create({ model: 'tiny', input: 'hi', previous_response_id: 'resp_1' }),
        (e) => e.status === 400 && e.param === 'previous_response_id');
      await assert.rejects(
        openai.responses.create({ model: 'tiny', input: [{ role: 'user',
          content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] }),
        (e) => e.status === 400 && e.param === 'input[0].content[0].image_url'
          && /fetches nothing/.test(e.message));
      await assert.rejects(
        openai.responses.create({ model: 'tiny', input: 'hi', max_output_tokens: 100000 }),
        (e) => e.status === 400 && e.param === 'max_output_tokens');
    });
  });

  describe('Anthropic Messages API', () => {
    const tools = [{ name: WEATHER.name, description: WEATHER.description, input_schema: WEATHER.schema }];
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

    function assertUsage(usage) {
      assert.ok(Number.isInteger(usage.input_tokens), JSON.stringify(usage));
      assert.ok(Number.isInteger(usage.output_tokens), JSON.stringify(usage));
      assert.ok(Number.isInteger(usage.cache_read_input_tokens), JSON.stringify(usage));
      assert.equal(usage.cache_creation_input_tokens, 0);
    }

    it('answers messages.create with tools and tool_choice any', async () => {
      const m = await anthropic.messages.create({
        model: 'tiny', system: SYSTEM, messages, tools, tool_choice: { type: 'any' },
        max_tokens: 12, temperature: 0,
      });
      assert.equal(m.type, 'message');
      assert.match(m.id, /^msg_/);
      assert.equal(m.role, 'assistant');
      assert.equal(m.model, 'tiny');
      assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(m.stop_reason), m.stop_reason);
      assert.ok(m.content.length >= 1);
      for (const block of m.content) {
        assert.ok(['text', 'thinking', 'tool_use'].includes(block.type), block.type);
        if (block.type === 'tool_use') assert.equal(typeof block.input, 'object');
      }
      assertUsage(m.usage);
      assert.ok(m.usage.output_tokens <= 12);
    });

    it('streams the same message with messages.stream', async () => {
      const request = { model: 'tiny', system: SYSTEM, messages, tools, max_tokens: 10, temperature: 0 };
      const full = await anthropic.messages.create(request);
      const events = [];
      const stream = anthropic.messages.stream(request);
      stream.on('streamEvent', (e) => events.push(e.type));
      const final = await stream.finalMessage();
      assert.equal(events[0], 'message_start');
      assert.equal(events.at(-1), 'message_stop');
      assert.ok(events.includes('content_block_start') && events.includes('content_block_stop'));
      assert.deepEqual(final.content, full.content);
      assert.equal(final.stop_reason, full.stop_reason);
      assertUsage(final.usage);
      assert.equal(final.usage.output_tokens, full.usage.output_tokens);
      assert.equal(final.usage.input_tokens + final.usage.cache_read_input_tokens,
        full.usage.input_tokens + full.usage.cache_read_input_tokens);
    });

    it('counts the tokens of the prompt a message would use', async () => {
      const request = { model: 'tiny', system: SYSTEM, messages, tools };
      const counted = await anthropic.messages.countTokens(request);
      const m = await anthropic.messages.create({ ...request, max_tokens: 1 });
      assert.ok(counted.input_tokens > 0);
      assert.equal(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
    });

    it('runs a 5-turn tool loop; each turn reads the previous prompt from the cache', async () => {
      let history = [...messages];
      let previousPrompt = 0;
      for (let turn = 0; turn < 5; turn++) {
        const m = await anthropic.messages.create({
          model: 'tiny', system: SYSTEM, messages: history, tools, max_tokens: 8, temperature: 0 });
        const prompt = m.usage.input_tokens + m.usage.cache_read_input_tokens;
        if (turn > 0) {
          assert.ok(prompt > previousPrompt);
          assert.ok(m.usage.cache_read_input_tokens >= previousPrompt - 8,
            `turn ${turn}: ${JSON.stringify(m.usage)} after ${previousPrompt} tokens`);
        }
        // The model's blocks go back as they came, with a tool call and its result. (A random
        // model cannot choose a tool; the tool_use block is the client's, in the API's shape.)
        history = [...history,
          { role: 'assistant', content: [...m.content,
            { type: 'tool_use', id: `toolu_${turn}`, name: WEATHER.name, input: { city: 'Paris' } }] },
          { role: 'user', content: [
            { type: 'tool_result', tool_use_id: `toolu_${turn}`, content: `{"temperature":${20 + turn}}` }] }];
        previousPrompt = prompt;
      }
    });

    it('answers errors in the Anthropic shape', async () => {
      const noMax = await post(server, '/v1/messages', { model: 'tiny', messages });
      assert.equal(noMax.status, 400);
      assert.equal(noMax.json.type, 'error');
      assert.equal(noMax.json.error.type, 'invalid_request_error');
      assert.match(noMax.json.error.message, /max_tokens/);
      await assert.rejects(
        anthropic.messages.create({ model: 'tiny', max_tokens: 8, messages: [{ role: 'user',
          content: [{ type: 'image', source: { type: 'url', url: 'http://x/y.png' } }] }] }),
        (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error');
      await assert.rejects(
        anthropic.messages.create({ model: 'claude-not-served', max_tokens: 8, messages }),
        (e) => e.status === 404 && e.error?.error?.type === 'not_found_error');
    });
  });
});

// Forced tool calls through both APIs on a real template (Qwen3.5-4B, --chat-template): with
// random weights the model never starts a call by itself; a forced call (tool_choice required /
// any / tool) starts at the template's call marker, which the server decodes as the reply's
// first tokens (after the reasoning block when thinking is on), and the template's grammar
// writes a well-formed call. Arguments are an integer and a boolean, which the grammar bounds.
describe('Agent APIs: forced tool calls on Qwen3.5-4B', () => {
  const FORECAST = {
    name: 'forecast', description: 'Weather forecast',
    schema: { type: 'object', required: ['days', 'metric'],
      properties: { days: { type: 'integer' }, metric: { type: 'boolean' } } },
  };
  const SYS = 'You are a weather agent. Call tools when they help. '.repeat(8);
  let dir; let server; let openai; let anthropic;

  before(async () => {
    dir = tempDir('agent-tools');
    server = await startServer({
      model: makeModel(dir), args: ['--chat-template', 'Qwen3.5-4B', '--ctx', '4096'] });
    openai = client(server);
    anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  function assertArgs(args) {
    assert.ok(Number.isInteger(args.days), JSON.stringify(args));
    assert.equal(typeof args.metric, 'boolean', JSON.stringify(args));
  }

  describe('Responses', () => {
    const tools = [{ type: 'function', name: FORECAST.name, description: FORECAST.description,
      parameters: FORECAST.schema }];
    const forced = () => ({ model: 'tiny', instructions: SYS, input: 'Weather in Paris?', tools,
      tool_choice: 'required', enable_thinking: false, max_output_tokens: 300 });

    it('tool_choice required gives a function_call item of the schema', async () => {
      const r = await openai.responses.create(forced());
      assert.equal(r.status, 'completed', JSON.stringify(r.output));
      const calls = r.output.filter((o) => o.type === 'function_call');
      assert.equal(calls.length, 1, JSON.stringify(r.output));
      assert.equal(calls[0].name, 'forecast');
      assert.ok(calls[0].call_id.length > 0);
      assertArgs(JSON.parse(calls[0].arguments));
    });

    it('streams the call as function_call_arguments events', async () => {
      const full = await openai.responses.create(forced());
      const stream = await openai.responses.create({ ...forced(), stream: true });
      let added = null; let args = ''; let done = null; let last = null;
      for await (const e of stream) {
        if (e.type === 'response.output_item.added' && e.item.type === 'function_call') added = e.item;
        if (e.type === 'response.function_call_arguments.delta') args += e.delta;
        if (e.type === 'response.function_call_arguments.done') done = e.arguments;
        last = e;
      }
      assert.equal(added?.name, 'forecast');
      assert.equal(done, args);
      assert.equal(last.type, 'response.completed');
      const call = last.response.output.find((o) => o.type === 'function_call');
      assert.equal(call.arguments, args);
      const want = full.output.find((o) => o.type === 'function_call');
      assert.deepEqual(JSON.parse(args), JSON.parse(want.arguments));
    });

    it('sends the model\'s call back with its output; the next turn is cached', async () => {
      const first = await openai.responses.create(forced());
      const call = first.output.find((o) => o.type === 'function_call');
      const second = await openai.responses.create({
        model: 'tiny', instructions: SYS, tools, enable_thinking: false, max_output_tokens: 4,
        input: [{ role: 'user', content: 'Weather in Paris?' }, ...first.output,
          { type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }] });
      const cached = second.usage.input_tokens_details.cached_tokens;
      assert.ok(cached >= first.usage.input_tokens - 8, `${cached} of ${first.usage.input_tokens}`);
    });
  });

  // The template opens a thinking block; the random model never closes it within the budget,
  // so the whole reply is reasoning.
  it('Responses: reasoning comes as a reasoning item, streamed as reasoning_text deltas', async () => {
    const request = { model: 'tiny', input: 'Weather?', reasoning: { effort: 'high' }, max_output_tokens: 16 };
    const full = await openai.responses.create(request);
    const item = full.output.find((o) => o.type === 'reasoning');
    assert.ok(item?.content?.[0]?.text?.length > 0, JSON.stringify(full.output));
    let text = ''; let done = null;
    for await (const e of await openai.responses.create({ ...request, stream: true })) {
      if (e.type === 'response.reasoning_text.delta') text += e.delta;
      if (e.type === 'response.reasoning_text.done') done = e.text;
    }
    assert.equal(text, item.content[0].text);
    assert.equal(done, text);
  });

  it('Messages: thinking comes as a thinking block, streamed as thinking deltas', async () => {
    const request = { model: 'tiny', max_tokens: 16, thinking: { type: 'enabled', budget_tokens: 1024 },
      messages: [{ role: 'user', content: 'Weather?' }] };
    const full = await anthropic.messages.create(request);
    assert.equal(full.content[0].type, 'thinking', JSON.stringify(full.content));
    assert.ok(full.content[0].thinking.length > 0);
    const deltas = [];
    const stream = anthropic.messages.stream(request);
    stream.on('streamEvent', (e) => { if (e.type === 'content_block_delta') deltas.push(e.delta.type); });
    const final = await stream.finalMessage();
    assert.deepEqual(final.content, full.content);
    assert.ok(deltas.includes('thinking_delta') && deltas.includes('signature_delta'), deltas.join());
  });

  describe('Messages', () => {
    const tools = [{ name: FORECAST.name, description: FORECAST.description, input_schema: FORECAST.schema }];
    const messages = [{ role: 'user', content: 'Weather in Paris?' }];
    const forced = () => ({ model: 'tiny', system: SYS, messages, tools, tool_choice: { type: 'any' },
      thinking: { type: 'disabled' }, max_tokens: 300 });

    it('tool_choice any gives a tool_use block of the schema', async () => {
      const m = await anthropic.messages.create(forced());
      assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
      const uses = m.content.filter((b) => b.type === 'tool_use');
      assert.equal(uses.length, 1, JSON.stringify(m.content));
      assert.equal(uses[0].name, 'forecast');
      assert.ok(uses[0].id.length > 0);
      assertArgs(uses[0].input);
    });

    it('with thinking on, tool_choice tool gives a thinking block, then that tool_use', async () => {
      const m = await anthropic.messages.create({ ...forced(), tool_choice: { type: 'tool', name: 'forecast' },
        thinking: { type: 'enabled', budget_tokens: 8 } });
      assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
      assert.equal(m.content[0].type, 'thinking', JSON.stringify(m.content));
      const use = m.content.find((b) => b.type === 'tool_use');
      assert.equal(use.name, 'forecast');
      assertArgs(use.input);
    });

    it('streams the same tool_use with messages.stream', async () => {
      const full = await anthropic.messages.create(forced());
      const final = await anthropic.messages.stream(forced()).finalMessage();
      assert.equal(final.stop_reason, 'tool_use');
      const use = final.content.find((b) => b.type === 'tool_use');
      assertArgs(use.input);
      assert.deepEqual(use.input, full.content.find((b) => b.type === 'tool_use').input);
    });

    it('sends the model\'s tool_use back with a tool_result; the next turn is cached', async () => {
      const first = await anthropic.messages.create(forced());
      const use = first.content.find((b) => b.type === 'tool_use');
      const second = await anthropic.messages.create({
        model: 'tiny', system: SYS, tools, thinking: { type: 'disabled' }, max_tokens: 4,
        messages: [...messages, { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp": 21}' }] }] });
      const firstPrompt = first.usage.input_tokens + first.usage.cache_read_input_tokens;
      assert.ok(second.usage.cache_read_input_tokens >= firstPrompt - 8,
        `${second.usage.cache_read_input_tokens} of ${firstPrompt}`);
    });
  });
});

// Anthropic clients send their key as x-api-key: with --api-key-file, the right key is served
// and a wrong one gets 401 in Anthropic's shape.
describe('Agent APIs with API keys', () => {
  let dir; let server;

  before(async () => {
    dir = tempDir('agent-keys');
    server = await startServer({ model: makeModel(dir), args: ['--api-key-file', writeKeys(dir, ['sk-agent'])] });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('Messages take the key from x-api-key; a wrong key is an authentication_error', async () => {
    const request = { model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] };
    const ok = new Anthropic({ baseURL: server.url, apiKey: 'sk-agent', maxRetries: 0 });
    assert.equal((await ok.messages.create(request)).type, 'message');
    const bad = new Anthropic({ baseURL: server.url, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(bad.messages.create(request),
      (e) => e.status === 401 && e.error?.error?.type === 'authentication_error');
    await assert.rejects(client(server, 'sk-wrong').responses.create({ model: 'tiny', input: 'hi' }),
      (e) => e.status === 401);
    const r = await client(server, 'sk-agent').responses.create({ model: 'tiny', input: 'hi', max_output_tokens: 4 });
    assert.equal(r.object, 'response');
  });
});
