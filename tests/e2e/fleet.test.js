// A fleet behind a real load balancer: three prefixd servers on one Redis behind Debian's
// HAProxy, configured by deploy/haproxy.cfg.in exactly as deploy/fleet.sh renders it. Twelve
// agent sessions (nine name themselves in an x-session-id header, three in the body's
// prompt_cache_key) run interleaved through HAProxy with the official `openai` client. Checked:
// every session stays on one server and reuses its previous turn; the busiest server killed -9
// mid-trace (one request in flight on it) fails no request: HAProxy retries that one on another
// server, checks the dead one out, and its sessions restore their prefix from Redis there with
// the output of a --no-cache server; the killed server restarted on its cache dir rejoins and
// gets its sessions back; Redis killed, every session goes on from the local tiers.
// haproxy missing is a failure, not a skip: scripts/setup-deps.sh installs it.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  client, freePort, makeModel, metric, metrics, post, remoteSettled, sleep, startProcess,
  startRedis, startServer, tempDir,
  AGENT_TURNS as USERS,
} from './harness.js';

const HAPROXY = process.env.PREFIXD_HAPROXY || '/usr/sbin/haproxy';
const CONFIG_IN = new URL('../../deploy/haproxy.cfg.in', import.meta.url);
const NAMES = ['fleet-a', 'fleet-b', 'fleet-c'];
const N_SESSIONS = 12;
// Flags every server runs with; the --no-cache server too, so that its outputs compare.
const SERVE = ['--ctx', '8192'];
const TOOLS = 'Tools: read(path), write(path, text), run(cmd). Answer briefly, one tool a call. ';

// deploy/haproxy.cfg.in with its three markers replaced, as deploy/fleet.sh does.
function renderConfig({ front, stats, servers }) {
  const lines = servers.map((s) => `    server ${s.name} 127.0.0.1:${s.port}`).join('\n');
  return readFileSync(CONFIG_IN, 'utf8').replaceAll('@FRONT@', front)
    .replaceAll('@STATS@', stats).replaceAll('@SERVERS@', lines);
}

// HAProxy's stats CSV: the backend's rows by server name (and BACKEND), each a field map. A
// plain split: the fields read here (scur, wretr, wredis, status) come before any free text.
async function backendStats(lb) {
  const text = await (await fetch(`${lb.statsUrl}/;csv`)).text();
  const [head, ...rows] = text.trim().split('\n').map((l) => l.split(','));
  head[0] = head[0].replace(/^# /, '');
  const out = {};
  for (const row of rows) {
    const r = Object.fromEntries(head.map((h, i) => [h, row[i]]));
    if (r.pxname === 'prefixd_servers') out[r.svname] = r;
  }
  return out;
}

// Polls the stats until `pred(stats)` holds; fails after `ms`.
async function waitStats(lb, what, pred, ms = 15000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const stats = await backendStats(lb);
    if (pred(stats)) return stats;
    assert.ok(Date.now() < deadline, `HAProxy never saw ${what}:\n${lb.log.slice(-2000)}`);
    await sleep(50);
  }
}

