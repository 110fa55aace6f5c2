// The agents' own command-line clients (pinned in package.json), headless, each in a
// throw-away git repo with its own home, its update checks and telemetry off and 127.0.0.1 as
// its only server: a real `prefixd serve` on the tiny qwen35 model with the pinned qwen35
// tokenizer and the real Qwen3.5 template (which takes a system message only first).
//
// For each client: an invocation, then one that continues its session. Every request the
// client sends is answered 200 (the server's request log says so), the CLI exits 0, and the
// continuation reuses at least 99% of the previous invocation's prompt (`cached` in the log).
// Small-fast-model requests (opencode's titles, Claude Code's background calls) name the alias
// tiny-fast and must not cost the session its prefix.
//
// Random weights never end an answer by themselves: the server biases the end-of-turn token
// (`-l`, llama-server's --logit-bias) so every answer ends at once with a natural stop, as a
// real model's would, instead of at the `-n` cap, which the clients read as a truncated answer
// and retry with larger limits.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BIN, makeModel, post, startServer, tempDir, writeKeys } from '../e2e/harness.js';

const here = dirname(fileURLToPath(import.meta.url));
const cli = (name) => join(here, 'node_modules', '.bin', name);
const EOS = 151645;  // <|im_end|> of the pinned qwen35 tokenizer (checked in before())
const KEY = 'sk-agents-e2e';

