// Forced tool calls through the official clients, one server per tool-call format (the tiny
// random model with each pinned template): chat completions, Responses and Messages, each with
// "any call" (required / any) and a named tool, streamed and not. Every reply is a parsed call of
// the tool with arguments of its schema and the API's own stop reason; a streamed call carries
// its id and name first and its arguments in pieces, and the final object equals the streamed
// one. The next turn, which sends the call and its result back, reuses >= 0.99 of the reusable
// tokens. The engine's ForcedCallTest runs the same on every pinned template; these are the
// formats agents meet, end to end.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import { client, makeModel, post, startServer, tempDir } from './harness.js';

const TEMPLATES = [
  'Qwen3.5-4B',                                 // XML parameters (Qwen3-Coder style)
  'meta-llama-Llama-3.1-8B-Instruct',           // bare JSON, started by a pattern
  'openai-gpt-oss-120b',                        // Harmony channels
  'GLM-4.7-Flash',                              // tagged <arg_key>/<arg_value> pairs
  'moonshotai-Kimi-K2',                         // functions.NAME:IDX sections
  'deepseek-ai-DeepSeek-V3.2',                  // DSML invoke/parameter
  'unsloth-mistral-Devstral-Small-2507',        // [TOOL_CALLS]NAME[ARGS]
  'NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use',  // Hermes <tool_call> JSON
  'google-gemma-4-31B-it',                      // Gemma 4 call syntax
  'LFM2.5-Instruct',                            // Python-style calls
];

const FORECAST = {
  name: 'forecast', description: 'Weather forecast',
  schema: { type: 'object', required: ['days', 'metric'],
    properties: { days: { type: 'integer' }, metric: { type: 'boolean' } } },
};
const CLOCK = {
  name: 'clock', description: 'The time',
  schema: { type: 'object', required: ['utc'], properties: { utc: { type: 'boolean' } } },
};
const SYS = 'You are a weather agent. Call tools when they help.';
const ASK = 'Weather in Paris?';
const MAX = 300;

function assertArgs(name, args) {
  if (name === 'forecast') {
    assert.ok(Number.isInteger(args.days), JSON.stringify(args));
    assert.equal(typeof args.metric, 'boolean', JSON.stringify(args));
  } else {
    assert.equal(typeof args.utc, 'boolean', JSON.stringify(args));
  }
}

