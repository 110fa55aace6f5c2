// Tool arguments held to their JSON Schema on every tool-call format: a schema suite (enum,
// const, integer bounds, string lengths, a pattern, booleans and null, a nested object, an
// array of objects, optional properties, additionalProperties: false) x templates x
// tool_choice required and a named function. The tiny random model writes whatever the grammar
// lets it, so every parsed call must validate against its tool's schema (ajv, a real JSON
// Schema validator) and the reply must end as a call (finish_reason tool_calls), not run to
// max_tokens inside a value. On two templates tool_choice auto too, with the call started by
// a bias on its start word; on Qwen3.5 a stream, the Responses API and the Messages API too. The XML-style formats (Qwen3.5/Qwen3-Coder, GLM, DeepSeek DSML,
// MiniMax, Ling, MiniCPM5, Kimi K3) write a string as raw text up to a closing tag; patch 0020
// gives that text its schema's grammar.
//
// The test command runs one template per way a format's grammar is built (SAMPLE, about a
// minute on 2 cores); PREFIXD_SCHEMA_SWEEP=1 runs every pinned template with a tool format
// (SWEEP, about 6 minutes); PREFIXD_SCHEMA_TEMPLATES=A,B runs those. PREFIXD_E2E_PORT=N serves
// on port N instead of a free one.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';
import { client, makeModel, post, startServer, tempDir } from './harness.js';

const SAMPLE = [
  'Qwen3.5-4B',                                 // <parameter=NAME> raw text (qwen3-coder parser)
  'GLM-4.7-Flash',                              // <arg_key>/<arg_value> (common's autoparser)
  'deepseek-ai-DeepSeek-V3.2',                  // DSML <parameter name="..." string="true">
  'MiniMax-M3',                                 // nested XML elements
  'inclusionai-ling-3.0-flash',                 // Ling 3 arg_key/arg_value
  'openbmb-MiniCPM5-1B',                        // <param name="...">
  'Kimi-K3',                                    // XTML argument tags
  'LFM2.5-Instruct',                            // Python-style calls
  'google-gemma-4-31B-it',                      // Gemma 4 call syntax
  'meta-llama-Llama-3.1-8B-Instruct',           // bare JSON
  'NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use',  // JSON in <tool_call> tags
  'openai-gpt-oss-120b',                        // Harmony channels
];

// Every pinned template with a tool format (the engine's ForcedCallTest list).
const SWEEP = [
  'Apertus-8B-Instruct', 'Apriel-1.6-15b-Thinker-fixed', 'Bielik-11B-v3.0-Instruct',
  'ByteDance-Seed-OSS', 'Cohere2MoE', 'CohereForAI-c4ai-command-r-plus-tool_use',
  'CohereForAI-c4ai-command-r7b-12-2024-tool_use', 'GLM-4.6', 'GLM-4.7-Flash',
  'GigaChat3-10B-A1.8B', 'GigaChat3.1-10B-A1.8B', 'Kimi-K2-Instruct', 'Kimi-K2-Thinking',
  'Kimi-K3', 'LFM2-8B-A1B', 'LFM2.5-8B-A1B', 'LFM2.5-Instruct', 'MiMo-VL', 'MiniMax-M1',
  'MiniMax-M2', 'MiniMax-M3', 'Mistral-Small-3.2-24B-Instruct-2506',
  'NVIDIA-Nemotron-3-Nano-30B-A3B-BF16', 'NVIDIA-Nemotron-Nano-v2',
  'NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use', 'NousResearch-Hermes-3-Llama-3.1-8B-tool_use',
  'Qwen-QwQ-32B', 'Qwen-Qwen2.5-7B-Instruct', 'Qwen-Qwen3-0.6B', 'Qwen3-Coder', 'Qwen3.5-4B',
  'Reka-Edge', 'Spark2.5', 'StepFun3.5-Flash', 'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B',
  'deepseek-ai-DeepSeek-V3.1', 'deepseek-ai-DeepSeek-V3.2', 'deepseek-ai-DeepSeek-V4-Flash-0731',
  'deepseek-ai-DeepSeek-V4', 'fireworks-ai-llama-3-firefunction-v2', 'google-gemma-4-31B-it',
  'google-gemma-4-31B-it-interleaved', 'ibm-granite-granite-4.0', 'ibm-granite-granite-4.1',
  'inclusionai-ling-3.0-flash', 'llama-cpp-deepseek-r1', 'meetkai-functionary-medium-v3.1',
  'meetkai-functionary-medium-v3.2', 'meta-llama-Llama-3.1-8B-Instruct',
  'meta-llama-Llama-3.2-3B-Instruct', 'meta-llama-Llama-3.3-70B-Instruct',
  'mistralai-Ministral-3-14B-Reasoning-2512', 'mistralai-Mistral-Nemo-Instruct-2407',
  'moonshotai-Kimi-K2', 'muse-glimmer', 'openai-gpt-oss-120b', 'openbmb-MiniCPM5-1B',
  'poolside-Laguna-S-2.1', 'poolside-Laguna-XS-2.1', 'poolside-Laguna-XS.2', 'tencent-Hy3',
  'unsloth-Apriel-1.5', 'unsloth-mistral-Devstral-Small-2507', 'upstage-Solar-Open-100B',
];

