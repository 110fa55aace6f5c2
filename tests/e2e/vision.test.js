// Images on a model that reads them: the tiny gemma3 test model with its random-weight projector
// (`make-test-model --mmproj`), served with `--mmproj`, so libmtmd's real encoder runs. Through
// the official clients: chat completions and Responses (`openai`), Messages with an image in a
// user turn and one inside a tool_result (`@anthropic-ai/sdk`). Each answer says the model read
// the images (X-Prefixd-Images: read), the next turn reuses >= 0.99 of the previous prompt, the
// same picture is encoded once however many APIs and files carry it, a restart restores an
// image conversation from disk without encoding it, and a file that does not decode is a 400
// while the server serves on.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import puppeteer from 'puppeteer-core';
import { BIN, client, metric, metrics, post, remoteSettled, startRedis, startServer, tempDir } from './harness.js';
import { png, pngDataUrl } from './png.js';

const SYSTEM = 'You are a careful assistant who describes screenshots of a code editor. '
  + Array.from({ length: 30 }, (_, i) => `Rule ${i}: name the file, the line and the symbol.`).join(' ');

const dataUrl = pngDataUrl;

function makeVisionModel(dir) {
  const model = join(dir, 'g3.gguf');
  const mmproj = join(dir, 'g3-mmproj.gguf');
  execFileSync(BIN, ['make-test-model', '--arch', 'gemma3', '--seed', '1', '--out', model,
    '--mmproj', mmproj], { stdio: ['ignore', 'ignore', 'inherit'] });
  return { model, mmproj };
}

function assertReused(cached, previousPrompt, what) {
  assert.ok(cached >= 0.99 * previousPrompt, `${what}: reused ${cached} of ${previousPrompt}`);
}

const encoded = async (server) => metric(await metrics(server), 'prefixd_images_encoded_total');

