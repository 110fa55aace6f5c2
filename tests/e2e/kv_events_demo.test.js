// deploy/kv-events-demo.sh run whole, as a user runs it: two prefixd servers on one Redis
// behind HAProxy (deploy/fleet.sh -n 2 --kv-events), each publishing KV events to the demo's
// subscriber, which keeps llm-d's index (deploy/llmd_index.py) and prints every turn's routing
// beside it. Checked: a line per turn; each session stays on the server HAProxy hashes it to;
// from a session's second turn on, llm-d's index names that same server as the one holding the
// most of the prompt, and its score is within one Block below what the server restored (the
// bound of docs/kv-events.md, on a pure-attention model); the summary counts the turns; the
// script stops everything it started. haproxy or redis-server missing is a failure:
// scripts/setup-deps.sh installs them.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { BIN, makeModel, tempDir } from './harness.js';

const SCRIPT = new URL('../../deploy/kv-events-demo.sh', import.meta.url).pathname;
const BLOCK = 64;
const SESSIONS = 3;
const TURNS = 3;
const LINE = /^session (\d+) turn (\d+) {2}haproxy (\S+) restored (\d+) {2}llm-d fleet-1 (\d+), fleet-2 (\d+) {2}(same|tie|differs)$/;

function run(args) {
  return new Promise((resolve) => {
    const proc = spawn('bash', [SCRIPT, ...args], { env: { ...process.env, PREFIXD_BIN: BIN },
      stdio: ['ignore', 'pipe', 'pipe'] });
    let out = ''; let err = '';
    proc.stdout.setEncoding('utf8').on('data', (d) => { out += d; });
    proc.stderr.setEncoding('utf8').on('data', (d) => { err += d; });
    const timer = setTimeout(() => proc.kill('SIGTERM'), 240000);
    proc.on('exit', (code) => { clearTimeout(timer); resolve({ code, out, err }); });
  });
}

describe('deploy/kv-events-demo.sh', () => {
  let dir; let model;
  before(() => { dir = tempDir('kv-demo'); model = makeModel(dir, 1, ['--arch', 'llama']); });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('prints llm-d\'s view of each turn beside HAProxy\'s routing', async () => {
    const { code, out, err } = await run(['-m', model, '--sessions', String(SESSIONS),
      '--turns', String(TURNS), '--', '--block-size', String(BLOCK), '--ctx', '8192', '--threads', '1']);
    assert.equal(code, 0, `the demo failed:\n${err}\n${out}`);
    assert.match(err, /fleet: stopped/, 'the fleet was not stopped');
    const turns = out.trim().split('\n').filter((l) => l.startsWith('session ')).map((l) => {
      const m = LINE.exec(l);
      assert.ok(m, `an unexpected line: ${l}`);
      const [, session, turn, server, restored, one, two, verdict] = m;
      return { session: +session, turn: +turn, server, restored: +restored,
        scores: { 'fleet-1': +one, 'fleet-2': +two }, verdict };
    });
    assert.equal(turns.length, SESSIONS * TURNS);
    for (let s = 1; s <= SESSIONS; s++) {
      const mine = turns.filter((t) => t.session === s);
      assert.equal(new Set(mine.map((t) => t.server)).size, 1, `session ${s} moved between servers`);
      for (const t of mine.filter((x) => x.turn > 1)) {
        assert.equal(t.verdict, 'same', `session ${s} turn ${t.turn}: llm-d would not pick ${t.server}`);
        const held = t.scores[t.server];
        assert.ok(held <= t.restored && t.restored - held < BLOCK,
          `session ${s} turn ${t.turn}: llm-d scores ${held}, the server restored ${t.restored}`);
      }
    }
    assert.match(out, new RegExp(`^turns: ${SESSIONS * TURNS}, llm-d's best pod is HAProxy's: \\d+ same, \\d+ tie, \\d+ differs$`, 'm'));
  });
});