// Runs one CLI invocation, bounded, `input` on its stdin; resolves { code, out }. `stop`: polled
// every 100 ms; once it returns true the client is ended (SIGTERM).
function run(cmd, args, { cwd, env, timeoutMs = 240000, input = null, stop = null }) {
  return new Promise((resolve) => {
    const base = { PATH: process.env.PATH, LANG: 'C.UTF-8', TERM: 'dumb', NO_COLOR: '1' };
    const proc = spawn(cmd, args, { cwd, env: { ...base, ...env },
      stdio: [input === null ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    if (input !== null) proc.stdin.end(input);
    let out = '';
    proc.stdout.on('data', (d) => { out += d; });
    proc.stderr.on('data', (d) => { out += d; });
    const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
    const poll = stop && setInterval(() => { if (stop()) proc.kill('SIGTERM'); }, 100);
    proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      clearInterval(poll);
      resolve({ code: signal ? `killed by ${signal}` : code, out });
    });
  });
}

// The server's request log lines (request_log.h), one object of key=value fields each.
function requests(server) {
  const out = [];
  for (const line of server.log.split('\n')) {
    if (!line.startsWith('prefixd request ')) continue;
    const r = {};
    for (const m of line.matchAll(/(\w+)=("(?:[^"\\]|\\.)*"|\S+)/g)) r[m[1]] = m[2];
    for (const k of ['status', 'prompt_tokens', 'cached', 'diverged_at']) r[k] = Number(r[k] ?? 0);
    out.push(r);
  }
  return out;
}

function gitRepo(root) {
  const repo = join(root, 'repo');
  mkdirSync(repo, { recursive: true });
  writeFileSync(join(repo, 'README.md'), '# demo\n\nA tiny project for the agents.\n');
  writeFileSync(join(repo, 'main.py'), 'def add(a, b):\n    return a + b\n');
  const git = (...a) => execFileSync('git', a, { cwd: repo, stdio: 'ignore' });
  git('init', '-q');
  git('-c', 'user.email=t@example.com', '-c', 'user.name=t', 'add', '.');
  git('-c', 'user.email=t@example.com', '-c', 'user.name=t', 'commit', '-qm', 'init');
  return repo;
}

// Each client: how to run it against `url` (the server's root) with `key` ('' for none), in
// a fresh home under `root`: [first invocation, continuation] as [cmd, args, env].
const CLIENTS = {
  'claude-code': (root, url, key) => {
    const env = {
      HOME: join(root, 'home'), ANTHROPIC_BASE_URL: url, ANTHROPIC_API_KEY: key || 'unused',
      ANTHROPIC_SMALL_FAST_MODEL: 'tiny-fast', ANTHROPIC_DEFAULT_HAIKU_MODEL: 'tiny-fast',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1',
      DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1',
    };
    mkdirSync(env.HOME, { recursive: true });
    return [[cli('claude'), ['-p', 'Read main.py and explain it.', '--model', 'tiny'], env],
      [cli('claude'), ['-p', '--continue', 'Now add a test for it.', '--model', 'tiny'], env]];
  },
  codex: (root, url, key) => {
    const home = join(root, 'codex-home');
    mkdirSync(home, { recursive: true });
    writeFileSync(join(home, 'config.toml'), [
      'model = "tiny"', 'model_provider = "prefixd"', 'check_for_update_on_startup = false', '',
      '[analytics]', 'enabled = false', '',
      '[model_providers.prefixd]', 'name = "prefixd"', `base_url = "${url}/v1"`,
      'wire_api = "responses"', ...(key ? ['env_key = "PREFIXD_API_KEY"'] : []), ''].join('\n'));
    const env = { HOME: join(root, 'home'), CODEX_HOME: home, PREFIXD_API_KEY: key };
    mkdirSync(env.HOME, { recursive: true });
    return [[cli('codex'), ['exec', '--skip-git-repo-check', 'Read main.py and explain it.'], env],
      [cli('codex'), ['exec', 'resume', '--last', '--skip-git-repo-check', 'Now add a test for it.'], env]];
  },
  opencode: (root, url, key, repo) => {
    writeFileSync(join(repo, 'opencode.json'), JSON.stringify({
      $schema: 'https://opencode.ai/config.json', autoupdate: false, share: 'disabled',
      model: 'prefixd/tiny', small_model: 'prefixd/tiny-fast',
      provider: { prefixd: { npm: '@ai-sdk/openai-compatible', name: 'prefixd',
        options: { baseURL: `${url}/v1`, ...(key ? { apiKey: key } : {}) },
        models: { tiny: { name: 'tiny' }, 'tiny-fast': { name: 'tiny-fast' } } } },
    }, null, 1));
    const env = { HOME: join(root, 'home'), OPENCODE_DISABLE_MODELS_FETCH: '1',
      OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_LSP_DOWNLOAD: '1' };
    mkdirSync(env.HOME, { recursive: true });
    return [[cli('opencode'), ['run', 'Read main.py and explain it.'], env],
      [cli('opencode'), ['run', '--continue', 'Now add a test for it.'], env]];
  },
};

describe('the agents\' own CLIs against prefixd serve', () => {
  let dir; let model; let keyed; let open;

  before(async () => {
    dir = tempDir('agents');
    model = makeModel(dir, 1, ['--vocab', 'qwen35', '--template', 'Qwen3.5-4B']);
    const args = ['--alias', 'tiny,tiny-fast', '--slots', '2', '--ctx', '49152', '-n', '16',
      '-l', `${EOS}+100`];
    keyed = await startServer({ model, args: [...args, '--api-key-file', writeKeys(dir, [KEY])] });
    open = await startServer({ model, args });
    const t = await post(open, '/tokenize', { content: '<|im_end|>' });
    assert.deepEqual(t.json.tokens, [EOS], 'the end-of-turn token the bias names');
  });
  after(async () => {
    for (const s of [keyed, open]) await s?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  // One client's session on `server`: two invocations, every request 200, reuse >= 0.99.
  async function session(name, server, key) {
    const root = tempDir(`agent-${name}`);
    try {
      const repo = gitRepo(root);
      const [first, next] = CLIENTS[name](root, server.url, key, repo);
      const n0 = requests(server).length;
      const a = await run(first[0], first[1], { cwd: repo, env: first[2] });
      assert.equal(a.code, 0, `${name} failed:\n${a.out}`);
      const n1 = requests(server).length;
      const b = await run(next[0], next[1], { cwd: repo, env: next[2] });
      assert.equal(b.code, 0, `${name} (continuing) failed:\n${b.out}`);
      const all = requests(server).slice(n0);
      const [one, two] = [all.slice(0, n1 - n0), all.slice(n1 - n0)];
      assert.ok(one.length > 0 && two.length > 0, `${name} sent no request:\n${a.out}\n${b.out}`);
      for (const r of all) {
        assert.equal(r.status, 200, `${name}: ${r.route} answered ${r.status}: ${r.error ?? ''}`);
      }
      // The session's own prompt is the largest of the first invocation (a title request is
      // small); the continuation's first request that carries it must restore 99% of it.
      const previous = Math.max(...one.map((r) => r.prompt_tokens));
      const best = two.find((r) => r.prompt_tokens >= previous) ?? two[0];
      const reuse = best.cached / previous;
      console.log(`[ agents ] ${name}${key ? ' (keys on)' : ''}: ${one.length} + ${two.length} ` +
        `requests (${[...new Set(all.map((r) => r.route))].join(', ')}), previous prompt ` +
        `${previous} tokens, continuation cached ${best.cached} of ${best.prompt_tokens} ` +
        `(${best.tier}): reuse ${reuse.toFixed(4)}`);
      assert.ok(reuse >= 0.99, `${name}: the continuation reused ${best.cached} of ${previous}`);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }

  // Claude Code headless takes a user turn with an image on stdin (--input-format stream-json,
  // as an IDE extension sends a pasted screenshot); the text-only model answers with the image's
  // stand-in, and `--continue` (the image still in the history) reuses the previous prompt.
  it('Claude Code sends an image, and its next turn reuses the prompt', async () => {
    const root = tempDir('agent-image');
    try {
      const repo = gitRepo(root);
      const [[cmd, , env]] = CLIENTS['claude-code'](root, open.url, '', repo);
      const turn = JSON.stringify({ type: 'user', message: { role: 'user', content: [
        { type: 'image', source: { type: 'base64', media_type: 'image/png',
          data: readFileSync(join(here, '..', '..', 'docs', 'img', 'dashboard.png')).toString('base64') } },
        { type: 'text', text: 'What is on this screenshot?' }] } });
      const n0 = requests(open).length;
      const a = await run(cmd, ['-p', '--input-format', 'stream-json', '--output-format', 'stream-json',
        '--verbose', '--model', 'tiny'], { cwd: repo, env, input: `${turn}\n` });
      assert.equal(a.code, 0, `claude failed:\n${a.out}`);
      const n1 = requests(open).length;
      const b = await run(cmd, ['-p', '--continue', 'And the corner?', '--model', 'tiny'], { cwd: repo, env });
      assert.equal(b.code, 0, `claude (continuing) failed:\n${b.out}`);
      const all = requests(open).slice(n0);
      const [one, two] = [all.slice(0, n1 - n0), all.slice(n1 - n0)];
      assert.ok(one.length > 0 && two.length > 0, `no request:\n${a.out}\n${b.out}`);
      for (const r of all) assert.equal(r.status, 200, `${r.route} answered ${r.status}: ${r.error ?? ''}`);
      const withImage = all.filter((r) => r.images === '"stand-in; n=1"');
      assert.ok(withImage.length >= 2, 'the image went in the first turn and again in the next');
      const previous = Math.max(...one.map((r) => r.prompt_tokens).filter(Number.isFinite));
      const best = two.find((r) => r.prompt_tokens >= previous) ?? two[0];
      console.log(`[ agents ] claude-code with an image: ${one.length} + ${two.length} requests, ` +
        `continuation cached ${best.cached} of ${best.prompt_tokens}: reuse ${(best.cached / previous).toFixed(4)}`);
      assert.ok(best.cached >= 0.99 * previous, `the continuation reused ${best.cached} of ${previous}`);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  // `prefixd launch`: the same clients, set up by the launcher alone (the test writes no client
  // config): every request 200 and names the served model, and Claude Code knows the window.
  const LAUNCHED = {
    'claude-code': ['claude', ['-p', 'Read main.py and explain it.'],
      { DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1' }],
    codex: ['codex', ['-c', 'check_for_update_on_startup=false', '-c', 'analytics.enabled=false',
      'exec', '--skip-git-repo-check', 'Read main.py and explain it.'], {}],
    opencode: ['opencode', ['run', 'Read main.py and explain it.'], { OPENCODE_DISABLE_MODELS_FETCH: '1',
      OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_LSP_DOWNLOAD: '1' }],
  };
  async function launched(name, server, key) {
    const root = tempDir(`launch-${name}`);
    try {
      const repo = gitRepo(root);
      const [program, args, extra] = LAUNCHED[name];
      const env = { HOME: join(root, 'home'), XDG_CONFIG_HOME: join(root, 'config'),
        CODEX_HOME: join(root, 'codex-home'), PREFIXD_URL: server.url, PREFIXD_API_KEY: key, ...extra };
      for (const d of [env.HOME, env.CODEX_HOME]) mkdirSync(d, { recursive: true });
      const n0 = requests(server).length;
      const r = await run(BIN, ['launch', program, '--client-bin', cli(program), '--', ...args],
        { cwd: repo, env });
      assert.equal(r.code, 0, `${name} through prefixd launch failed:\n${r.out}`);
      assert.match(r.out, /prefixd launch: .* model tiny, window 49152/);
      assert.doesNotMatch(r.out, /doesn't recognize the model|assumes a context window/);
      const sent = requests(server).slice(n0);
      assert.ok(sent.length > 0, `${name} sent no request:\n${r.out}`);
      for (const q of sent) assert.equal(q.status, 200, `${name}: ${q.route} answered ${q.status}`);
      console.log(`[ agents ] ${name} through prefixd launch: ${sent.length} requests, all 200`);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }

  it('Claude Code through prefixd launch', async () => launched('claude-code', keyed, KEY));
  it('Codex through prefixd launch', async () => launched('codex', keyed, KEY));
  it('opencode through prefixd launch', async () => launched('opencode', open, ''));
  it('Claude Code (keys on)', async () => session('claude-code', keyed, KEY));
  it('Claude Code (keys off)', async () => session('claude-code', open, ''));
  it('Codex (keys on)', async () => session('codex', keyed, KEY));
  it('opencode (keys on)', async () => session('opencode', keyed, KEY));
});

// A session longer than the model's window: a scripted model (make-test-model --script) whose
// answers end as a real model's do, on a 16K window, and a client through prefixd launch given
// a few thousand words a turn until the conversation has outgrown the window twice. The client
// knows the window, so it compacts before a request would be refused: every request 200, the
// conversation shrinks at each compaction, every request restores at least 0.9 of what it
// shares with the cache, and every request of the session's own (the summary requests carry
// another system prompt) restores the client's system prompt at least.
// Codex carries the user's latest messages, up to 20K of its estimated tokens, past every
// compaction (codex-rs compact.rs), so a 16K window holds three 2K-token turns and refuses the
// fourth: `prefixd launch codex` asks for 48K, and Codex runs past a 48K window here.
const PAST_WINDOW = {
  'claude-code': { program: 'claude', words: 2000, route: '/v1/messages', window: 16384,
    args: (turn, text) => ['-p', ...(turn > 1 ? ['--continue'] : []), text],
    env: { DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1' } },
  codex: { program: 'codex', words: 8000, route: '/v1/responses', window: 49152,
    args: (turn, text) => ['-c', 'check_for_update_on_startup=false', '-c', 'analytics.enabled=false',
      'exec', ...(turn > 1 ? ['resume', '--last'] : []), '--skip-git-repo-check', text],
    env: {} },
  opencode: { program: 'opencode', words: 3000, route: '/v1/chat/completions', window: 16384,
    args: (turn, text) => ['run', ...(turn > 1 ? ['--continue'] : []), text],
    env: { OPENCODE_DISABLE_MODELS_FETCH: '1', OPENCODE_DISABLE_AUTOUPDATE: '1',
      OPENCODE_DISABLE_LSP_DOWNLOAD: '1' } },
};

describe('agents past the model\'s window', () => {
  let dir; let model;
  const servers = new Map();  // by window
  const SUMMARY = 'Summary: the user shared words; I kept them in mind.';
  before(async () => {
    dir = tempDir('agents-window');
    model = join(dir, 'scripted.gguf');
    execFileSync(BIN, ['make-test-model', '--arch', 'qwen35', '--shape', 'tiny', '--vocab', 'qwen35',
      '--template', 'Qwen3.5-4B', '--script', `Done</think>\n\n${SUMMARY}`,
      '--out', model], { stdio: ['ignore', 'ignore', 'inherit'] });
  });
  after(async () => {
    for (const s of servers.values()) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  async function serverFor(window) {
    if (!servers.has(window)) {
      servers.set(window, await startServer({ model,
        args: ['--alias', 'tiny', '--slots', '2', '--ctx', String(window)] }));
    }
    return servers.get(window);
  }

  async function pastTheWindow(name) {
    const c = PAST_WINDOW[name];
    const WINDOW = c.window;
    const server = await serverFor(WINDOW);
    const root = tempDir(`agent-window-${name}`);
    try {
      const repo = gitRepo(root);
      const env = { HOME: join(root, 'home'), XDG_CONFIG_HOME: join(root, 'config'),
        CODEX_HOME: join(root, 'codex-home'), PREFIXD_URL: server.url, ...c.env };
      for (const d of [env.HOME, env.CODEX_HOME]) mkdirSync(d, { recursive: true });
      const vocabulary = ['alpha', 'beta', 'gamma', 'delta', 'omega', 'build', 'test', 'file', 'parser', 'cache'];
      let sentTokens = 0;
      let turn = 0;
      let firstWords = 0;  // the first turn's words, in tokens
      let n1 = 0;  // requests of the first turn
      const n0 = requests(server).length;
      while (sentTokens < 2 * WINDOW) {
        turn += 1;
        const words = Array.from({ length: c.words }, (_, i) => vocabulary[(i * 7 + turn * 3) % 10]).join(' ');
        const r = await run(BIN, ['launch', c.program, '--client-bin', cli(c.program), '--',
          ...c.args(turn, `Turn ${turn}: remember these words: ${words}`)], { cwd: repo, env });
        assert.equal(r.code, 0, `${name} turn ${turn}:\n${r.out}`);
        assert.ok(r.out.includes(SUMMARY), `${name} turn ${turn} got its answer:\n${r.out}`);
        const t = await post(server, '/tokenize', { content: words });
        sentTokens += t.json.tokens.length;
        if (turn === 1) {
          firstWords = t.json.tokens.length;
          n1 = requests(server).slice(n0).filter((q) => q.route === c.route).length;
        }
      }
      const sent = requests(server).slice(n0).filter((q) => q.route === c.route);
      for (const q of sent) assert.equal(q.status, 200, `a request answered ${q.status}: ${q.error ?? ''}`);
      let compactions = 0;
      for (let i = 1; i < sent.length; i++) {
        if (sent[i].prompt_tokens < sent[i - 1].prompt_tokens) compactions += 1;
      }
      console.log(`[ agents ] ${name} requests (prompt/cached/reusable): `
        + sent.map((q) => `${q.prompt_tokens}/${q.cached}/${q.diverged_at}`).join(' '));
      // prefixd restores what is reusable: every request that shares 2K tokens or more with
      // what the cache held (diverged_at) restores at least 0.9 of it (Snapshots are taken at
      // message boundaries and every few thousand tokens, so a restore may stop short of a
      // divergence inside a message).
      for (const q of sent.filter((x) => x.diverged_at >= 2048)) {
        assert.ok(q.cached >= 0.9 * q.diverged_at, `restored ${q.cached} of ${q.diverged_at} reusable`);
      }
      // The client's own prompt (its instructions and tools, before the user's words; each
      // client then varies something after its system prompt, so a compacted history shares
      // 0.67-0.9 of it) is at least half restored by every later request that carries it: all
      // but the summary requests, which carry a system prompt of their own.
      const ownPrompt = Math.max(...sent.slice(0, n1).map((q) => q.prompt_tokens)) - firstWords;
      const session = sent.slice(n1).filter((q) => q.diverged_at >= 0.5 * ownPrompt);
      const summaries = sent.length - n1 - session.length;
      assert.ok(session.length >= turn - 1, `${session.length} requests of the session's own`);
      for (const q of session) {
        assert.ok(q.cached >= 0.5 * ownPrompt, `restored ${q.cached} of a ${ownPrompt}-token own prompt`);
      }
      console.log(`[ agents ] ${name} past a ${WINDOW}-token window: ${turn} turns, ${sentTokens} tokens `
        + `of input, ${sent.length} requests all 200 (${summaries} with another system prompt), `
        + `${compactions} compactions, own prompt ${ownPrompt} tokens, restored `
        + `${session.map((q) => (q.cached / q.prompt_tokens).toFixed(2)).join(' ')}`);
      assert.ok(compactions >= 2, `compactions: ${compactions}`);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }

  it('Claude Code compacts before the window is full, and the cache keeps its system prompt',
    async () => pastTheWindow('claude-code'));
  it('opencode compacts before the window is full, and the cache keeps its system prompt',
    async () => pastTheWindow('opencode'));
  it('Codex compacts before the window is full, and the cache keeps its system prompt',
    async () => pastTheWindow('codex'));
});

// Each client in a tool loop: a scripted model whose every answer is one call of the client's
// read-file tool on a file of the repo (Claude Code's Read and opencode's read on its absolute
// path, Codex's exec_command running `cat`), so the client runs the tool, sends its result and
// gets the same call again. Asserted over the loop's requests: every one answered 200, at
// least 3 of them carry a tool result, each grew by at least the file's tokens over the one
// before (the result holds the file), and each restores at least 0.99 of the one before
// (`cached` in the server's request log).
//
// The model has no way to stop calling (its next token depends on the last one alone, and
// after a tool result the prompt ends as after a user turn), so each loop is bounded by the
// client where it can be: Claude Code by `--max-turns` (it then exits 1, "Reached max
// turns"). Codex has no turn cap, and opencode's agent `steps` only asks the model to stop
// (its last step appends a "maximum steps reached" message and still offers the tools), so the
// test stops those two once enough requests have reached the server, and their loop is the
// requests logged until then (one in flight at that moment is cut by the test, not by the
// server).
//
// The call is written in Qwen3.5's XML format, which repeats tokens (">\n" five times, "<",
// "</"): a script with ranked followers (make-test-model --script-json), where the server's
// lazy tool-call grammar rules out the preferred follower wherever the text goes on otherwise
// (docs/test-models.md, "A scripted tool call"). A free text value (a path, a command) must
// then end with a token that holds its newline (";\n", "~\n"), and its own tokens must not
// occur elsewhere in the script; the repo's random temp path is drawn again until they don't.
// An editor's backup copy: a name ending in "~" ends the path's last token with "~\n".
const LOOP_FILE = 'add.py~';
const LOOP_TEXT = Array.from({ length: 24 },
  (_, i) => `def add_${i}(a, b):\n    return a + b + ${i}\n`).join('');
const TOOL_LOOP = {
  'claude-code': { program: 'claude', route: '/v1/messages', turns: 4,
    tool: ['Read'], param: ['file', '_path'], value: (repo) => `${repo}/${LOOP_FILE}\n`,
    args: (turns) => ['-p', `Read ${LOOP_FILE} and explain it.`, '--max-turns', String(turns)],
    env: { DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1' } },
  opencode: { program: 'opencode', route: '/v1/chat/completions', turns: 4,
    tool: ['read'], param: ['file', 'Path'], value: (repo) => `${repo}/${LOOP_FILE}\n`, stop: true,
    args: () => ['run', `Read ${LOOP_FILE} and explain it.`],
    env: { OPENCODE_DISABLE_MODELS_FETCH: '1', OPENCODE_DISABLE_AUTOUPDATE: '1',
      OPENCODE_DISABLE_LSP_DOWNLOAD: '1' } },
  codex: { program: 'codex', route: '/v1/responses', turns: 4,
    tool: ['exec', '_command'], param: ['cmd'], value: () => `cat ${LOOP_FILE};\n`, stop: true,
    args: () => ['-c', 'check_for_update_on_startup=false', '-c', 'analytics.enabled=false',
      'exec', '--skip-git-repo-check', `Read ${LOOP_FILE} and explain it.`],
    env: {} },
};

// The script of one call of `tool` with `param` = `value` (each a list of parts), in Qwen3.5's
// XML format after a short reasoning ("Done"), with the ranks that let the grammar place each
// repeated token: ">\n" ends the prompt with thinking on, so it ranks the script's first token
// first (the grammar refuses it inside the call); the newline before the free value is ">"
// then "\n", whose only follower is the value; and so on (docs/test-models.md).
function toolCallScript(tool, param, value) {
  const parts = ['Done', '<', 'tool', '_call', '>\n', '<', 'function', '=', ...tool, '>\n',
    '<', 'parameter', '=', ...param, '>', '\n', value, '</', 'parameter', '>\n',
    '</', 'function', '>\n', '</', 't', 'ool', '_', 'call', '>'];
  return JSON.stringify({ parts, ranks: {
    '>\n': ['Done', '</', '<'],  // the prompt's end (thinking on); closing; opening
    '>': ['', '\n'],  // the end of the turn once the call is whole; the newline before the value
    '<': ['tool', 'function', 'parameter'],
    '</': ['parameter', 'function', 't'],
    parameter: ['>\n', '='],  // closing the value, which "=" would go on; opening the parameter
    function: ['=', '>\n'],
    '=': [tool[0], param[0]],
  } });
}

describe('agents in a tool loop', () => {
  // A repo whose path the script can hold, and the scripted model that reads its file. Each try
  // draws the whole path afresh (about 1 in 10 repeats a token).
  function scriptedRepo(name, c) {
    for (let attempt = 0; attempt < 20; attempt++) {
      const root = mkdtempSync(join(tmpdir(), 'prefixd-loop-'));
      const repo = gitRepo(root);
      writeFileSync(join(repo, LOOP_FILE), LOOP_TEXT);
      const model = join(root, 'scripted.gguf');
      try {
        execFileSync(BIN, ['make-test-model', '--arch', 'qwen35', '--shape', 'tiny', '--vocab',
          'qwen35', '--template', 'Qwen3.5-4B', '--script-json',
          toolCallScript(c.tool, c.param, c.value(repo)), '--out', model], { stdio: 'pipe' });
        return { root, repo, model };
      } catch (e) {
        const why = String(e.stderr);
        if (!/comes twice|leaves out/.test(why)) throw new Error(`${name}: ${why}`);
        rmSync(root, { recursive: true, force: true });  // the random path repeats a token
      }
    }
    throw new Error(`${name}: no temp path the script could hold in 20 tries`);
  }

  async function toolLoop(name) {
    const c = TOOL_LOOP[name];
    const { root, repo, model } = scriptedRepo(name, c);
    // One slot: requests take turns (two sequences generating at once through the tiny model's
    // Q8_0 LM head crash ggml's AMX matmul on an AMX CPU, apart from this test). -n 64: a
    // request without the tools (opencode's title) has no grammar to end the call, so the
    // script goes round until the cap; a call is 36 tokens.
    const server = await startServer({ model,
      args: ['--alias', 'tiny', '--slots', '1', '--ctx', '49152', '-n', '64'] });
    try {
      const env = { HOME: join(root, 'home'), XDG_CONFIG_HOME: join(root, 'config'),
        CODEX_HOME: join(root, 'codex-home'), PREFIXD_URL: server.url, ...c.env };
      for (const d of [env.HOME, env.CODEX_HOME]) mkdirSync(d, { recursive: true });
      // The loop's requests carry the client's instructions and tools, 7K tokens and more;
      // opencode's title request (the small model, neither of them) is another conversation of
      // a few hundred tokens.
      const loop = () => requests(server).filter((q) => q.route === c.route && q.prompt_tokens > 2000);
      let stoppedAt = 0;  // the loop's requests logged when the test stopped the client
      const stop = !c.stop ? null : () => {
        stoppedAt = stoppedAt || (loop().length >= c.turns ? loop().length : 0);
        return stoppedAt > 0;
      };
      const r = await run(BIN, ['launch', c.program, '--client-bin', cli(c.program), '--',
        ...c.args(c.turns)], { cwd: repo, env, timeoutMs: 180000, stop });
      const fileTokens = (await post(server, '/tokenize', { content: LOOP_TEXT })).json.tokens.length;
      const sent = c.stop ? loop().slice(0, stoppedAt) : loop();
      console.log(`[ agents ] ${name} in a tool loop: ${sent.length} requests (prompt/cached): `
        + sent.map((q) => `${q.prompt_tokens}/${q.cached}`).join(' ') + `; file ${fileTokens} tokens; `
        + `client ${r.code}`);
      if (c.stop) assert.ok(stoppedAt > 0, `${name} ended before the test stopped it:\n${r.out}`);
      else assert.match(r.out, /max turns/i, `${name}:\n${r.out}`);
      for (const q of sent) assert.equal(q.status, 200, `a request answered ${q.status}: ${q.error ?? ''}`);
      assert.ok(sent.length - 1 >= 3, `${sent.length - 1} requests carry a tool result:\n${r.out}`);
      for (let i = 1; i < sent.length; i++) {
        const [before, q] = [sent[i - 1], sent[i]];
        assert.ok(q.prompt_tokens - before.prompt_tokens >= fileTokens,
          `request ${i + 1} grew by ${q.prompt_tokens - before.prompt_tokens} tokens, less than the file`);
        assert.ok(q.cached >= 0.99 * before.prompt_tokens,
          `request ${i + 1} restored ${q.cached} of the previous ${before.prompt_tokens}`);
      }
    } finally {
      await server.stop();
      rmSync(root, { recursive: true, force: true });
    }
  }

  it('Claude Code reads a file in a loop, each turn restoring the last', async () => toolLoop('claude-code'));
  it('opencode reads a file in a loop, each turn restoring the last', async () => toolLoop('opencode'));
  it('Codex runs cat in a loop, each turn restoring the last', async () => toolLoop('codex'));
});
