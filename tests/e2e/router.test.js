// Several models behind one port (`serve --models-dir` / `--models`): the router starts a
// `prefixd serve` per model on loopback when a request names it, and every model keeps its own
// cache. Real generated models of two families (qwen35, llama), a corrupt model file beside
// them, the official openai client.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, client, metric, post, startServer, tempDir, writeKeys } from './harness.js';
import { png, pngDataUrl } from './png.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function commonPrefix(a, b) {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

function make(dir, arch, seed, name) {
  const out = join(dir, `${name}.gguf`);
  execFileSync(BIN, ['make-test-model', '--arch', arch, '--shape', 'tiny', '--seed', String(seed),
    '--out', out], { stdio: ['ignore', 'ignore', 'inherit'] });
  return out;
}

async function models(server) {
  const r = await fetch(`${server.url}/v1/models`);
  assert.equal(r.status, 200);
  const byId = {};
  for (const m of (await r.json()).data) byId[m.id] = m;
  return byId;
}

// Waits (bounded) until `pred(models)` holds; returns the models.
async function waitModels(server, pred, what, ms = 15000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const m = await models(server);
    if (pred(m)) return m;
    assert.ok(Date.now() < deadline, `${what}: ${JSON.stringify(m)}`);
    await sleep(50);
  }
}

// One conversation on one model: each turn appends a user message and a fixed reply, and
// records what the server reused of what the previous turn's prompt shares with this one.
function session(model, topic) {
  const s = { model, messages: [{ role: 'system', content: `You help with ${topic}.` }],
    prev: null, cached: 0, reusable: 0 };
  s.turn = async (server, t) => {
    s.messages.push({ role: 'user', content: `Step ${t} of ${topic}: list the files, then `
      + `read each one and say what it does, in order, with line numbers (${t}).` });
    const tpl = await post(server, '/apply-template', { model, messages: s.messages });
    assert.equal(tpl.status, 200, tpl.text);
    const tokens = tpl.json.tokens;
    const r = await client(server).chat.completions.create(
      { model, messages: s.messages, max_tokens: 4, temperature: 0 });
    assert.equal(r.model, model);
    assert.equal(r.usage.prompt_tokens, tokens.length);
    const reusable = s.prev ? commonPrefix(s.prev, tokens) : 0;
    const cached = r.usage.prompt_tokens_details.cached_tokens;
    s.cached += Math.min(cached, reusable);
    s.reusable += reusable;
    s.prev = tokens;
    s.messages.push({ role: 'assistant', content: `Done with step ${t}.` });
    return { cached, reusable };
  };
  return s;
}

