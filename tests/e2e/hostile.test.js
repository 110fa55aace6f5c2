// One request cannot take the server down: bodies that made the scheduler thread throw (a
// grammar that has ended while ignore_eos masks the end of generation) get a clear answer,
// while a stream on the other slot completes and /health stays up.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { makeModel, metric, metrics, post, sleep, startServer, tempDir } from './harness.js';

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

  const rssMiB = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${server.proc.pid}/status`, 'utf8'))[1]) / 1024;

  it('bounds what /tokenize answers and holds', async () => {
    const before = rssMiB();
    const text = 'the quick brown fox jumps over the lazy dog. '.repeat(1 << 13);  // 360 KB
    const pieces = await post(server, '/tokenize', { content: text, with_pieces: true });
    assert.equal(pieces.status, 400, 'pieces of more tokens than the bound');
    assert.equal(pieces.json.error.param, 'with_pieces');
    const ids = await post(server, '/tokenize', { content: text });
    assert.equal(ids.status, 200, 'without pieces the same text is ids');
    const huge = await post(server, '/tokenize', { content: 'x'.repeat((4 << 20) + 1) });
    assert.equal(huge.status, 400);
    assert.equal(huge.json.error.param, 'content');
    const grown = rssMiB() - before;
    console.log(`[ bounds ] /tokenize: RSS ${before.toFixed(0)} MiB -> +${grown.toFixed(0)} MiB`);
    assert.ok(grown < 512, `the server grew by ${grown} MiB`);
  });

  it('keeps its cache directory to its owner: directories 0700, files 0600', async () => {
    await post(server, '/v1/chat/completions', { messages: user('A prompt for the disk tier. '.repeat(30)),
      max_tokens: 2, ...noThinking });
    const seen = { dirs: 0, files: 0 };
    for (let i = 0; i < 100; i++) {  // the disk tier writes behind the request
      seen.files = 0;
      walk(join(server.dir, 'cache'), seen);
      if (seen.files >= 5) break;
      await sleep(100);
    }
    assert.ok(seen.files >= 5, `records reached the disk (${seen.files} files)`);
    function walk(dir, n) {
      assert.equal(statSync(dir).mode & 0o777, 0o700, dir);
      n.dirs++;
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = join(dir, e.name);
        if (e.isDirectory()) walk(p, n);
        else { assert.equal(statSync(p).mode & 0o777, 0o600, p); n.files++; }
      }
    }
  });

  it('refuses a schema whose grammar would cost seconds, before building it', async () => {
    const schema = (n) => ({ type: 'object', properties: Object.fromEntries(
      Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'integer' }])) });
    const ask = (n) => post(server, '/v1/chat/completions', { messages: user('hi'), max_tokens: 1,
      response_format: { type: 'json_schema', json_schema: { name: 's', schema: schema(n) } }, ...noThinking });
    let t0 = Date.now();
    const refused = await ask(800);
    const refusedMs = Date.now() - t0;
    assert.equal(refused.status, 400);
    assert.equal(refused.json.error.param, 'response_format');
    t0 = Date.now();
    const atCap = await ask(128);
    const atCapMs = Date.now() - t0;
    assert.equal(atCap.status, 200, atCap.text);
    console.log(`[ bounds ] schema of 800 optional properties refused in ${refusedMs} ms; ` +
      `128 (the cap) answered in ${atCapMs} ms`);
    assert.ok(refusedMs < 2000, `the refusal took ${refusedMs} ms`);
  });
});

// Other web pages (keys off, the default): a page that re-resolved its own name to 127.0.0.1
// (DNS rebinding) says so in Host; a cross-site "simple" POST cannot say application/json.
describe('other web pages', () => {
  let dir; let server;
  before(async () => {
    dir = tempDir('pages');
    server = await startServer({ model: makeModel(dir), args: ['--allowed-host', 'prefixd.lan'] });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  // Raw requests: fetch() sets Host and Content-Type itself.
  async function raw(lines, body = '') {
    const { connect } = await import('node:net');
    return new Promise((resolve, reject) => {
      const s = connect(server.port, '127.0.0.1', () => {
        s.end(`${lines.join('\r\n')}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
      });
      let got = '';
      s.on('data', (d) => { got += d; });
      s.on('end', () => resolve({ status: Number(got.split(' ')[1]), text: got }));
      s.on('error', reject);
    });
  }
  const chat = JSON.stringify({ messages: user('hi'), max_tokens: 1 });

  it('answers only the Host names it is reached by', async () => {
    const cases = [
      ['127.0.0.1', 200], [`127.0.0.1:${'8080'}`, 200], ['localhost:8080', 200], ['[::1]:8080', 200],
      ['prefixd.lan', 200], ['PREFIXD.LAN:80', 200], ['evil.example', 403], ['evil.example:8080', 403],
      ['127.0.0.1.evil.example', 403], ['localhost.evil.example', 403],
    ];
    for (const [host, want] of cases) {
      for (const path of ['/health', '/v1/requests/recent']) {
        const r = await raw([`GET ${path} HTTP/1.1`, `Host: ${host}`]);
        assert.equal(r.status, want, `GET ${path} with Host: ${host}`);
        if (want === 403) assert.match(r.text, /host_not_allowed/);
      }
    }
  });

  it('runs a POST only when it says application/json, or carries a key', async () => {
    const before = metric(await metrics(server), 'prefixd_cache_bytes{tier="ram"}');
    const cases = [
      ['text/plain', 415], ['application/x-www-form-urlencoded', 415], ['multipart/form-data; boundary=x', 415],
      ['', 415], ['application/json', 200], ['application/json; charset=utf-8', 200], ['Application/JSON', 200],
    ];
    for (const [type, want] of cases) {
      const lines = ['POST /v1/chat/completions HTTP/1.1', 'Host: 127.0.0.1'];
      if (type) lines.push(`Content-Type: ${type}`);
      const r = await raw(lines, chat);
      assert.equal(r.status, want, `Content-Type '${type}'`);
    }
    const clear = await raw(['POST /v1/cache/clear HTTP/1.1', 'Host: 127.0.0.1', 'Content-Type: text/plain']);
    assert.equal(clear.status, 415, 'a page cannot clear the cache');
    assert.ok(metric(await metrics(server), 'prefixd_cache_bytes{tier="ram"}') >= before, 'nothing was cleared');
    const keyed = await raw(['POST /v1/chat/completions HTTP/1.1', 'Host: 127.0.0.1', 'x-api-key: any'], chat);
    assert.equal(keyed.status, 200, 'a request with a key is no page\'s');
  });
});