// The length of the longest common prefix of two token arrays.
function commonPrefix(a, b) {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

describe('a fleet behind HAProxy', () => {
  let dir; let model; let redis; let lb; let cold; let lbClient;
  const servers = {};        // name → its running server (replaced when restarted)
  const stopped = [];        // every server ever started, for after()
  const ports = {};          // name → its fixed port: HAProxy's config names it
  const sessions = [];
  const restores = [];       // requests whose prefix came from disk or Redis

  async function startFleetServer(name) {
    const s = await startServer({
      model,
      args: [...SERVE, '--port', String(ports[name]), '--server-name', name,
        '--cache-dir', join(dir, name), '--remote-cache', redis.url],
    });
    servers[name] = s;
    stopped.push(s);
    return s;
  }

  before(async () => {
    assert.ok(existsSync(HAPROXY),
      `${HAPROXY} is missing: run scripts/setup-deps.sh (installs haproxy)`);
    dir = tempDir('fleet');
    model = makeModel(dir);
    redis = await startRedis();
    for (const name of NAMES) ports[name] = await freePort();
    for (const name of NAMES) await startFleetServer(name);
    cold = await startServer({ model, args: [...SERVE, '--no-cache'] });
    stopped.push(cold);
    const front = await freePort(); const stats = await freePort();
    const cfg = join(dir, 'haproxy.cfg');
    writeFileSync(cfg, renderConfig({
      front: `127.0.0.1:${front}`, stats: `127.0.0.1:${stats}`,
      servers: NAMES.map((name) => ({ name, port: ports[name] })),
    }));
    lb = startProcess(HAPROXY, ['-db', '-f', cfg]);
    lb.url = `http://127.0.0.1:${front}`;
    lb.statsUrl = `http://127.0.0.1:${stats}`;
    const deadline = Date.now() + 15000;
    for (;;) {
      try { await backendStats(lb); break; } catch { /* not listening yet */ }
      assert.ok(!lb.exited && Date.now() < deadline, `haproxy did not start:\n${lb.log}`);
      await sleep(50);
    }
    await waitStats(lb, 'every server up', (st) => NAMES.every((n) => st[n].status === 'UP'));
    lbClient = client(lb);  // maxRetries 0: every retry seen here is HAProxy's
    for (let i = 0; i < N_SESSIONS; i++) sessions.push(newSession(i));
  });
  after(async () => {
    await lb?.stop();
    if (process.env.PREFIXD_E2E_LOG && lb) console.error(lb.log);
    for (const s of stopped) await s.stop();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  // Session i: its own system prompt from the first word on (no two sessions share a Block,
  // so a session's prefix on a server it has never used can only come from Redis), over 256
  // tokens (whole Blocks go through the tiers, not only Tails). Sessions 3, 7 and 11 name
  // themselves in prompt_cache_key, the others in x-session-id.
  function newSession(i) {
    return {
      key: `agent-${i}`, viaBody: i % 4 === 3, turns: [], prevTokens: null,
      messages: [{ role: 'system', content: `Session ${i}, agent ${i}. ${TOOLS.repeat(12)}` }],
    };
  }

  // The servers that answered session `s` in `phase`, each once.
  const servedBy = (s, phase) => [
    ...new Set(s.turns.filter((t) => t.phase === phase).map((t) => t.server))];

  // The rendered prompt's tokens, as /v1/chat/completions evaluates them (the --no-cache
  // server renders; no fleet server sees it).
  async function promptTokens(messages) {
    const r = await post(cold, '/apply-template', { messages });
    assert.equal(r.status, 200, r.text);
    return r.json.tokens;
  }

  // What the answering server says the cache did for request `id` (/v1/requests/recent).
  async function recentEntry(name, id) {
    const deadline = Date.now() + 5000;
    for (;;) {
      const r = await (await fetch(`${servers[name].url}/v1/requests/recent`)).json();
      const e = r.requests.find((q) => q.id === id);
      if (e) return e;
      assert.ok(Date.now() < deadline, `${name} never listed ${id}`);
      await sleep(50);
    }
  }

  // One chat completion of session `s` through HAProxy. Any status but 200 throws (the openai
  // client's APIError, retries off), naming the session.
  async function ask(s, messages, maxTokens = 8) {
    const body = { model: 'tiny', messages, max_tokens: maxTokens, temperature: 0 };
    if (s.viaBody) body.prompt_cache_key = s.key;
    const headers = s.viaBody ? {} : { 'x-session-id': s.key };
    try {
      const { data, response } = await lbClient.chat.completions.create(body, { headers })
        .withResponse();
      assert.equal(response.status, 200);
      return { server: response.headers.get('x-prefixd-server'), data };
    } catch (e) {
      throw new Error(`session ${s.key}: ${e.status ?? ''} ${e.message}`);
    }
  }

  // Turn t of every session, interleaved (session 0's turn t, session 1's, …). The history
  // keeps fixed assistant text, not the model's answers, as in shared_tier.test.js: only
  // prompts are reused, which restore bit for bit on every CPU (docs/architecture.md,
  // "Exactness on each CPU"). Reusable = the tokens this prompt shares with the previous
  // turn's, both as the server renders them: with this template it is the whole previous
  // prompt (the turn appends to it), but it is measured, not assumed.
  async function turn(t, phase, list = sessions) {
    for (const s of list) {
      s.messages.push({ role: 'user', content: USERS[t] });
      const tokens = await promptTokens(s.messages);
      const { server, data } = await ask(s, s.messages);
      assert.equal(data.usage.prompt_tokens, tokens.length, 'the prompt the server evaluated');
      const entry = await recentEntry(server, data.id);
      const rec = {
        t, phase, server, tier: entry.tier,
        cached: data.usage.prompt_tokens_details.cached_tokens,
        reusable: s.prevTokens ? commonPrefix(s.prevTokens, tokens) : 0,
      };
      s.turns.push(rec);
      if (rec.tier === 'remote' || rec.tier === 'disk') {
        // A prefix restored from a lower tier answers as a server with no cache does.
        const want = await client(cold).chat.completions.create(
          { model: 'tiny', messages: s.messages, max_tokens: 8, temperature: 0 });
        assert.equal(data.choices[0].message.content, want.choices[0].message.content,
          `${s.key} turn ${t} on ${server} (tier ${rec.tier}): output differs from --no-cache`);
        restores.push({ key: s.key, t, server, tier: rec.tier });
      }
      s.prevTokens = tokens;
      s.messages.push({ role: 'assistant', content: `Noted: step ${t + 1} is done.` });
    }
  }

  // cached / reusable over the turns of `phase` (the first turn of a session has none).
  function reuse(phase, list = sessions) {
    let cached = 0; let reusable = 0;
    for (const s of list) {
      for (const r of s.turns.filter((x) => x.phase === phase && x.reusable > 0)) {
        cached += Math.min(r.cached, r.reusable);
        reusable += r.reusable;
      }
    }
    return { cached, reusable, ratio: cached / reusable };
  }

  const home = {};      // session key → the server it hashes to with all three up
  let victim = '';

  it('spreads 12 sessions over the servers, each on one, reusing its turns', async (t) => {
    await turn(0, 'A');
    await turn(1, 'A');
    for (const s of sessions) {
      const used = servedBy(s, 'A');
      assert.equal(used.length, 1, `${s.key} was answered by ${used}`);
      assert.ok(NAMES.includes(used[0]), `X-Prefixd-Server is a fleet server: ${used[0]}`);
      home[s.key] = used[0];
    }
    const counts = Object.fromEntries(NAMES.map((n) => [n, 0]));
    for (const s of sessions) counts[home[s.key]]++;
    assert.ok(Object.values(counts).filter((c) => c > 0).length > 1,
      `all on one server: ${JSON.stringify(counts)}`);
    const r = reuse('A');
    assert.ok(r.ratio >= 0.99, `reused ${r.cached} of ${r.reusable} reusable tokens`);
    // The same key routes the same whether it comes as a header or in the body.
    for (const s of sessions.filter((x) => x.viaBody)) {
      const p = await post(lb, '/tokenize', { content: 'x' }, { 'x-session-id': s.key });
      assert.equal(p.headers.get('x-prefixd-server'), home[s.key], `${s.key} as a header`);
    }
    // Each server read the key where the session put it.
    let header = 0; let body = 0;
    const bySource = (page, src) => metric(page,
      `prefixd_completions_by_session_source_total{source="${src}"}`) ?? 0;
    for (const n of NAMES) {
      const page = await metrics(servers[n]);
      header += bySource(page, 'header');
      body += bySource(page, 'prompt_cache_key');
    }
    const viaBody = sessions.filter((x) => x.viaBody).length;
    assert.deepEqual([header, body], [2 * (N_SESSIONS - viaBody), 2 * viaBody]);
    victim = NAMES.reduce((a, b) => (counts[b] > counts[a] ? b : a));
    t.diagnostic(`sessions per server ${JSON.stringify(counts)}; reuse ${r.cached}/${r.reusable}`);
  });

  it('kill -9 of the busiest server fails no request; its sessions restore from Redis', async (t) => {
    assert.ok(victim, 'the first test chose the server to kill');
    // What the servers computed is in Redis before the crash (a crash loses only what its
    // writer had not sent yet; the moved sessions would then restore an older prefix).
    for (const n of NAMES) await remoteSettled(servers[n]);
    const before = (await backendStats(lb)).BACKEND;

    // A probe session hashed to the victim sends a long prompt; the victim is killed while
    // HAProxy has it in flight there. Nothing came back, so HAProxy sends it again
    // (retry-on empty-response, or conn-failure had the connect not finished), elsewhere.
    let probe = null;
    for (let i = 0; i < 64 && !probe; i++) {
      const p = await post(lb, '/tokenize', { content: 'x' }, { 'x-session-id': `probe-${i}` });
      if (p.headers.get('x-prefixd-server') === victim) probe = { key: `probe-${i}` };
    }
    assert.ok(probe, `no probe key hashed to ${victim}`);
    const long = [{ role: 'user', content: `Probe. ${'Read each file, list it. '.repeat(500)}` }];
    const inFlight = ask(probe, long, 1);
    await waitStats(lb, `the probe in flight on ${victim}`,
      (st) => Number(st[victim].scur) >= 1, 20000);
    await servers[victim].kill();
    // Sent at once after the kill: the victim may still be up in HAProxy's eyes (its checks
    // take 2 × 500 ms to fail); connection refused is retried elsewhere.
    const next = ask(probe, [{ role: 'user', content: 'Still there?' }], 1);
    const [a, b] = await Promise.all([inFlight, next]);
    assert.notEqual(a.server, victim, 'the in-flight request was answered again elsewhere');
    assert.notEqual(b.server, victim);
    await waitStats(lb, `${victim} down`, (st) => st[victim].status === 'DOWN');
    const afterKill = (await backendStats(lb)).BACKEND;
    const redispatched = Number(afterKill.wredis) - Number(before.wredis);
    const retried = Number(afterKill.wretr) - Number(before.wretr);
    assert.ok(redispatched >= 1, `HAProxy redispatched ${redispatched} requests`);

    await turn(2, 'B');
    await turn(3, 'B');
    const moved = sessions.filter((s) => home[s.key] === victim);
    for (const s of sessions) {
      const used = servedBy(s, 'B');
      assert.equal(used.length, 1, `${s.key} was answered by ${used} after the kill`);
      if (home[s.key] !== victim) assert.equal(used[0], home[s.key], `${s.key} stayed`);
      else assert.notEqual(used[0], victim);
    }
    for (const s of moved) {
      const first = s.turns.find((x) => x.phase === 'B');
      assert.equal(first.tier, 'remote', `${s.key}'s first request on ${first.server}: from Redis`);
      assert.ok(first.cached >= 0.99 * first.reusable,
        `${s.key}: ${first.cached} of ${first.reusable}`);
    }
    const r = reuse('B');
    assert.ok(r.ratio >= 0.99, `reused ${r.cached} of ${r.reusable} reusable tokens`);
    const where = moved.map((s) => `${s.key}→${servedBy(s, 'B')[0]}`);
    t.diagnostic(`killed ${victim}; probe answered by ${a.server} and ${b.server}; HAProxy `
      + `retries ${retried}, redispatches ${redispatched}; moved ${where}; `
      + `reuse ${r.cached}/${r.reusable}`);
  });

  it('the killed server, restarted on its cache dir, rejoins and gets its sessions back', async (t) => {
    assert.ok(victim && servers[victim].exited, 'the previous test killed a server');
    for (const n of NAMES.filter((x) => x !== victim)) await remoteSettled(servers[n]);
    await startFleetServer(victim);
    await waitStats(lb, `${victim} up again`, (st) => st[victim].status === 'UP');
    await turn(4, 'C');
    for (const s of sessions) {
      const used = servedBy(s, 'C');
      assert.deepEqual(used, [home[s.key]], `${s.key} is back on the server it hashes to`);
    }
    const back = sessions.filter((s) => home[s.key] === victim);
    const r = reuse('C', back);
    assert.ok(r.ratio >= 0.99, `returned sessions reused ${r.cached} of ${r.reusable}`);
    t.diagnostic(`${victim} back: its sessions' tiers ${back.map((s) => s.turns.at(-1).tier)}; `
      + `reuse ${r.cached}/${r.reusable}`);
  });

  it('Redis killed: every session goes on from the local tiers, a new one cold', async (t) => {
    await redis.kill();
    await turn(5, 'D');
    const fresh = newSession(N_SESSIONS);
    await turn(0, 'D', [fresh]);
    // Cold but for the chat header every session's prompt starts with (a few tokens, below a
    // Block), which the server's own tiers hold where Snapshots are captured inside calls.
    const first = fresh.turns[0];
    assert.notEqual(first.tier, 'remote', 'nothing comes from Redis while it is down');
    assert.ok(first.cached < 256, `a new session with Redis down reused ${first.cached} tokens`);
    for (const s of sessions) assert.deepEqual(servedBy(s, 'D'), [home[s.key]]);
    const r = reuse('D');
    assert.ok(r.ratio >= 0.99, `reused ${r.cached} of ${r.reusable} from RAM with Redis down`);
    // The servers did notice: each reports the shared tier down (its writes failed).
    const deadline = Date.now() + 10000;
    for (const n of NAMES) {
      while (metric(await metrics(servers[n]), 'prefixd_remote_up') !== 0) {
        assert.ok(Date.now() < deadline, `${n} never saw Redis down`);
        await sleep(100);
      }
    }
    t.diagnostic(`Redis down: reuse ${r.cached}/${r.reusable}; restores checked against `
      + `--no-cache: ${restores.map((x) => `${x.key}@${x.server}:${x.tier}`)}`);
  });
});