describe('several models behind one port', () => {
  let dir; let modelsDir;
  let qwenBytes = 0;  // one tiny qwen35 server's resident memory, as the first test measured
  const running = [];

  before(() => {
    dir = tempDir('router');
    modelsDir = join(dir, 'models');
    execFileSync('mkdir', ['-p', modelsDir]);
    make(modelsDir, 'qwen35', 1, 'qwen');
    make(modelsDir, 'llama', 2, 'llama');
    writeFileSync(join(modelsDir, 'broken.gguf'), Buffer.alloc(4096, 0x5a));  // not a GGUF
  });

  after(async () => {
    for (const s of running) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function router(args, cacheDir = '') {
    const s = await startServer({ args: ['--models-dir', modelsDir, '--slots', '1', ...args],
      cacheDir });
    running.push(s);
    return s;
  }

  it('loads a model on first use once, alternates two families at >= 0.99 reuse, and a '
    + 'broken model fails only its own requests', async (t) => {
    const r = await router([]);
    const first = await Promise.all(Array.from({ length: 8 }, (_, i) => client(r).chat.completions
      .create({ model: 'qwen', messages: [{ role: 'user', content: `hi ${i}` }], max_tokens: 2 })));
    assert.equal(first.length, 8);
    let m = await models(r);
    assert.equal(m.qwen.state, 'loaded');
    assert.equal(m.qwen.loads, 1, '8 concurrent first requests started one server');
    assert.equal(m.llama.state, 'unloaded');

    const sessions = [session('qwen', 'the parser'), session('llama', 'the build')];
    for (let turn = 0; turn < 4; turn++) {
      for (const s of sessions) await s.turn(r, turn);
    }
    for (const s of sessions) {
      assert.ok(s.cached >= 0.99 * s.reusable, `${s.model}: ${s.cached} of ${s.reusable}`);
      t.diagnostic(`${s.model}: reused ${s.cached} of ${s.reusable} reusable tokens`);
    }
    m = await models(r);
    assert.equal(m.qwen.loads, 1);
    assert.equal(m.llama.loads, 1);
    assert.ok(m.qwen.memory_bytes > 0 && m.llama.memory_bytes > 0, 'memory is measured');
    qwenBytes = m.qwen.memory_bytes;

    // The web page is a model's: / opens one, and the page's own calls (their Referer names
    // its model) reach that model's server.
    const home = await fetch(`${r.url}/`, { redirect: 'manual' });
    assert.equal(home.status, 302);
    assert.match(home.headers.get('location'), /^\/\?model=/);
    const pageHtml = await fetch(`${r.url}/?model=llama`);
    assert.equal(pageHtml.status, 200);
    assert.match(await pageHtml.text(), /<html/i);
    const ambiguous = await fetch(`${r.url}/v1/cache`);
    assert.equal(ambiguous.status, 400, 'two models loaded: which one?');
    const fromPage = await fetch(`${r.url}/v1/cache`, { headers: { Referer: `${r.url}/?model=llama` } });
    assert.equal(fromPage.status, 200);
    assert.equal(fromPage.headers.get('x-prefixd-model'), 'llama');

    const unknown = await post(r, '/v1/chat/completions',
      { model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.json.error.code, 'model_not_found');
    assert.match(unknown.json.error.message, /broken, llama, qwen/);

    const broken = await post(r, '/v1/chat/completions',
      { model: 'broken', messages: [{ role: 'user', content: 'x' }] });
    assert.equal(broken.status, 500);
    assert.equal(broken.json.error.code, 'model_load_failed');
    assert.match(broken.json.error.message, /model broken failed to load/);
    m = await models(r);
    assert.equal(m.broken.state, 'failed');
    assert.ok(m.broken.last_error.length > 0);
    const still = await client(r).chat.completions.create(
      { model: 'llama', messages: [{ role: 'user', content: 'still there?' }], max_tokens: 2 });
    assert.equal(still.choices.length, 1);

    const page = await (await fetch(`${r.url}/metrics`)).text();
    assert.equal(metric(page, 'prefixd_router_loads_total'), 2);
    assert.equal(metric(page, 'prefixd_router_load_failures_total'), 1);
    assert.equal(metric(page, 'prefixd_router_model_loaded{model="qwen"}'), 1);
    assert.ok(page.includes('model="llama"'), 'the models\' own pages, labelled');
    const types = page.match(/^# TYPE \S+/gm);
    assert.ok(types.length > 10);
    assert.equal(new Set(types).size, types.length, 'one TYPE line per family');
  });

  for (const [what, flags] of [
    ['--models-max 1', () => ['--models-max', '1']],
    ['a memory budget for one and a half', () => ['--models-memory', String(Math.round(qwenBytes * 1.5))]],
  ]) {
    it(`with room for one model (${what}) they swap, and the swapped-in model restores its `
      + 'prefix from disk', async (t) => {
      assert.ok(qwenBytes > 0, 'the first test measured a server');
      const r = await router(flags());
      const q = session('qwen', 'the tests');
      const l = session('llama', 'the docs');
      await q.turn(r, 0);
      await l.turn(r, 0);  // unloads qwen: its server flushes its disk tier and exits
      let m = await models(r);
      assert.equal(m.qwen.state, 'unloaded');
      const back = await q.turn(r, 1);  // qwen again: a new server process, the same cache dir
      assert.ok(back.reusable > 30);
      assert.ok(back.cached >= 0.99 * back.reusable, `${back.cached} of ${back.reusable}`);
      const recent = await (await fetch(`${r.url}/v1/requests/recent?model=qwen`)).json();
      assert.equal(recent.requests.at(-1).tier, 'disk');
      m = await models(r);
      assert.equal(m.qwen.loads, 2);
      assert.equal(m.llama.state, 'unloaded');
      const page = await (await fetch(`${r.url}/metrics`)).text();
      assert.ok(metric(page, 'prefixd_router_evictions_total') >= 2);
      t.diagnostic(`swapped back in: ${back.cached} of ${back.reusable} from disk`);
    });
  }

  it('refuses to unload a model while a stream is in flight, and unloads it after', async () => {
    const r = await router([]);
    const res = await fetch(`${r.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'llama', stream: true, max_tokens: 20000, ignore_eos: true,
        messages: [{ role: 'user', content: 'go on' }] }),
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    await reader.read();  // the stream has begun
    const busy = await post(r, '/v1/models/llama/unload', {});
    assert.equal(busy.status, 409);
    assert.equal(busy.json.error.code, 'model_busy');
    const llamaServer = busy.json.error.message;
    assert.match(llamaServer, /in flight/);
    await reader.cancel();  // the client goes: the model's server stops generating
    const deadline = Date.now() + 15000;
    let done;
    for (;;) {
      done = await post(r, '/models/unload', { model: 'llama' });  // llama-server's name
      if (done.status === 200 || Date.now() > deadline) break;
      await sleep(100);
    }
    assert.equal(done.status, 200, done.text);
    assert.equal(done.json.state, 'unloaded');
    const load = await post(r, '/v1/models/llama/load', {});
    assert.equal(load.status, 200);
    assert.equal(load.json.state, 'loaded');
    // keep_alive (Ollama's) 0: unloaded as soon as the request ends.
    const once = await post(r, '/v1/chat/completions', { model: 'llama', keep_alive: 0,
      max_tokens: 2, messages: [{ role: 'user', content: 'one question' }] });
    assert.equal(once.status, 200);
    await waitModels(r, (m) => m.llama.state === 'unloaded', 'keep_alive 0 unloads it');
    const bad = await post(r, '/v1/chat/completions', { model: 'llama', keep_alive: 'soon',
      messages: [{ role: 'user', content: 'x' }] });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'keep_alive');
  });

  it('kill -9 of the router takes its model servers with it, and a restart reuses every '
    + 'model\'s prefixes', async (t) => {
    const cacheDir = join(dir, 'kept-cache');
    const r = await router([], cacheDir);
    const sessions = [session('qwen', 'the cache'), session('llama', 'the page')];
    for (const s of sessions) await s.turn(r, 0);
    // Both models' write-behind queues drain to disk (their bytes stop growing).
    for (const id of ['qwen', 'llama']) {
      let last = -1; let same = 0;
      for (let i = 0; i < 100 && same < 3; i++) {
        const page = await (await fetch(`${r.url}/metrics`)).text();
        const v = metric(page, `prefixd_cache_bytes{model="${id}",tier="disk"}`) ?? 0;
        same = v > 0 && v === last ? same + 1 : 0;
        last = v;
        await sleep(100);
      }
      assert.ok(same >= 3, `${id}'s disk tier settled`);
    }
    const ports = Object.values(await models(r)).filter((m) => m.state === 'loaded')
      .map((m) => m.port);
    assert.equal(ports.length, 2);
    await r.kill();
    for (const port of ports) {  // each model's server dies with the router (bounded wait)
      let gone = false;
      for (let i = 0; i < 100 && !gone; i++) {
        try {
          await fetch(`http://127.0.0.1:${port}/health`);
          await sleep(50);
        } catch { gone = true; }
      }
      assert.ok(gone, `the model server on port ${port} outlived its router`);
    }
    const r2 = await router([], cacheDir);
    for (const s of sessions) {
      const turn = await s.turn(r2, 1);
      assert.ok(turn.reusable > 30);
      assert.ok(turn.cached >= 0.99 * turn.reusable,
        `${s.model} after kill -9: ${turn.cached} of ${turn.reusable}`);
      t.diagnostic(`${s.model} after kill -9 and restart: ${turn.cached} of ${turn.reusable}`);
    }
    // The new router's servers took each model's cache dir lock: one load each.
    const m = await models(r2);
    assert.equal(m.qwen.loads, 1);
    assert.equal(m.llama.loads, 1);
  });

  it('a models file: glob aliases, a pinned model loaded at start, a ttl that unloads an idle '
    + 'model', async () => {
    const file = join(dir, 'models.ini');
    writeFileSync(file, [
      '[coder]', `model = ${join(modelsDir, 'qwen.gguf')}`, 'alias = claude-*', 'pinned = true',
      '', '[small]', `model = ${join(modelsDir, 'llama.gguf')}`, 'ttl = 1', 'ctx = 2048', ''].join('\n'));
    const s = await startServer({ args: ['--models', file, '--slots', '1'] });
    running.push(s);
    await waitModels(s, (m) => m.coder.state === 'loaded', 'the pinned model loads at start');
    const m0 = await models(s);
    assert.deepEqual(Object.keys(m0).sort(), ['coder', 'small']);
    assert.equal(m0.coder.pinned, true);
    const viaAlias = await client(s).chat.completions.create(
      { model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    assert.equal(viaAlias.model, 'claude-sonnet-4-5');
    const small = await post(s, '/v1/chat/completions',
      { model: 'small', messages: [{ role: 'user', content: 'x'.repeat(20000) }] });
    assert.equal(small.status, 400, 'the section\'s ctx = 2048 reached the model\'s server');
    await waitModels(s, (m) => m.small.state === 'unloaded' && m.small.loads === 1,
      'the idle model goes after its ttl');
    assert.equal((await models(s)).coder.state, 'loaded', 'the pinned one stays');
  });

  it('with API keys, a request without one loads nothing, and load/unload are an admin\'s',
    async () => {
      const keysDir = tempDir('router-keys');
      const adminFile = join(keysDir, 'admin.txt');
      writeFileSync(adminFile, 'k-admin\n');
      const r = await router(['--api-key-file', writeKeys(keysDir, ['k-user']),
        '--admin-key-file', adminFile]);
      const anon = await post(r, '/v1/chat/completions',
        { model: 'qwen', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
      assert.equal(anon.status, 401);
      assert.equal(anon.json.error.code, 'invalid_api_key');
      const listAnon = await fetch(`${r.url}/v1/models`);
      assert.equal(listAnon.status, 401);
      const auth = (k) => ({ Authorization: `Bearer ${k}` });
      const list = await (await fetch(`${r.url}/v1/models`, { headers: auth('k-user') })).json();
      assert.ok(list.data.every((m) => m.state === 'unloaded'), 'nothing loaded for a stranger');
      const ok = await post(r, '/v1/chat/completions',
        { model: 'qwen', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 }, auth('k-user'));
      assert.equal(ok.status, 200, ok.text);
      const notAdmin = await post(r, '/v1/models/qwen/unload', {}, auth('k-user'));
      assert.equal(notAdmin.status, 403);
      assert.equal(notAdmin.json.error.code, 'admin_key_required');
      const admin = await post(r, '/v1/models/qwen/unload', {}, auth('k-admin'));
      assert.equal(admin.status, 200, admin.text);
      rmSync(keysDir, { recursive: true, force: true });
    });

  it('a model server that dies is that model\'s failure alone: it loads again on its next '
    + 'request', async () => {
    const r = await router([]);
    const ask = (model) => client(r).chat.completions.create(
      { model, messages: [{ role: 'user', content: 'are you there?' }], max_tokens: 2 });
    await ask('qwen');
    await ask('llama');
    const { port } = (await models(r)).qwen;
    // The qwen server's pid, from the port it listens on (ss -ltnp), then kill -9 it.
    const ss = execFileSync('ss', ['-ltnpH', `sport = :${port}`], { encoding: 'utf8' });
    const pid = Number(/pid=(\d+)/.exec(ss)[1]);
    process.kill(pid, 'SIGKILL');
    await ask('llama');  // the other model is untouched
    const again = await ask('qwen');  // noticed, loaded again
    assert.equal(again.choices.length, 1);
    const m = await models(r);
    assert.equal(m.qwen.loads, 2);
    assert.match(m.qwen.last_error ?? '', /killed|SIGKILL|signal/i);
    assert.equal(m.llama.loads, 1);
    const page = await (await fetch(`${r.url}/metrics`)).text();
    assert.equal(metric(page, 'prefixd_router_crashes_total'), 1);
  });
});

// A vision model (gemma3 in a folder with its projector, as llama-server's router finds one) and
// a text-only model: /v1/models and the start log say which reads images and each one's window
// before anything loads; a picture reaches the vision model's encoder through the router, and the
// text-only model answers it with the stand-in.
describe('a vision model and a text-only model behind one port', () => {
  let dir; let modelsDir;
  const running = [];
  const picture = pngDataUrl(png(64, 48, 3));

  before(() => {
    dir = tempDir('router-vision');
    modelsDir = join(dir, 'models');
    mkdirSync(join(modelsDir, 'g3'), { recursive: true });
    execFileSync(BIN, ['make-test-model', '--arch', 'gemma3', '--seed', '1',
      '--mmproj', join(modelsDir, 'g3', 'mmproj-g3.gguf'), '-o', join(modelsDir, 'g3', 'g3.gguf')],
    { stdio: ['ignore', 'ignore', 'inherit'] });
    make(modelsDir, 'qwen35', 2, 'text');
  });

  after(async () => {
    for (const s of running) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function router(args) {
    const s = await startServer({ args: ['--models-dir', modelsDir, '--slots', '1', ...args] });
    running.push(s);
    return s;
  }

  const windowOf = (m) => ({ max_input_tokens: m.max_input_tokens, max_tokens: m.max_tokens,
    context_window: m.context_window, context_length: m.context_length,
    max_model_len: m.max_model_len });
  const window = (ctx, out) => ({ max_input_tokens: ctx, max_tokens: out, context_window: ctx,
    context_length: ctx, max_model_len: ctx });

  it('/v1/models and the start log say which model reads images and each window, unloaded; '
    + 'an image reaches the projector through the router, and the text-only model stands it in',
  async () => {
    const file = join(dir, 'models.ini');
    writeFileSync(file, ['[text]', 'ctx = 2048', 'n-predict = 128', ''].join('\n'));
    const r = await router(['--models', file, '--ctx', '4096']);
    let m = await models(r);
    assert.deepEqual(Object.keys(m).sort(), ['g3', 'text'], 'the projector is not a model');
    assert.equal(m.g3.state, 'unloaded');
    assert.equal(m.text.state, 'unloaded');
    assert.deepEqual(m.g3.input_modalities, ['text', 'image']);
    assert.deepEqual(m.text.input_modalities, ['text']);
    // The router's --ctx for g3, the section's ctx and n-predict for text (ModelWindowOf: an
    // eighth of the window within [1024, 32000], at most half of it, or -n).
    assert.deepEqual(windowOf(m.g3), window(4096, 1024));
    assert.deepEqual(windowOf(m.text), window(2048, 128));
    assert.match(r.log,
      /prefixd model id=g3 input=text,image ctx=4096 ctx_from=configured mmproj=\S*mmproj-g3\.gguf/);
    assert.match(r.log, /prefixd model id=text input=text ctx=2048 ctx_from=configured\n/);

    const content = [{ type: 'text', text: 'What does this screenshot show?' },
      { type: 'image_url', image_url: { url: picture } }];
    const ask = (model) => client(r).chat.completions.create(
      { model, max_tokens: 4, messages: [{ role: 'user', content }] }).withResponse();
    const g3 = await ask('g3');
    assert.equal(g3.response.status, 200);
    assert.equal(g3.response.headers.get('x-prefixd-images'), 'read; n=1');
    assert.equal(g3.data.model, 'g3');
    const text = await ask('text');
    assert.equal(text.response.status, 200);
    assert.equal(text.response.headers.get('x-prefixd-images'), 'stand-in; n=1');

    m = await models(r);
    assert.equal(m.g3.state, 'loaded');
    assert.deepEqual(windowOf(m.g3), window(4096, 1024), 'its server says the same window');
    assert.deepEqual(windowOf(m.text), window(2048, 128));
    const one = await (await fetch(`${r.url}/v1/models/g3`)).json();
    assert.deepEqual(one.input_modalities, ['text', 'image']);
    assert.equal(one.max_input_tokens, 4096);
  });

  it('prefixd launch takes each model\'s window from the router, none loaded', async () => {
    const file = join(dir, 'launch.ini');
    writeFileSync(file, ['[text]', 'ctx = 2048', ''].join('\n'));
    const r = await router(['--models', file, '--ctx', '16384']);
    const launch = (model) => spawnSync(BIN, ['launch', 'claude', '--url', r.url, '--model', model,
      '--client-bin', '/usr/bin/env'], { encoding: 'utf8', timeout: 30000 });
    // The client's program is `env`: what launch hands Claude Code is what it prints.
    const g3 = launch('g3');
    assert.equal(g3.status, 0, g3.stderr);
    assert.match(g3.stdout, /^CLAUDE_CODE_MAX_CONTEXT_TOKENS=16384$/m, g3.stdout);
    assert.match(g3.stdout, /^ANTHROPIC_MODEL=g3$/m, g3.stdout);
    // The text model's section says ctx 2048: too small for Claude Code, and launch says so.
    const text = launch('text');
    assert.notEqual(text.status, 0);
    assert.match(text.stderr, /model text has 2048/, text.stderr);
    assert.equal((await models(r)).g3.state, 'unloaded', 'asking for the window loads nothing');
  });

  it('with no ctx anywhere, the window is the trained context from the GGUF header, and the '
    + 'loaded server says the same', async () => {
    const r = await router([]);
    const before = await models(r);
    assert.equal(before.g3.state, 'unloaded');
    const trained = before.g3.max_input_tokens;
    assert.ok(trained > 0, JSON.stringify(before.g3));
    assert.match(r.log,
      new RegExp(`prefixd model id=g3 input=text,image ctx=${trained} ctx_from=trained`));
    const load = await post(r, '/v1/models/g3/load', {});
    assert.equal(load.status, 200, load.text);
    const loaded = await models(r);
    assert.equal(loaded.g3.state, 'loaded');
    assert.equal(loaded.g3.max_input_tokens, trained);
    assert.match(r.log, new RegExp(`prefixd\\[g3\\] listening .* ctx=${trained} `));
  });
});