describe('Images on a model served with --mmproj', () => {
  let dir; let files; let server; let openai; let anthropic; let cacheDir;
  const screenshot = png(64, 48, 1);

  before(async () => {
    dir = tempDir('vision');
    files = makeVisionModel(dir);
    cacheDir = join(dir, 'cache');
    server = await startServer({ model: files.model, cacheDir,
      args: ['--mmproj', files.mmproj, '--slots', '2', '--ctx', '4096'] });
    openai = client(server);
    anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('says the model reads images', async () => {
    const models = await openai.models.list();
    assert.deepEqual(models.data[0].input_modalities, ['text', 'image']);
    assert.match(server.log, /images: projector .*\(gemma3\)/);
  });

  it('chat completions: the model reads the image; the next turn reuses the prompt', async (t) => {
    const messages = [{ role: 'system', content: SYSTEM },
      { role: 'user', content: [{ type: 'text', text: 'What is on this screenshot?' },
        { type: 'image_url', image_url: { url: dataUrl(screenshot) } }] }];
    const request = { model: 'g3', max_tokens: 4, temperature: 0 };
    const { data: first, response } = await openai.chat.completions.create({ ...request, messages })
      .withResponse();
    assert.equal(response.headers.get('x-prefixd-images'), 'read; n=1');
    assert.equal(await encoded(server), 1);
    messages.push({ role: 'assistant', content: 'An editor.' },
      { role: 'user', content: 'Which file is open?' });
    const second = await openai.chat.completions.create({ ...request, messages });
    const cached = second.usage.prompt_tokens_details.cached_tokens;
    assertReused(cached, first.usage.prompt_tokens, 'chat');
    // The same pixels in another file (another compression level): the same image.
    messages[1].content[1].image_url.url = dataUrl(png(64, 48, 1, 0));
    const third = await openai.chat.completions.create({ ...request, messages });
    assert.ok(third.usage.prompt_tokens_details.cached_tokens >= cached,
      `another file of the same pixels: ${third.usage.prompt_tokens_details.cached_tokens}`);
    assert.equal(await encoded(server), 1, 'encoded once');
    t.diagnostic(`chat: reused ${cached} of the previous prompt's ${first.usage.prompt_tokens}`);
  });

  it('Responses: input_image in a message and in a function_call_output; the next turn reuses', async (t) => {
    const tools = [{ type: 'function', name: 'screenshot', description: 'Takes a screenshot',
      parameters: { type: 'object', properties: {} }, strict: false }];
    const input = [
      { role: 'user', content: [{ type: 'input_text', text: 'Look at my screen.' },
        { type: 'input_image', image_url: dataUrl(screenshot), detail: 'auto' }] },
      { type: 'function_call', call_id: 'call_1', name: 'screenshot', arguments: '{}' },
      { type: 'function_call_output', call_id: 'call_1',
        output: [{ type: 'input_text', text: 'The screen now:' },
          { type: 'input_image', image_url: dataUrl(png(48, 64, 2)) }] }];
    const request = { model: 'g3', instructions: SYSTEM, tools, max_output_tokens: 4, temperature: 0 };
    const { data: first, response } = await openai.responses.create({ ...request, input }).withResponse();
    assert.equal(response.headers.get('x-prefixd-images'), 'read; n=2');
    input.push({ role: 'assistant', content: 'A terminal.' }, { role: 'user', content: 'And now?' });
    const second = await openai.responses.create({ ...request, input });
    const cached = second.usage.input_tokens_details.cached_tokens;
    assertReused(cached, first.usage.input_tokens, 'responses');
    assert.equal(await encoded(server), 2, 'the screenshot came from the encoder cache');
    t.diagnostic(`responses: reused ${cached} of the previous prompt's ${first.usage.input_tokens}`);
  });

  it('Messages: an image in a user turn and one inside a tool_result; the next turn reuses', async (t) => {
    const tools = [{ name: 'Read', description: 'Reads a file',
      input_schema: { type: 'object', properties: { file_path: { type: 'string' } } } }];
    const messages = [
      { role: 'user', content: [
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: screenshot.toString('base64') } },
        { type: 'text', text: 'Here is the bug; read /tmp/after.png too.' }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'Read',
        input: { file_path: '/tmp/after.png' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [
        // Mislabelled as JPEG: the server reads a PNG from the bytes.
        { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: png(64, 64, 3).toString('base64') } }] }] }];
    const request = { model: 'g3', system: SYSTEM, tools, max_tokens: 4, temperature: 0 };
    const { data: first, response } = await anthropic.messages.create({ ...request, messages })
      .withResponse();
    assert.equal(response.headers.get('x-prefixd-images'), 'read; n=2');
    const firstPrompt = first.usage.input_tokens + first.usage.cache_read_input_tokens;
    messages.push({ role: 'assistant', content: 'The button is misaligned.' },
      { role: 'user', content: 'Fix it.' });
    const second = await anthropic.messages.create({ ...request, messages });
    assertReused(second.usage.cache_read_input_tokens, firstPrompt, 'messages');
    assert.equal(await encoded(server), 3, 'one new picture, one encoder-cache hit');
    t.diagnostic(`messages: reused ${second.usage.cache_read_input_tokens} of the previous prompt's ${firstPrompt}`);
  });

  it('a file that does not decode is a 400, and the next request is served', async () => {
    const broken = Buffer.from(screenshot);
    const idat = broken.indexOf('IDAT');
    broken.fill(0xaa, idat + 4, idat + 40);  // the header walks, the pixels do not inflate
    const r = await post(server, '/v1/chat/completions', { model: 'g3', max_tokens: 2,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(broken) } }] }] });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /image 1: the image does not decode/);
    const ok = await openai.chat.completions.create({ model: 'g3', max_tokens: 2,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(screenshot) } }] }] });
    assert.equal(ok.choices.length, 1);
  });

  it("the page's playground sends an image, and the next turn reuses it", async () => {
    const chromium = process.env.PREFIXD_CHROMIUM || '/usr/bin/chromium';
    assert.ok(existsSync(chromium), `${chromium} is missing: run scripts/setup-deps.sh`);
    const file = join(dir, 'shot.png');
    writeFileSync(file, png(64, 48, 11));
    const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
      args: [...(process.getuid?.() === 0 ? ['--no-sandbox'] : []), '--disable-gpu', '--disable-dev-shm-usage'] });
    try {
      const page = await browser.newPage();
      const wait = { timeout: 30000 };
      await page.goto(server.url, { waitUntil: 'load' });
      await page.click('.tab[data-tab=playground]');
      await page.waitForSelector('#attach:not([hidden])', wait);
      await page.$eval('#max-tokens', (e) => { e.value = '4'; });
      const before = metric(await metrics(server), 'prefixd_images_total');
      const turn = async (text, n) => {
        await page.waitForFunction(() => !document.querySelector('#send').disabled, wait);
        await page.type('#user-input', text);
        await page.click('#send');
        await page.waitForFunction((k) => {
          const infos = document.querySelectorAll('.msg.assistant .cache-info');
          return infos.length === k && infos[k - 1].dataset.cached !== undefined;
        }, wait, n);
        return page.$$eval('.msg', (ms) => ms.map((m) => ({ text: m.querySelector('.text').textContent,
          cached: Number(m.querySelector('.cache-info').dataset.cached ?? -1) })));
      };
      const input = await page.$('#image-input');
      await input.uploadFile(file);
      const first = await turn('What is on this picture?', 1);
      assert.match(first[0].text, /\[image: shot\.png\]/);
      assert.equal(metric(await metrics(server), 'prefixd_images_total'), before + 1, 'the image was sent');
      const second = await turn('And the corner?', 2);
      assert.ok(second[3].cached > 0, `the second turn reuses the first, image included: ${second[3].cached}`);
      assert.equal(metric(await metrics(server), 'prefixd_images_total'), before + 2, 'and sent again');
    } finally {
      await browser.close();
    }
  });

  it('a restart restores an image conversation from disk without encoding it', async () => {
    const messages = [{ role: 'system', content: SYSTEM },
      { role: 'user', content: [{ type: 'text', text: 'Describe it.' },
        { type: 'image_url', image_url: { url: dataUrl(png(64, 48, 9)) } }] }];
    const request = { model: 'g3', max_tokens: 4, temperature: 0 };
    const first = await openai.chat.completions.create({ ...request, messages });
    await server.stop();
    server = await startServer({ model: files.model, cacheDir,
      args: ['--mmproj', files.mmproj, '--slots', '2', '--ctx', '4096'] });
    openai = client(server);
    messages.push({ role: 'assistant', content: 'A list.' }, { role: 'user', content: 'And?' });
    const second = await openai.chat.completions.create({ ...request, messages });
    assertReused(second.usage.prompt_tokens_details.cached_tokens, first.usage.prompt_tokens, 'after restart');
    assert.equal(await encoded(server), 0, 'the rows came back from disk');
  });
});

