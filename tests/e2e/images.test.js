// Images on a model that reads none (the tiny test model has no projector), through the official
// clients: chat completions and Responses (`openai`), Messages with an image in a user turn and
// one inside a tool_result (`@anthropic-ai/sdk`). Each image stands in the prompt as a short text,
// the X-Prefixd-Images header says so, and the next turn (the same conversation, the image still
// in it, plus a new user message) reuses >= 0.99 of the previous prompt. Hostile images are a 400
// naming the part, and the next request is served; `--images refuse` makes every image a 400.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import { client, makeModel, post, startServer, tempDir } from './harness.js';

// A long, fixed system prompt: the turns' prompts are mostly what the next turn reuses.
const SYSTEM = 'You are a careful assistant who describes screenshots of a code editor. '
  + Array.from({ length: 40 }, (_, i) => `Rule ${i}: name the file, the line and the symbol.`).join(' ');

function be32(v) { return [(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255]; }
function chunk(type, data) { return [...be32(data.length), ...Buffer.from(type), ...data, 0, 0, 0, 0]; }
// A PNG of width x height: signature, IHDR, one IDAT, IEND (the server reads headers only).
function png(width, height) {
  return Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a,
    ...chunk('IHDR', [...be32(width), ...be32(height), 8, 2, 0, 0, 0]),
    ...chunk('IDAT', [0x78, 0x9c, 0x63, 0, 0]), ...chunk('IEND', [])]);
}
// A real 1x1 GIF89a.
const GIF = 'R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7';
const dataUrl = (bytes, type = 'image/png') => `data:${type};base64,${bytes.toString('base64')}`;