function commonPrefix(a, b) {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

for (const template of TEMPLATES) {
  describe(`forced calls: ${template}`, () => {
    let dir; let server; let openai; let anthropic;

    before(async () => {
      dir = tempDir('forced');
      server = await startServer({
        model: makeModel(dir), args: ['--chat-template', template, '--ctx', '4096'] });
      openai = client(server);
      anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
    });
    after(async () => {
      await server?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    describe('chat completions', () => {
      const tools = [FORECAST, CLOCK].map((t) => ({ type: 'function',
        function: { name: t.name, description: t.description, parameters: t.schema } }));
      const history = [{ role: 'system', content: SYS }, { role: 'user', content: ASK }];
      const request = (tool_choice) => ({ model: 'tiny', messages: history, tools, tool_choice,
        enable_thinking: false, max_tokens: MAX });

      it('required: one parsed call; the next turn reuses the prompt', async () => {
        const r = await openai.chat.completions.create(request('required'));
        const choice = r.choices[0];
        assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
        assert.equal(choice.message.tool_calls.length, 1, JSON.stringify(choice.message));
        const call = choice.message.tool_calls[0];
        assert.ok(call.id.length > 0);
        assertArgs(call.function.name, JSON.parse(call.function.arguments));

        const tokensOf = async (msgs) => {
          const t = await post(server, '/apply-template', { messages: msgs, tools, enable_thinking: false });
          assert.equal(t.status, 200, t.text);
          return t.json.tokens;
        };
        const next = [...history, { role: 'assistant', content: choice.message.content, tool_calls: [call] },
          { role: 'tool', tool_call_id: call.id, content: '{"temp": 21}' }];
        const reusable = commonPrefix(await tokensOf(history), await tokensOf(next));
        const second = await openai.chat.completions.create({ model: 'tiny', messages: next, tools,
          enable_thinking: false, max_tokens: 4 });
        const cached = Math.min(second.usage.prompt_tokens_details.cached_tokens, reusable);
        assert.ok(reusable > 0 && cached >= 0.99 * reusable, `cached ${cached} of ${reusable} reusable`);
      });

      it('a named function, streamed: id and name first, arguments in pieces', async () => {
        const choice = { type: 'function', function: { name: 'clock' } };
        const full = await openai.chat.completions.create(request(choice));
        const want = full.choices[0].message.tool_calls?.[0];
        assert.equal(want?.function?.name, 'clock', JSON.stringify(full.choices[0]));
        let first = null; let args = ''; let pieces = 0; let finish = null;
        for await (const chunk of await openai.chat.completions.create({ ...request(choice), stream: true })) {
          const c = chunk.choices[0];
          if (!c) continue;
          for (const d of c.delta?.tool_calls ?? []) {
            if (!first) first = d;
            if (d.function?.arguments) { args += d.function.arguments; pieces++; }
          }
          if (c.finish_reason) finish = c.finish_reason;
        }
        assert.ok(first?.id?.length > 0, JSON.stringify(first));
        assert.equal(first.function.name, 'clock');
        assert.ok(pieces >= 1);
        assert.equal(finish, 'tool_calls');
        assert.deepEqual(JSON.parse(args), JSON.parse(want.function.arguments));
      });
    });

    describe('Responses', () => {
      const tools = [FORECAST, CLOCK].map((t) => ({ type: 'function', name: t.name,
        description: t.description, parameters: t.schema }));
      const request = (tool_choice) => ({ model: 'tiny', instructions: SYS, input: ASK, tools,
        tool_choice, enable_thinking: false, max_output_tokens: MAX });

      it('required: one function_call item', async () => {
        const r = await openai.responses.create(request('required'));
        assert.equal(r.status, 'completed', JSON.stringify(r.output));
        const calls = r.output.filter((o) => o.type === 'function_call');
        assert.equal(calls.length, 1, JSON.stringify(r.output));
        assert.ok(calls[0].call_id.length > 0);
        assertArgs(calls[0].name, JSON.parse(calls[0].arguments));
      });

      it('a named function, streamed: the completed item is the streamed one', async () => {
        let added = null; let args = ''; let done = null; let last = null;
        for await (const e of await openai.responses.create({ ...request({ type: 'function', name: 'clock' }),
          stream: true })) {
          if (e.type === 'response.output_item.added' && e.item.type === 'function_call') added = e.item;
          if (e.type === 'response.function_call_arguments.delta') args += e.delta;
          if (e.type === 'response.function_call_arguments.done') done = e.arguments;
          last = e;
        }
        assert.equal(added?.name, 'clock', JSON.stringify(added));
        assert.equal(done, args);
        assert.equal(last.type, 'response.completed');
        const item = last.response.output.find((o) => o.type === 'function_call');
        assert.equal(item.id, added.id);
        assert.equal(item.call_id, added.call_id);
        assert.equal(item.arguments, args);
        assertArgs('clock', JSON.parse(args));
      });
    });

    describe('Messages', () => {
      const tools = [FORECAST, CLOCK].map((t) => ({ name: t.name, description: t.description,
        input_schema: t.schema }));
      const request = (tool_choice) => ({ model: 'tiny', system: SYS, tools, tool_choice,
        messages: [{ role: 'user', content: ASK }], thinking: { type: 'disabled' }, max_tokens: MAX });

      it('any: one tool_use block', async () => {
        const m = await anthropic.messages.create(request({ type: 'any' }));
        assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
        const uses = m.content.filter((b) => b.type === 'tool_use');
        assert.equal(uses.length, 1, JSON.stringify(m.content));
        assert.ok(uses[0].id.length > 0);
        assertArgs(uses[0].name, uses[0].input);
      });

      it('tool, streamed: input_json_delta pieces; the final message is the streamed one', async () => {
        const stream = anthropic.messages.stream(request({ type: 'tool', name: 'clock' }));
        let start = null; let json = ''; let pieces = 0;
        stream.on('streamEvent', (e) => {
          if (e.type === 'content_block_start' && e.content_block.type === 'tool_use') start = e.content_block;
          if (e.type === 'content_block_delta' && e.delta.type === 'input_json_delta') {
            json += e.delta.partial_json; pieces++;
          }
        });
        const final = await stream.finalMessage();
        assert.equal(final.stop_reason, 'tool_use');
        const use = final.content.find((b) => b.type === 'tool_use');
        assert.equal(start?.name, 'clock', JSON.stringify(start));
        assert.equal(use.id, start.id);
        assert.ok(pieces >= 1);
        assert.deepEqual(use.input, JSON.parse(json));
        assertArgs('clock', use.input);
      });
    });
  });
}