// The llama.cpp #27931 shape on a hybrid with M-RoPE images: the tiny qwen35 (Gated DeltaNet
// and attention layers) with its qwen3vl_merger projector, text and image turns alternating in
// one conversation through chat completions. Every turn answers, reuses >= 0.99 of the previous
// prompt, and each distinct image is encoded once; a restart brings it back from disk.
describe('Images on a hybrid M-RoPE model (qwen35), text and image turns alternating', () => {
  let dir; let model; let mmproj; let server; let openai; let cacheDir;
  const start = async () => {
    server = await startServer({ model, cacheDir,
      args: ['--mmproj', mmproj, '--slots', '2', '--ctx', '8192'] });
    openai = client(server);
  };

  before(async () => {
    dir = tempDir('vision-q35');
    model = join(dir, 'q35.gguf');
    mmproj = join(dir, 'q35-mmproj.gguf');
    execFileSync(BIN, ['make-test-model', '--arch', 'qwen35', '--seed', '1', '--out', model,
      '--mmproj', mmproj], { stdio: ['ignore', 'ignore', 'inherit'] });
    cacheDir = join(dir, 'cache');
    await start();
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('every turn reuses the previous prompt; each image is encoded once, also after a restart', async () => {
    assert.match(server.log, /images: projector .*\(qwen3vl_merger\)/);
    const messages = [{ role: 'system', content: SYSTEM }];
    const request = { model: 'q35', max_tokens: 4, temperature: 0 };
    let previous = 0;
    const images = [];
    for (let turn = 0; turn < 6; turn++) {
      if (turn % 2 === 0) {
        images.push(png(64 + 16 * turn, 48, 20 + turn));
        messages.push({ role: 'user', content: [{ type: 'text', text: `Screenshot ${turn}:` },
          { type: 'image_url', image_url: { url: dataUrl(images.at(-1)) } }] });
      } else {
        messages.push({ role: 'user', content: `What changed since turn ${turn - 1}? `.repeat(8) });
      }
      const { data: r, response } = await openai.chat.completions.create({ ...request, messages })
        .withResponse();
      assert.equal(response.headers.get('x-prefixd-images'), `read; n=${images.length}`);
      if (turn > 0) assertReused(r.usage.prompt_tokens_details.cached_tokens, previous, `turn ${turn}`);
      previous = r.usage.prompt_tokens;
      messages.push({ role: 'assistant', content: r.choices[0].message.content || 'ok' });
    }
    assert.equal(await encoded(server), images.length, 'each image encoded once');
    await server.stop();
    await start();
    messages.push({ role: 'user', content: 'And now?' });
    const again = await openai.chat.completions.create({ ...request, messages });
    assertReused(again.usage.prompt_tokens_details.cached_tokens, previous, 'after a restart');
    assert.equal(await encoded(server), 0, 'the rows came back from disk');
  });
});

// Once per fleet: two servers with their own cache dirs on one Redis. A conversation with a
// screenshot on the first goes on on the second, which restores it from the shared tier without
// encoding; a new session there with the same picture (another system prompt: no prefix to
// restore) reads the image's embeddings from Redis instead of encoding them.
describe('Images across a fleet: one Redis, two servers', () => {
  let dir; let files; let redis; const servers = [];
  before(async () => {
    dir = tempDir('vision-fleet');
    files = makeVisionModel(dir);
    redis = await startRedis();
    for (const name of ['a', 'b']) {
      servers.push(await startServer({ model: files.model, cacheDir: join(dir, name),
        args: ['--mmproj', files.mmproj, '--ctx', '4096', '--remote-cache', redis.url] }));
    }
  });
  after(async () => {
    for (const s of servers) await s.stop();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the second server restores the conversation and reads the embeddings from Redis', async () => {
    const [a, b] = servers;
    const picture = dataUrl(png(64, 48, 31));
    const messages = [{ role: 'system', content: SYSTEM },
      { role: 'user', content: [{ type: 'text', text: 'What is on this screenshot?' },
        { type: 'image_url', image_url: { url: picture } }] }];
    const request = { model: 'g3', max_tokens: 4, temperature: 0 };
    const first = await client(a).chat.completions.create({ ...request, messages });
    assert.equal(await encoded(a), 1);
    await remoteSettled(a);
    messages.push({ role: 'assistant', content: 'An editor.' }, { role: 'user', content: 'Which file?' });
    const { data: next, response } = await client(b).chat.completions.create({ ...request, messages })
      .withResponse();
    assert.equal(response.headers.get('x-prefixd-images'), 'read; n=1');
    assertReused(next.usage.prompt_tokens_details.cached_tokens, first.usage.prompt_tokens, 'on b');
    assert.equal(await encoded(b), 0, 'b restored the rows from Redis');
    const other = [{ role: 'system', content: 'Another session. Answer in one word.' },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: picture } },
        { type: 'text', text: 'And here?' }] }];
    await client(b).chat.completions.create({ ...request, messages: other });
    const page = await metrics(b);
    assert.equal(metric(page, 'prefixd_images_encoded_total'), 0, 'the embeddings came from Redis');
    assert.equal(metric(page, 'prefixd_image_encoder_hits_total{tier="remote"}'), 1);
  });
});