function commonPrefix(a, b) {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

function assertReused(cached, previousPrompt, what) {
  assert.ok(cached >= 0.99 * previousPrompt, `${what}: reused ${cached} of ${previousPrompt}`);
}

describe('Images on a model without a projector', () => {
  let dir; let server; let openai; let anthropic;

  before(async () => {
    dir = tempDir('images');
    server = await startServer({ model: makeModel(dir), args: ['--slots', '2', '--ctx', '4096'] });
    openai = client(server);
    anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('chat completions: image_url parts stand in; the next turn reuses the prompt', async (t) => {
    const messages = [{ role: 'system', content: SYSTEM },
      { role: 'user', content: [{ type: 'text', text: 'What is on this screenshot?' },
        { type: 'image_url', image_url: { url: dataUrl(png(1024, 768)), detail: 'high' } },
        // Mislabelled: the server reads a GIF from the bytes.
        { type: 'image_url', image_url: { url: `data:image/png;base64,${GIF}` } }] }];
    const request = { model: 'tiny', max_tokens: 4, temperature: 0,
      chat_template_kwargs: { enable_thinking: false } };
    const tpl = await post(server, '/apply-template', { messages,
      chat_template_kwargs: { enable_thinking: false } });
    assert.equal(tpl.status, 200, tpl.text);
    assert.ok(tpl.json.prompt.includes('[image: PNG 1024x768, not shown: this model reads no images]'),
      tpl.json.prompt);
    assert.ok(tpl.json.prompt.includes('[image: GIF 1x1, not shown: this model reads no images]'));
    const { data: first, response } = await openai.chat.completions.create({ ...request, messages })
      .withResponse();
    assert.equal(response.headers.get('x-prefixd-images'), 'stand-in; n=2');
    assert.equal(first.usage.prompt_tokens, tpl.json.tokens.length);

    messages.push({ role: 'assistant', content: 'An editor.' },
      { role: 'user', content: 'Which file is open?' });
    const tpl2 = await post(server, '/apply-template', { messages,
      chat_template_kwargs: { enable_thinking: false } });
    const { data: second, response: r2 } = await openai.chat.completions.create({ ...request, messages })
      .withResponse();
    assert.equal(r2.headers.get('x-prefixd-images'), 'stand-in; n=2');
    const reusable = commonPrefix(tpl.json.tokens, tpl2.json.tokens);
    const cached = second.usage.prompt_tokens_details.cached_tokens;
    assertReused(cached, first.usage.prompt_tokens, 'chat');
    assert.ok(cached >= 0.99 * reusable, `${cached} of ${reusable} reusable`);
    t.diagnostic(`chat: reused ${cached} of the previous prompt's ${first.usage.prompt_tokens}`);
  });

  it('Responses: input_image in a message and in a function_call_output; the next turn reuses', async (t) => {
    const tools = [{ type: 'function', name: 'screenshot', description: 'Takes a screenshot',
      parameters: { type: 'object', properties: {} }, strict: false }];
    const input = [
      { role: 'user', content: [{ type: 'input_text', text: 'Look at my screen.' },
        { type: 'input_image', image_url: dataUrl(png(800, 600)), detail: 'auto' }] },
      { type: 'function_call', call_id: 'call_1', name: 'screenshot', arguments: '{}' },
      { type: 'function_call_output', call_id: 'call_1',
        output: [{ type: 'input_text', text: 'The screen now:' },
          { type: 'input_image', image_url: dataUrl(png(1920, 1080)) }] }];
    const request = { model: 'tiny', instructions: SYSTEM, tools, enable_thinking: false,
      max_output_tokens: 4, temperature: 0 };
    const { data: first, response } = await openai.responses.create({ ...request, input }).withResponse();
    assert.equal(response.headers.get('x-prefixd-images'), 'stand-in; n=2');
    assert.ok(['completed', 'incomplete'].includes(first.status), first.status);

    input.push({ role: 'assistant', content: 'A terminal.' }, { role: 'user', content: 'And now?' });
    const { data: second, response: r2 } = await openai.responses.create({ ...request, input })
      .withResponse();
    assert.equal(r2.headers.get('x-prefixd-images'), 'stand-in; n=2');
    const cached = second.usage.input_tokens_details.cached_tokens;
    assertReused(cached, first.usage.input_tokens, 'responses');
    t.diagnostic(`responses: reused ${cached} of the previous prompt's ${first.usage.input_tokens}`);
  });

  it('Messages: an image in a user turn and one inside a tool_result; the next turn reuses', async (t) => {
    const tools = [{ name: 'Read', description: 'Reads a file',
      input_schema: { type: 'object', properties: { file_path: { type: 'string' } } } }];
    const messages = [
      { role: 'user', content: [
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png(1280, 720).toString('base64') } },
        { type: 'text', text: 'Here is the bug; read /tmp/after.png too.' }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'Read',
        input: { file_path: '/tmp/after.png' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [
        // Claude Code's Read of an image file: the picture inside the tool_result.
        { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: GIF } }] }] }];
    const request = { model: 'tiny', system: SYSTEM, tools, thinking: { type: 'disabled' },
      max_tokens: 4, temperature: 0 };
    const { data: first, response } = await anthropic.messages.create({ ...request, messages })
      .withResponse();
    assert.equal(response.headers.get('x-prefixd-images'), 'stand-in; n=2');
    const counted = await anthropic.messages.countTokens({ model: 'tiny', system: SYSTEM, tools,
      thinking: { type: 'disabled' }, messages });
    const firstPrompt = first.usage.input_tokens + first.usage.cache_read_input_tokens;
    assert.equal(counted.input_tokens, firstPrompt);

    messages.push({ role: 'assistant', content: 'The button is misaligned.' },
      { role: 'user', content: 'Fix it.' });
    const { data: second, response: r2 } = await anthropic.messages.create({ ...request, messages })
      .withResponse();
    assert.equal(r2.headers.get('x-prefixd-images'), 'stand-in; n=2');
    assertReused(second.usage.cache_read_input_tokens, firstPrompt, 'messages');
    t.diagnostic(`messages: reused ${second.usage.cache_read_input_tokens} of the previous prompt's ${firstPrompt}`);
  });

  it('hostile images: each a 400 naming the part, and the next request is served', async () => {
    const chat = (part) => ({ model: 'tiny', max_tokens: 2, messages: [{ role: 'user',
      content: [{ type: 'text', text: 'hi' }, part] }] });
    const image = (url) => ({ type: 'image_url', image_url: { url } });
    const part = 'messages[0].content[1].image_url';
    const whole = png(3, 2);
    const cases = [
      ['broken base64', chat(image('data:image/png;base64,iVBO*w0KGgo=')), part, /not base64/],
      ['a truncated PNG', chat(image(dataUrl(whole.subarray(0, whole.length - 14)))), part, /truncated PNG/],
      ['a huge declared size', chat(image(dataUrl(png(100000, 100000)))), part, /pixels; at most/],
      ['too many images', { model: 'tiny', max_tokens: 2, messages: [{ role: 'user',
        content: Array.from({ length: 65 }, () => image(dataUrl(png(1, 1)))) }] },
      'messages[0].content[64].image_url', /more than 64 images/],
      ['an unknown format', chat(image(dataUrl(Buffer.from('%PDF-1.7 hello')))), part, /not a PNG, JPEG, GIF or WebP/],
      ['a remote URL', chat(image('https://example.com/cat.png')), part, /fetches nothing/],
    ];
    for (const [what, body, param, message] of cases) {
      const r = await post(server, '/v1/chat/completions', body);
      assert.equal(r.status, 400, `${what}: ${r.text}`);
      assert.equal(r.json.error.param, param, what);
      assert.ok(r.json.error.message.startsWith(`${param}: `), `${what}: ${r.json.error.message}`);
      assert.match(r.json.error.message, message, what);
      const ok = await post(server, '/v1/chat/completions', chat(image(dataUrl(png(2, 2)))));
      assert.equal(ok.status, 200, `after ${what}: ${ok.text}`);
    }
    // The same through the agent APIs: the part is named as their own request names it.
    const m = await post(server, '/v1/messages', { model: 'tiny', max_tokens: 2, messages: [
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: [
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo' } }] }] }] });
    assert.equal(m.status, 400, m.text);
    assert.match(m.json.error.message, /^messages\[0\]\.content\[0\]\.content\[0\]\.source: not base64/);
    const u = await post(server, '/v1/messages', { model: 'tiny', max_tokens: 2, messages: [
      { role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }] }] });
    assert.equal(u.status, 400, u.text);
    assert.match(u.json.error.message, /^messages\[0\]\.content\[0\]\.source: a remote image URL/);
    const r = await post(server, '/v1/responses', { model: 'tiny', input: [{ role: 'user', content: [
      { type: 'input_image', image_url: dataUrl(png(60000, 60000)) }] }] });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, 'input[0].content[0].image_url');
    const health = await fetch(`${server.url}/health`);
    assert.equal(health.status, 200);
  });
});

describe('serve --images refuse', () => {
  let dir; let server;

  before(async () => {
    dir = tempDir('images-refuse');
    server = await startServer({ model: makeModel(dir), args: ['--images', 'refuse'] });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers 400 image_not_supported to an image, and serves text', async () => {
    const openai = client(server);
    await assert.rejects(openai.chat.completions.create({ model: 'tiny', max_tokens: 2, messages: [
      { role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(png(4, 4)) } }] }] }),
    (e) => e.status === 400 && e.code === 'image_not_supported' && /--images/.test(e.message));
    const anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
    await assert.rejects(anthropic.messages.create({ model: 'tiny', max_tokens: 2, messages: [
      { role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/gif', data: GIF } }] }] }),
    (e) => e.status === 400 && /reads no images/.test(e.message));
    const r = await openai.chat.completions.create({ model: 'tiny', max_tokens: 2,
      messages: [{ role: 'user', content: 'hi' }] });
    assert.ok(r.choices.length === 1);
  });
});
