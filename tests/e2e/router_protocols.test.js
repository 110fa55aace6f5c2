// What the routers built for vLLM and SGLang read of a real prefixd (docs/deployment.md, "Behind
// llm-d, Dynamo, SMG and the Inference Gateway"). None of them installs here (Go, Rust and
// container builds), so their side is written down from their sources:
// - llm-d's kv-cache indexer tokenizes each request with POST /v1/chat/completions/render and
//   /v1/completions/render (vLLM's GenerateRequest: {token_ids, ...}): the ids must be exactly
//   those the chat completion evaluates, or its prefix scores name blocks prefixd never holds.
// - The Inference Gateway's endpoint picker, SMG's load monitor and AIBrix read vLLM's gauges
//   on /metrics: vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
//   vllm:cache_config_info.
// - SMG (lightseekorg/smg, workflow/steps/local/detect_backend.rs and worker/monitor.rs) takes
//   an HTTP worker's runtime from /v1/models' owned_by ("sglang", "nvidia", "vllm"), else from
//   GET /version (vLLM), else GET /server_info (SGLang); a vLLM worker's load is its /metrics.
//
// The model is pure attention (llama) with the real Qwen3.5 tokenizer and template, so that a
// prompt whose prefix the slot holds restores all of it but the one token evaluated: that tells
// whether the rendered ids are the very ids the slot evaluated.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, client, metrics, post, sleep, startServer, tempDir } from './harness.js';

const FORECAST = {
  type: 'function',
  function: {
    name: 'forecast', description: 'Weather forecast for a city',
    parameters: {
      type: 'object', required: ['city', 'days'],
      properties: { city: { type: 'string' }, days: { type: 'integer' } },
    },
  },
};

// A system prompt, tools, and several turns with a tool call and its result.
const CHAT = {
  model: 'tiny',
  messages: [
    { role: 'system', content: 'You are a weather agent. Call tools when they help.' },
    { role: 'user', content: 'Weather in Paris for three days?' },
    {
      role: 'assistant', content: '',
      tool_calls: [{
        id: 'call00001', type: 'function',
        function: { name: 'forecast', arguments: '{"city": "Paris", "days": 3}' },
      }],
    },
    { role: 'tool', tool_call_id: 'call00001', content: '{"temps": [21, 23, 19]}' },
    { role: 'assistant', content: 'Warm, then cooler on Thursday.' },
    { role: 'user', content: 'And in Lyon?' },
  ],
  tools: [FORECAST],
  chat_template_kwargs: { enable_thinking: false },
  temperature: 0,
};

// ignore_eos: the random model may end at once; the metrics test needs a long generation.
const LONG = { model: 'tiny', max_tokens: 3500, temperature: 0, ignore_eos: true };

// Prometheus text format 0.0.4: `name{k="v",...} value` samples and `# TYPE name type` lines.
function parseProm(page) {
  const types = new Map(); const samples = [];
  for (const line of page.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) { types.set(t[1], t[2]); continue; }
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `not a sample line: ${line}`);
    const labels = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return { types, samples };
}

// The one sample of `name`; fails when there is none or several.
function only(prom, name) {
  const found = prom.samples.filter((s) => s.name === name);
  assert.equal(found.length, 1, `${name}: ${found.length} samples`);
  return found[0];
}

// SMG's HTTP runtime detection, as detect_backend.rs writes it.
async function smgRuntime(url) {
  const models = await (await fetch(`${url}/v1/models`)).json();
  const ownedBy = models.data?.[0]?.owned_by;
  if (ownedBy === 'sglang' || ownedBy === 'nvidia') return 'sglang';
  if (ownedBy === 'vllm') return 'vllm';
  if ((await fetch(`${url}/version`)).ok) return 'vllm';
  if ((await fetch(`${url}/server_info`)).ok) return 'sglang';
  return null;
}

// Asserts that `ids`, `body`'s render, are the very ids a chat completion of `body` evaluates on
// `server` (--slots 1, a pure-attention model). The one slot then holds what the chat
// evaluated: the ids as a prompt restore as much of it as an exact repeat of that prompt does
// (the reference: the slot then holds the ids themselves) only if every id is one the slot
// evaluated; an id that differs at k stops the restore at k (the control).
async function assertRenderIsEvaluated(server, body, ids) {
  const openai = client(server);
  const done = await openai.chat.completions.create({ ...body, max_tokens: 1 });
  assert.equal(done.usage.prompt_tokens, ids.length);
  const cachedOf = async (prompt) => (await openai.completions.create(
    { model: 'tiny', prompt, max_tokens: 1 })).usage.prompt_tokens_details.cached_tokens;
  const afterChat = await cachedOf(ids);
  const repeat = await cachedOf(ids);
  assert.ok(repeat >= ids.length - 2, `an exact repeat restores ${repeat} of ${ids.length}`);
  assert.equal(afterChat, repeat);
  const k = Math.floor(ids.length / 2);
  const changed = ids.map((t, i) => (i === k ? (t === 100 ? 101 : 100) : t));
  const off = await cachedOf(changed);
  assert.ok(off <= k, `${off} cached past the changed id at ${k}`);
}