// CORS only for the origins the operator names.
describe('--cors-origin', () => {
  let dir; let server;
  const ALLOWED = 'http://localhost:3000';
  before(async () => {
    dir = tempDir('cors');
    server = await startServer({ model: makeModel(dir), args: ['--cors-origin', ALLOWED] });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('lets the named origin preflight and read, and no other', async () => {
    const preflight = (origin) => fetch(`${server.url}/v1/chat/completions`, { method: 'OPTIONS',
      headers: { Origin: origin, 'Access-Control-Request-Method': 'POST',
        'Access-Control-Request-Headers': 'content-type' } });
    const ok = await preflight(ALLOWED);
    assert.equal(ok.status, 204);
    assert.equal(ok.headers.get('access-control-allow-origin'), ALLOWED);
    assert.match(ok.headers.get('access-control-allow-headers') ?? '', /Content-Type/);
    const other = await preflight('http://evil.example');
    assert.equal(other.status, 403);
    assert.equal(other.headers.get('access-control-allow-origin'), null);
    const read = await post(server, '/v1/chat/completions', { messages: user('hi'), max_tokens: 1 },
      { Origin: ALLOWED });
    assert.equal(read.status, 200);
    assert.equal(read.headers.get('access-control-allow-origin'), ALLOWED);
    const denied = await post(server, '/v1/chat/completions', { messages: user('hi'), max_tokens: 1 },
      { Origin: 'http://evil.example' });
    assert.equal(denied.headers.get('access-control-allow-origin'), null, 'no other origin may read');
  });
});

// Slow clients: connections from another loopback address (127.0.0.2) that send headers and no
// body, or trickle header bytes, against normal traffic from 127.0.0.1.
describe('slow clients', () => {
  const CAP = 8;
  const DEADLINE_S = 2;
  let dir; let server; const sockets = [];
  before(async () => {
    dir = tempDir('slow');
    server = await startServer({
      model: makeModel(dir),
      args: ['--slots', '1', '--max-queue', '1', '--request-read-timeout', String(DEADLINE_S),
        '--max-connections-per-address', String(CAP)],
    });
  });
  after(async () => {
    for (const s of sockets) { clearInterval(s.trickle); s.destroy(); }
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  // A connection from 127.0.0.2 that sends `head` and then one byte every 200 ms (trickle) or
  // nothing; resolves to a record of what the server answered and when it closed.
  async function slowConnection(head, trickle) {
    const { connect } = await import('node:net');
    const s = connect({ host: '127.0.0.1', port: server.port, localAddress: '127.0.0.2' });
    sockets.push(s);
    const rec = { got: '', closedAt: 0, openedAt: Date.now(), socket: s };
    s.on('data', (d) => { rec.got += d; });
    s.on('close', () => { rec.closedAt = Date.now(); clearInterval(s.trickle); });
    s.on('error', () => {});
    await new Promise((resolve) => s.on('connect', resolve));
    s.write(head);
    if (trickle) s.trickle = setInterval(() => { if (!s.destroyed) s.write('a'); }, 200);
    return rec;
  }
  const timed = async (f) => { const t = Date.now(); const r = await f(); return [r, Date.now() - t]; };
  const chat = { messages: user('hi'), max_tokens: 2, ...noThinking };

  it('hold no slot or queue place while their bodies have not come', async () => {
    const held = [];
    for (let i = 0; i < 3; i++) {
      held.push(await slowConnection('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n' +
        'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n', false));
    }
    for (let i = 0; i < 3; i++) {
      const r = await post(server, '/v1/chat/completions', chat);
      assert.equal(r.status, 200, `chat ${i} while 3 bodies are missing: ${r.text}`);
    }
    const deadline = Date.now() + (DEADLINE_S + 5) * 1000;
    while (held.some((h) => !h.closedAt) && Date.now() < deadline) await sleep(100);
    for (const h of held) {
      assert.ok(h.closedAt, 'a body that never comes is cut at the read deadline');
      assert.ok(h.closedAt - h.openedAt < (DEADLINE_S + 4) * 1000, `cut after ${h.closedAt - h.openedAt} ms`);
    }
  });

  it('hold at most their address\'s cap of connections, each for at most the deadline', async () => {
    const before = await metrics(server);
    const refusedBefore = metric(before, 'prefixd_http_connections_refused_total');
    const cutBefore = metric(before, 'prefixd_http_read_deadline_cuts_total');
    const conns = [];
    for (let i = 0; i < 5 * CAP; i++) {
      conns.push(await slowConnection('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ', true));
    }
    const isRefused = (c) => c.got.startsWith('HTTP/1.1 429') && c.closedAt;
    for (let i = 0; i < 100 && conns.filter(isRefused).length < 4 * CAP; i++) await sleep(50);
    const refused = conns.filter((c) => c.got.startsWith('HTTP/1.1 429'));
    assert.equal(refused.length, 4 * CAP, `all but ${CAP} are refused at once`);
    assert.match(refused[0].got, /Retry-After: 1/);
    assert.equal(JSON.parse(refused[0].got.split('\r\n\r\n')[1]).error.type, 'rate_limit_error');
    // The rest of the world is served meanwhile, from another address.
    for (let i = 0; i < 5; i++) {
      const [r, ms] = await timed(() => fetch(`${server.url}/health`));
      assert.equal(r.status, 200);
      assert.ok(ms < 2000, `/health answered in ${ms} ms while ${CAP} connections trickle`);
    }
    const r = await post(server, '/v1/chat/completions', chat);
    assert.equal(r.status, 200, r.text);
    const held = conns.filter((c) => !c.got.startsWith('HTTP/1.1 429'));
    const until = Date.now() + (DEADLINE_S + 5) * 1000;
    while (held.some((h) => !h.closedAt) && Date.now() < until) await sleep(100);
    for (const h of held) {
      assert.ok(h.closedAt, 'a trickling request is cut at its deadline');
      assert.ok(h.closedAt - h.openedAt < (DEADLINE_S + 4) * 1000, `cut after ${h.closedAt - h.openedAt} ms`);
    }
    const page = await metrics(server);
    assert.equal(metric(page, 'prefixd_http_connections_refused_total') - refusedBefore, 4 * CAP);
    assert.equal(metric(page, 'prefixd_http_read_deadline_cuts_total') - cutBefore, CAP);
    assert.match(server.log, /prefixd connection_refused address=127\.0\.0\.2/);
    // Its connections closed, the address is welcome again.
    const again = await slowConnection('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n', false);
    const t = Date.now() + 5000;
    while (!again.closedAt && Date.now() < t) await sleep(50);
    assert.match(again.got, /^HTTP\/1\.1 200/);
  });
});