const TEMPLATES = process.env.PREFIXD_SCHEMA_TEMPLATES?.split(',') ??
  (process.env.PREFIXD_SCHEMA_SWEEP ? SWEEP : SAMPLE);

const object = (properties, required = Object.keys(properties), extra = {}) =>
  ({ type: 'object', properties, required, additionalProperties: false, ...extra });

// One tool per schema feature. Every string is bounded or an enum, so a held value ends: a
// random model writes free text to max_tokens wherever a grammar lets it.
const SCHEMAS = {
  enum: object({ mode: { type: 'string', enum: ['read', 'write'] }, n: { type: 'integer' } }),
  const: object({ kind: { const: 'file' }, version: { type: 'string', const: 'v2' } }),
  integer_bounds: object({ n: { type: 'integer', minimum: 1, maximum: 9 },
    offset: { type: 'integer', minimum: -5, maximum: 5 } }),
  string_length: object({ path: { type: 'string', minLength: 2, maxLength: 8 },
    code: { type: 'string', minLength: 3, maxLength: 3 } }),
  pattern: object({ tag: { type: 'string', pattern: '^[a-z]{2,4}-[0-9]{1,3}$' } }),
  scalars: object({ flag: { type: 'boolean' }, ratio: { type: 'number', minimum: 0, maximum: 1 },
    lat: { type: 'number', minimum: -90, maximum: 90 } }),
  null: object({ none: { type: 'null' }, maybe: { type: ['integer', 'null'] } }),
  nested_object: object({ opts: object({ depth: { type: 'integer', minimum: 0, maximum: 3 },
    follow: { type: 'boolean' }, mode: { type: 'string', enum: ['fast', 'full'] } }) }),
  array_of_objects: object({ edits: { type: 'array', minItems: 1, maxItems: 3,
    items: object({ line: { type: 'integer', minimum: 1, maximum: 99 },
      text: { type: 'string', maxLength: 10 } }) } }),
  optional_properties: object({ status: { type: 'string', enum: ['pending', 'done'] },
    priority: { type: 'string', enum: ['low', 'high'] }, count: { type: 'integer', minimum: 0, maximum: 9 },
    note: { type: 'string', maxLength: 6 } }, ['status']),
};

const ajv = new Ajv({ strict: false, allErrors: true });
const MAX = 400;

const toolOf = (name) => ({ type: 'function',
  function: { name, description: `the ${name} tool`, parameters: SCHEMAS[name], strict: true } });
const DECOY = { type: 'function', function: { name: 'decoy', description: 'unused',
  parameters: object({ x: { type: 'string', enum: ['a'] } }) } };

// What a template cannot take, said here so the table in docs/llama-patches.md and this test
// agree. Some templates' Jinja cannot render a tool whose schema has a property without a
// "type" (a const), a null type, or an array of objects: the request is a 400 naming the
// template before any grammar is made.
const NO_RENDER = 'the template cannot render this schema';
const NOT_HELD = {
  'ByteDance-Seed-OSS': { const: NO_RENDER, null: NO_RENDER },
  'CohereForAI-c4ai-command-r-plus-tool_use': { null: NO_RENDER, array_of_objects: NO_RENDER },
  'GigaChat3-10B-A1.8B': { null: NO_RENDER },
  'GigaChat3.1-10B-A1.8B': { null: NO_RENDER },
  'NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use': { null: NO_RENDER },
  'NousResearch-Hermes-3-Llama-3.1-8B-tool_use': { null: NO_RENDER },
};

// tool_choice auto: the grammar waits for the call's start word (lazy). A bias on that word (one
// token here) makes the random model start a call; from there the grammar holds its arguments.
const AUTO_START = { 'Qwen3.5-4B': '<tool_call>', 'GLM-4.7-Flash': '<tool_call>' };