// A tiny random llama (pure attention) with the real Qwen3.5 tokenizer and template, named
// tiny.gguf: the model's id is `tiny`.
function makeLlama(dir) {
  const model = join(dir, 'tiny.gguf');
  execFileSync(BIN, ['make-test-model', '--arch', 'llama', '--shape', 'tiny', '--vocab', 'qwen35',
    '--template', 'Qwen3.5-4B', '--out', model], { stdio: ['ignore', 'ignore', 'inherit'] });
  return model;
}

describe('the routers\' protocols on a real server', () => {
  let dir; let server; let openai; let modelId;

  before(async () => {
    dir = tempDir('router-protocols');
    server = await startServer({ model: makeLlama(dir), args: ['--slots', '1', '--ctx', '4096'] });
    openai = client(server);
    modelId = (await (await fetch(`${server.url}/v1/models`)).json()).data[0].id;
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('chat render ids are the very ids the chat completion evaluates', async () => {
    const r = await post(server, '/v1/chat/completions/render', CHAT);
    assert.equal(r.status, 200, r.text);
    const ids = r.json.token_ids;
    assert.ok(ids.length > 100 && ids.every(Number.isInteger), JSON.stringify(r.json).slice(0, 300));
    assert.match(r.json.request_id, /^chatcmpl-/);
    assert.equal(r.json.model, 'tiny');
    // The rendered text tokenizes back to the same ids (Qwen's tokenizer adds no BOS).
    const text = (await post(server, '/apply-template', CHAT)).json.prompt;
    assert.match(text, /forecast[\s\S]*And in Lyon\?/);
    assert.deepEqual((await post(server, '/tokenize', { content: text })).json.tokens, ids);

    await assertRenderIsEvaluated(server, CHAT, ids);
  });

  it('completions render answers one GenerateRequest per prompt, text or ids', async () => {
    const prompt = 'The quick brown fox jumps over the lazy dog.';
    const r = await post(server, '/v1/completions/render', { model: 'tiny', prompt, max_tokens: 5 });
    assert.equal(r.status, 200, r.text);
    assert.ok(Array.isArray(r.json) && r.json.length === 1, r.text);
    const [g] = r.json;
    assert.match(g.request_id, /^cmpl-/);
    assert.equal(g.sampling_params.max_tokens, 5);
    assert.deepEqual(g.token_ids, (await post(server, '/tokenize', { content: prompt })).json.tokens);
    const done = await openai.completions.create({ model: 'tiny', prompt, max_tokens: 1 });
    assert.equal(done.usage.prompt_tokens, g.token_ids.length);
    const asIds = await post(server, '/v1/completions/render', { prompt: g.token_ids });
    assert.deepEqual(asIds.json[0].token_ids, g.token_ids);
  });

  it('a render refuses what the completion refuses, with its status and error', async () => {
    for (const [path, body, status] of [
      ['/v1/chat/completions', { ...CHAT, model: 'gpt-9' }, 404],
      ['/v1/chat/completions', { model: 'tiny' }, 400],
      ['/v1/completions', { prompt: ['one', 'two'] }, 400],
    ]) {
      const render = await post(server, `${path}/render`, body);
      const done = await post(server, path, body);
      assert.equal(render.status, status, render.text);
      assert.equal(done.status, status, done.text);
      assert.equal(typeof render.json.error.message, 'string');
      assert.equal(render.json.error.code, done.json.error.code);
    }
  });

  it('the vllm: gauges are on /metrics and move as requests run and wait', async () => {
    const idle = parseProm(await metrics(server));
    for (const name of ['vllm:num_requests_running', 'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc', 'vllm:cache_config_info']) {
      assert.equal(idle.types.get(name), 'gauge', name);
      assert.equal(only(idle, name).labels.model_name, modelId, name);
    }
    const info = only(idle, 'vllm:cache_config_info');
    assert.equal(info.value, 1);
    assert.equal(Number(info.labels.num_gpu_blocks) * Number(info.labels.block_size) <= 4096, true);
    assert.equal(Number(info.labels.kv_cache_size_tokens), 4096);  // one slot of --ctx 4096
    assert.equal(only(idle, 'vllm:num_requests_running').value, 0);
    assert.equal(only(idle, 'vllm:num_requests_waiting').value, 0);
    assert.equal(only(idle, 'vllm:kv_cache_usage_perc').value, 0);
    const queries0 = only(idle, 'vllm:prefix_cache_queries_total').value;

    const controller = new AbortController();
    const stream = await openai.chat.completions.create(
      { ...LONG, stream: true, messages: CHAT.messages, tools: CHAT.tools },
      { signal: controller.signal });
    const chunks = stream[Symbol.asyncIterator]();
    await chunks.next();  // the slot is taken once text flows
    const queued = post(server, '/v1/chat/completions',
      { model: 'tiny', max_tokens: 2, messages: [{ role: 'user', content: 'wait' }] });
    let busy = null;
    for (const deadline = Date.now() + 10000; ;) {
      busy = parseProm(await metrics(server));
      if (only(busy, 'vllm:num_requests_waiting').value >= 1) break;
      assert.ok(Date.now() < deadline, 'the second request never waited');
      await sleep(20);
    }
    assert.equal(only(busy, 'vllm:num_requests_running').value, 1);
    assert.equal(only(busy, 'vllm:num_requests_waiting').value, 1);
    const usage = only(busy, 'vllm:kv_cache_usage_perc').value;
    assert.ok(usage > 0.02 && usage < 1, `kv usage ${usage} with one chat on the one slot`);

    controller.abort();
    assert.equal((await queued).status, 200);
    let end = null;
    for (const deadline = Date.now() + 10000; ;) {
      end = parseProm(await metrics(server));
      if (only(end, 'vllm:num_requests_running').value === 0) break;
      assert.ok(Date.now() < deadline, 'the slot never went idle');
      await sleep(20);
    }
    assert.equal(only(end, 'vllm:num_requests_waiting').value, 0);
    assert.equal(only(end, 'vllm:kv_cache_usage_perc').value, 0);
    assert.ok(only(end, 'vllm:prefix_cache_queries_total').value > queries0);
  });

  it('SMG registers it as an OpenAI-compatible (vLLM-kind) worker and reads its load', async () => {
    assert.equal(await smgRuntime(server.url), 'vllm');
    const entry = (await (await fetch(`${server.url}/v1/models`)).json()).data[0];
    assert.equal(entry.owned_by, 'prefixd');  // not a name SMG knows: /version decides
    assert.equal(entry.root, modelId);        // SMG's model_path
    assert.equal(entry.max_model_len, 4096);  // SMG's max_model_len
    const version = await (await fetch(`${server.url}/version`)).json();
    assert.equal(typeof version.version, 'string');
    // SMG's vLLM load: the KV gauge is required, the request counts are summed.
    const prom = parseProm(await metrics(server));
    assert.ok(prom.samples.some((s) => s.name === 'vllm:kv_cache_usage_perc'));
    assert.ok(prom.samples.some((s) => s.name === 'vllm:num_requests_running'));
  });
});

// The pinned templates of the forced-call tests, each of its own call syntax: the render and the
// completion share one preparation, and on each the render's ids are those the slot evaluated.
const TEMPLATES = [
  'Qwen3.5-4B', 'meta-llama-Llama-3.1-8B-Instruct', 'openai-gpt-oss-120b', 'GLM-4.7-Flash',
  'moonshotai-Kimi-K2', 'deepseek-ai-DeepSeek-V3.2', 'unsloth-mistral-Devstral-Small-2507',
  'NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use', 'google-gemma-4-31B-it', 'LFM2.5-Instruct',
];

describe('render ids on each pinned template', () => {
  let dir; let model;
  before(() => { dir = tempDir('render-templates'); model = makeLlama(dir); });
  after(() => rmSync(dir, { recursive: true, force: true }));

  for (const template of TEMPLATES) {
    it(template, async () => {
      const server = await startServer(
        { model, args: ['--slots', '1', '--ctx', '4096', '--chat-template', template] });
      try {
        const r = await post(server, '/v1/chat/completions/render', CHAT);
        assert.equal(r.status, 200, r.text);
        await assertRenderIsEvaluated(server, CHAT, r.json.token_ids);
      } finally {
        await server.stop();
      }
    });
  }
});
