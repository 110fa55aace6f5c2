// One front door: the same table of hostile requests — another site's page, a DNS-rebinding
// page, a deep body, huge strings — against both entry points, `serve -m` and the router
// (`serve --models-dir`), each refused before anything is parsed, loaded or forwarded. Then
// what only the router has: cancellation of forwarded requests, model lifetime as an admin's
// right, keep_alive bounds, what a tenant sees of a model.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, sleep, startServer, tempDir } from './harness.js';

const MODEL = 'm';

function makeModelNamed(dir, name, arch = 'qwen35') {
  const out = join(dir, `${name}.gguf`);
  execFileSync(BIN, ['make-test-model', '--arch', arch, '--shape', 'tiny', '--seed', '3',
    '--out', out], { stdio: ['ignore', 'ignore', 'inherit'] });
  return out;
}

// A raw HTTP/1.1 exchange: fetch() would set Host, Origin and Content-Type itself. The body
// goes after a short wait, and not at all when the server has answered by then (it refused
// the request on its head, reading nothing more: writing on would only meet a closed socket).
async function raw(server, head, body = '') {
  const { connect } = await import('node:net');
  return new Promise((resolve, reject) => {
    const got = [];
    const s = connect(server.port, '127.0.0.1', () => {
      s.write(`${head.join('\r\n')}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`
        + 'Connection: close\r\n\r\n');
      if (!body) return;
      setTimeout(() => { if (!got.length) s.write(body); }, 100);
    });
    const done = () => {
      const text = Buffer.concat(got).toString('utf8');
      resolve({ status: Number(text.split(' ')[1]), text });
    };
    s.on('data', (d) => got.push(d));
    s.on('end', done);
    s.on('error', (e) => (got.length ? done() : reject(e)));
  });
}

const rssMiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
const chat = (extra = {}) => JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 1, ...extra });

// [what, request head lines, body, status wanted, error code wanted]
const HOSTILE = [
  ['a rebinding page lists the models', ['GET /v1/models HTTP/1.1', 'Host: evil.example'], '', 403, 'host_not_allowed'],
  ['a rebinding page runs a chat', ['POST /v1/chat/completions HTTP/1.1', 'Host: evil.example:8080',
    'Content-Type: application/json'], chat(), 403, 'host_not_allowed'],
  ['a rebinding page reads the recent prompts', [`GET /v1/requests/recent?model=${MODEL} HTTP/1.1`,
    'Host: evil.example'], '', 403, 'host_not_allowed'],
  ['a page loads a model with a form', [`POST /v1/models/${MODEL}/load HTTP/1.1`, 'Host: 127.0.0.1',
    'Origin: http://evil.example', 'Content-Type: text/plain'], '', 415, 'unsupported_media_type'],
  ['a page unloads with keep_alive 0 in text/plain', ['POST /v1/chat/completions HTTP/1.1',
    'Host: 127.0.0.1', 'Origin: http://evil.example', 'Content-Type: text/plain'],
  chat({ keep_alive: 0 }), 415, 'unsupported_media_type'],
  ['an <img> tag loads a model', [`GET /x.png?model=${MODEL} HTTP/1.1`, 'Host: 127.0.0.1',
    'Sec-Fetch-Site: cross-site', 'Sec-Fetch-Mode: no-cors', 'Sec-Fetch-Dest: image'], '', 403,
  'cross_site_request'],
  ['a page reads the stats with fetch', [`GET /v1/cache/stats?model=${MODEL} HTTP/1.1`, 'Host: 127.0.0.1',
    'Origin: http://evil.example', 'Sec-Fetch-Site: cross-site', 'Sec-Fetch-Mode: cors'], '', 403,
  'cross_site_request'],
  ['another port of localhost', [`GET /v1/models HTTP/1.1`, 'Host: localhost:8080',
    'Origin: http://localhost:3000', 'Sec-Fetch-Site: same-site', 'Sec-Fetch-Mode: cors'], '', 403,
  'cross_site_request'],
  ['a preflight from a page not allowed', ['OPTIONS /v1/chat/completions HTTP/1.1', 'Host: 127.0.0.1',
    'Origin: http://evil.example', 'Access-Control-Request-Method: POST'], '', 403, 'origin_not_allowed'],
];