async function checkCall(openai, template, name, tools, tool_choice, extra = {}) {
  // A template that always thinks (Kimi K3) gets its block ended after 8 tokens: a random model
  // never ends it by itself.
  const r = await openai.chat.completions.create({ model: 'tiny', tools, tool_choice,
    messages: [{ role: 'user', content: `Use the ${name} tool.` }], enable_thinking: false,
    thinking_budget_tokens: 8, max_tokens: MAX, ...extra });
  const choice = r.choices[0];
  const where = `${template} ${name}: ${JSON.stringify(choice.message)}`;
  assert.equal(choice.finish_reason, 'tool_calls', where);
  assert.equal(choice.message.tool_calls?.length, 1, where);
  const call = choice.message.tool_calls[0].function;
  assert.equal(call.name, name, where);
  const args = JSON.parse(call.arguments);
  const validate = ajv.compile(SCHEMAS[name]);
  assert.ok(validate(args), `${where}\n${ajv.errorsText(validate.errors)}`);
}

for (const template of TEMPLATES) {
  describe(`schema-held calls: ${template}`, () => {
    let dir; let server; let openai;

    before(async () => {
      dir = tempDir('schema');
      const port = process.env.PREFIXD_E2E_PORT ? ['--port', process.env.PREFIXD_E2E_PORT] : [];
      server = await startServer({ model: makeModel(dir),
        args: ['--chat-template', template, '--ctx', '4096', ...port] });
      openai = client(server);
    });
    after(async () => {
      await server?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    if (template === 'Qwen3.5-4B') {
      // The grammar is the same for every API and for a stream: checked once on each.
      it('streamed chat, Responses and Messages calls validate too', async () => {
        const validate = ajv.compile(SCHEMAS.optional_properties);
        let args = ''; let finish = null;
        for await (const chunk of await openai.chat.completions.create({ model: 'tiny', stream: true,
          tools: [toolOf('optional_properties')], tool_choice: 'required', enable_thinking: false,
          messages: [{ role: 'user', content: 'Go.' }], max_tokens: MAX })) {
          const c = chunk.choices[0];
          for (const d of c?.delta?.tool_calls ?? []) args += d.function?.arguments ?? '';
          if (c?.finish_reason) finish = c.finish_reason;
        }
        assert.equal(finish, 'tool_calls');
        assert.ok(validate(JSON.parse(args)), `${args}\n${ajv.errorsText(validate.errors)}`);

        const r = await openai.responses.create({ model: 'tiny', input: 'Go.', enable_thinking: false,
          tools: [{ type: 'function', name: 'optional_properties', parameters: SCHEMAS.optional_properties }],
          tool_choice: { type: 'function', name: 'optional_properties' }, max_output_tokens: MAX });
        assert.equal(r.status, 'completed', JSON.stringify(r.output));
        const call = r.output.find((o) => o.type === 'function_call');
        assert.ok(validate(JSON.parse(call.arguments)), `${call.arguments}\n${ajv.errorsText(validate.errors)}`);

        const m = await new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 }).messages.create({
          model: 'tiny', max_tokens: MAX, thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'Go.' }],
          tools: [{ name: 'optional_properties', input_schema: SCHEMAS.optional_properties }],
          tool_choice: { type: 'any' } });
        assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
        const use = m.content.find((b) => b.type === 'tool_use');
        assert.ok(validate(use.input), `${JSON.stringify(use.input)}\n${ajv.errorsText(validate.errors)}`);
      });

      it('a keyword no grammar holds is logged once per tool and request; the rest is held', async () => {
        const FETCH = object({ url: { type: 'string', format: 'uri', maxLength: 16 } });
        const tools = [{ type: 'function', function: { name: 'fetch', parameters: FETCH } }];
        const line = 'tool \'fetch\': no grammar holds properties.url: format "uri"';
        const count = () => server.log.split(line).length - 1;
        for (const n of [1, 2]) {
          const r = await openai.chat.completions.create({ model: 'tiny', tools, tool_choice: 'required',
            messages: [{ role: 'user', content: 'Fetch it.' }], enable_thinking: false, max_tokens: MAX });
          assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
          const args = JSON.parse(r.choices[0].message.tool_calls[0].function.arguments);
          assert.ok(typeof args.url === 'string' && [...args.url].length <= 16, JSON.stringify(args));
          assert.equal(count(), n, server.log);
        }
      });
    }

    for (const name of Object.keys(SCHEMAS)) {
      const skip = NOT_HELD[template]?.[name] ?? false;
      it(`${name}: required and named calls validate`, { skip }, async () => {
        await checkCall(openai, template, name, [toolOf(name)], 'required');
        await checkCall(openai, template, name, [DECOY, toolOf(name)],
          { type: 'function', function: { name } });
        if (AUTO_START[template]) {
          const t = await post(server, '/tokenize', { content: AUTO_START[template] });
          assert.equal(t.json.tokens.length, 1, JSON.stringify(t.json));
          await checkCall(openai, template, name, [toolOf(name)], 'auto',
            { logit_bias: { [t.json.tokens[0]]: 100 } });
        }
      });
    }
  });
}