// What must still work through the same door.
const FRIENDLY = [
  ['a link to the dashboard', ['GET / HTTP/1.1', 'Host: 127.0.0.1', 'Sec-Fetch-Site: cross-site',
    'Sec-Fetch-Mode: navigate', 'Sec-Fetch-Dest: document'], '', [200, 302]],
  ['an allowed Host name', ['GET /v1/models HTTP/1.1', 'Host: prefixd.lan'], '', [200]],
  ['the page itself', ['GET /v1/models HTTP/1.1', 'Host: 127.0.0.1', 'Sec-Fetch-Site: same-origin'], '', [200]],
];

async function modelState(server) {
  const r = await raw(server, ['GET /v1/models HTTP/1.1', 'Host: 127.0.0.1']);
  const body = JSON.parse(r.text.slice(r.text.indexOf('\r\n\r\n') + 4));
  return body.data.find((m) => m.id === MODEL)?.state;  // undefined on the single server
}

for (const entry of ['single server', 'router']) {
  describe(`the front door of the ${entry}`, () => {
    let dir; let server;
    before(async () => {
      dir = tempDir('door');
      const models = join(dir, 'models');
      mkdirSync(models);
      const model = makeModelNamed(models, MODEL);
      const common = ['--allowed-host', 'prefixd.lan', '--slots', '1', '--ctx', '2048'];
      server = entry === 'router'
        ? await startServer({ args: ['--models-dir', models, '--request-read-timeout', '0', ...common] })
        : await startServer({ model, args: common });
    });
    after(async () => {
      await server?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    it('refuses every hostile request before it acts, and lets the friendly ones in', async () => {
      for (const [what, head, body, status, code] of HOSTILE) {
        const r = await raw(server, head, body);
        assert.equal(r.status, status, `${what}: ${r.text.slice(0, 300)}`);
        assert.match(r.text, new RegExp(code), what);
        if (entry === 'router') assert.equal(await modelState(server), 'unloaded', `${what}: nothing loaded`);
      }
      for (const [what, head, body, statuses] of FRIENDLY) {
        const r = await raw(server, head, body);
        assert.ok(statuses.includes(r.status), `${what}: ${r.text.slice(0, 300)}`);
      }
      if (entry === 'router') assert.equal(await modelState(server), 'unloaded');
      // The model's server judges the client's Host too: the router passes it on.
      const named = await raw(server, ['POST /v1/chat/completions HTTP/1.1', 'Host: prefixd.lan',
        'Content-Type: application/json'], chat());
      assert.equal(named.status, 200, named.text.slice(0, 300));
    });

    it('bounds a 32 MiB nested body, and logs no client string whole', async () => {
      const pid = server.proc.pid;
      const before = rssMiB(pid);
      const n = 16 << 20;
      const deep = '['.repeat(n) + ']'.repeat(n);
      const plain = await raw(server, ['POST /v1/chat/completions HTTP/1.1', 'Host: 127.0.0.1',
        'Content-Type: text/plain'], deep);
      assert.equal(plain.status, 415);
      const json = await raw(server, ['POST /v1/chat/completions HTTP/1.1', 'Host: 127.0.0.1',
        'Content-Type: application/json'], deep);
      assert.equal(json.status, 400, json.text.slice(0, 300));
      assert.match(json.text, /nests deeper than 64/);
      const grown = rssMiB(pid) - before;
      console.log(`[ front door ] ${entry}: a 32 MiB nested body grew RSS by ${grown.toFixed(0)} MiB`);
      assert.ok(grown < 200, `RSS grew by ${grown} MiB`);

      const logBefore = server.log.length;
      const role = 'r'.repeat(4 << 20);
      const r = await raw(server, ['POST /v1/chat/completions HTTP/1.1', 'Host: 127.0.0.1',
        'Content-Type: application/json'], JSON.stringify({ model: MODEL, messages: [{ role, content: 'x' }] }));
      assert.equal(r.status, 400);
      await sleep(200);
      const logged = server.log.length - logBefore;
      assert.ok(logged < 16384, `a 4 MB role added ${logged} bytes of log`);
    });
  });
}

describe('the router, past its door', () => {
  let dir; let models; let keys; let admins; const running = [];
  const TENANT = 'sk-tenant-a'; const ADMIN = 'sk-admin';
  before(() => {
    dir = tempDir('door-router');
    models = join(dir, 'models');
    mkdirSync(models);
    makeModelNamed(models, MODEL);
    writeFileSync(join(models, 'broken.gguf'), Buffer.alloc(4096, 0x5a));  // fails to load
    keys = join(dir, 'keys.txt');
    admins = join(dir, 'admins.txt');
    writeFileSync(keys, `${TENANT}\n`);
    writeFileSync(admins, `${ADMIN}\n`);
  });
  after(async () => {
    for (const s of running) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  async function router(args) {
    const s = await startServer({ args: ['--models-dir', models, '--slots', '1', '--ctx', '4096', ...args] });
    running.push(s);
    return s;
  }
  const auth = (key) => ({ Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' });
  async function view(r, key, id = MODEL) {
    const res = await fetch(`${r.url}/v1/models/${id}`, { headers: auth(key) });
    assert.equal(res.status, 200);
    return res.json();
  }

  it('ends a forwarded request whose client went away, streamed or not, in prefill too', async () => {
    const r = await router(['--ctx', '32768']);
    const warm = await fetch(`${r.url}/v1/chat/completions`, { method: 'POST',
      headers: { 'Content-Type': 'application/json' }, body: chat() });
    assert.equal(warm.status, 200);
    for (const stream of [false, true]) {
      const abort = new AbortController();
      const started = Date.now();
      const req = fetch(`${r.url}/v1/chat/completions`, { method: 'POST', signal: abort.signal,
        headers: { 'Content-Type': 'application/json' },
        body: chat({ max_tokens: 20000, ignore_eos: true, stream }) }).then((x) => x.text()).catch(() => 'aborted');
      await sleep(1000);
      assert.equal((await view(r, 'x')).in_flight, 1, 'the request runs');
      abort.abort();
      assert.equal(await req, 'aborted');
      let inFlight = 1;
      for (let i = 0; i < 100 && inFlight > 0; i++) {
        await sleep(50);
        inFlight = (await view(r, 'x')).in_flight;
      }
      assert.equal(inFlight, 0, `stream=${stream}: the model's server still runs it`);
      console.log(`[ front door ] stream=${stream}: ended ${Date.now() - started} ms after it began`);
      const unload = await fetch(`${r.url}/v1/models/${MODEL}/unload`, { method: 'POST',
        headers: { 'Content-Type': 'application/json' } });
      assert.equal(unload.status, 200, 'nothing holds the model');
      const load = await fetch(`${r.url}/v1/models/${MODEL}/load`, { method: 'POST',
        headers: { 'Content-Type': 'application/json' } });
      assert.equal(load.status, 200);
    }
    // A stream abandoned during its prefill (24K tokens): the model's server stops prefilling.
    const abort = new AbortController();
    const long = fetch(`${r.url}/v1/chat/completions`, { method: 'POST', signal: abort.signal,
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: MODEL, stream: true,
        max_tokens: 4, messages: [{ role: 'user', content: 'alpha beta gamma delta '.repeat(1800) }] }) })
      .then((x) => x.text()).catch(() => 'aborted');
    await sleep(400);
    abort.abort();
    assert.equal(await long, 'aborted');
    let last;
    for (let i = 0; i < 200 && !last; i++) {
      await sleep(50);
      const recent = await (await fetch(`${r.url}/v1/requests/recent?model=${MODEL}`)).json();
      last = recent.requests.find((q) => q.prompt_tokens > 20000);
    }
    assert.ok(last, 'the request ended');
    assert.equal(last.cancelled, true);
    assert.ok(last.evaluated_tokens < last.prompt_tokens, `prefilled ${last.evaluated_tokens} of ${last.prompt_tokens}`);
    console.log(`[ front door ] a stream abandoned in prefill: ${last.evaluated_tokens} of ${last.prompt_tokens} tokens prefilled`);
  });

  it('reads a keep_alive past any clock as forever, never as "now"', async () => {
    const r = await router([]);
    const res = await fetch(`${r.url}/v1/chat/completions`, { method: 'POST',
      headers: { 'Content-Type': 'application/json' }, body: chat({ keep_alive: '5000000h' }) });
    assert.equal(res.status, 200);
    await sleep(2500);
    const m = await view(r, 'x');
    assert.equal(m.state, 'loaded');
    assert.equal(m.ttl_s, -1);
    const bad = await fetch(`${r.url}/v1/chat/completions`, { method: 'POST',
      headers: { 'Content-Type': 'application/json' }, body: chat({ keep_alive: '1e400h' }) });
    assert.equal(bad.status, 400);
  });

  it('keeps model lifetime, paths and failures to admins when keys are on', async () => {
    const r = await router(['--api-key-file', keys, '--admin-key-file', admins, '--models-ttl', '600',
      '--models-keep-alive-max', '900', '--cors-origin', 'http://localhost:3000']);
    const load = await fetch(`${r.url}/v1/models/${MODEL}/load`, { method: 'POST', headers: auth(TENANT) });
    assert.equal(load.status, 403, 'a tenant loads nothing');
    const admin = await fetch(`${r.url}/v1/models/${MODEL}/load`, { method: 'POST', headers: auth(ADMIN) });
    assert.equal(admin.status, 200);
    for (const keep_alive of [0, '1s', -1, '100h']) {
      const res = await fetch(`${r.url}/v1/chat/completions`, { method: 'POST', headers: auth(TENANT),
        body: chat({ keep_alive }) });
      assert.equal(res.status, 200);
      const ttl = (await view(r, ADMIN)).ttl_s;
      assert.ok(ttl >= 600 && ttl <= 900, `a tenant's keep_alive ${keep_alive}: ttl ${ttl}`);
    }
    await sleep(2000);
    assert.equal((await view(r, ADMIN)).state, 'loaded', 'a tenant\'s keep_alive 0 unloaded nothing');

    const broken = await fetch(`${r.url}/v1/chat/completions`, { method: 'POST', headers: auth(ADMIN),
      body: JSON.stringify({ model: 'broken', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }) });
    assert.equal(broken.status, 500);
    const seenByAdmin = await view(r, ADMIN, 'broken');
    const seenByTenant = await view(r, TENANT, 'broken');
    assert.ok(seenByAdmin.path && seenByAdmin.last_error, JSON.stringify(seenByAdmin));
    assert.equal(seenByTenant.path, undefined);
    assert.equal(seenByTenant.port, undefined);
    assert.doesNotMatch(seenByTenant.last_error, /gguf|\//, 'no log line, no path');
    const list = await (await fetch(`${r.url}/v1/models`, { headers: auth(TENANT) })).json();
    assert.ok(list.data.every((m) => m.path === undefined && m.port === undefined));

    const preflight = await fetch(`${r.url}/v1/chat/completions`, { method: 'OPTIONS', headers: {
      Origin: 'http://localhost:3000', 'Access-Control-Request-Method': 'POST' } });
    assert.equal(preflight.status, 204, 'an allowed origin preflights the router as it does a model');
    const page = await (await fetch(`${r.url}/metrics`, { headers: auth(ADMIN) })).text();
    assert.match(page, new RegExp(`model="${MODEL}"`), 'the router asks the models with the admin\'s key');
    assert.match(page, /prefixd_prompt_tokens_total\{[^}]*model="m"/);
  });
});
