// Speculative decoding through the real server and the official openai client: an agent
// session on a server with --spec-type ngram-mod answers what a server without speculation
// (and without the cache) answers, reports its drafts as llama-server does (timings.draft_n,
// draft_n_accepted) and in /metrics, reuses its prefix on the next turn, survives a kill -9
// in the middle of a speculating answer with its published prefix intact, and refuses the
// per-request keys that only the server's start-up can set; and with --spec-type draft-mtp
// (the model's own MTP head) it answers as the model without its head, restarts included, and
// the head's history comes back from the cache with the prompt's; with --model-draft the draft
// model's history comes back from the shared tier on another server.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import {
  BIN, client, diskSettled, makeModel, metric, metrics, post, remoteSettled, startRedis, startServer, tempDir,
} from './harness.js';

const SYSTEM = 'You are a coding agent. Tools: read(path), write(path, text), run(cmd). '
  + 'Answer briefly and call one tool at a time. '.repeat(8);
const turn1 = [
  { role: 'system', content: SYSTEM },
  { role: 'user', content: 'Write the function add(a, b) again, as in add.py, and run the tests.' },
];
const turn2 = (answer) => [
  ...turn1,
  { role: 'assistant', content: answer },
  { role: 'user', content: 'Tool result: 1 failure in test_add. Fix it.' },
];
const NEAR_TIE = 2e-3;  // as the engine tests' (near_tie_test_util.h)

// Greedy answers with logprobs; ignore_eos keeps the tiny model generating.
const ask = (openai, messages, extra = {}) => openai.chat.completions.create({
  model: 'tiny', messages, max_tokens: 160, temperature: 0, ignore_eos: true,
  logprobs: true, top_logprobs: 2, ...extra,
});

// Equal token for token, or up to a step where the plain answer's top two were a near-tie
// (a draft is verified in a call of several rows: its logits differ in the last bits).
function assertSameUpToNearTie(got, plain) {
  const a = got.choices[0].logprobs.content;
  const b = plain.choices[0].logprobs.content;
  let k = 0;
  while (k < a.length && k < b.length && a[k].token === b[k].token) k++;
  if (k === a.length && k === b.length) return;
  assert.ok(k < b.length && b[k].top_logprobs.length >= 2, `answers differ at token ${k}`);
  const gap = b[k].top_logprobs[0].logprob - b[k].top_logprobs[1].logprob;
  assert.ok(gap <= NEAR_TIE, `answers differ at token ${k}, top two ${gap} apart (no near-tie)`);
}

// The first turn on a speculating server: it answers as the plain server and drafts. Returns its
// answer and its prompt's length.
async function firstTurnDrafts(server, plain) {
  const r1 = await ask(client(server), turn1);
  assertSameUpToNearTie(r1, await ask(client(plain), turn1));
  assert.ok(r1.timings.draft_n > 0, `nothing drafted: ${JSON.stringify(r1.timings)}`);
  assert.ok(r1.timings.draft_n_accepted <= r1.timings.draft_n);
  return { answer: r1.choices[0].message.content, prompt: r1.usage.prompt_tokens };
}

// A first turn published (and on disk), then a kill -9 well inside a speculating answer to the
// same prompt, then a restart: the next turn restores the whole first prompt and answers as the
// plain server. Returns that turn's answer.
async function killMidAnswerThenResume(model, args, plain) {
  const first = await startServer({ model, args });
  let prompt; let answer;
  try {
    const done = await ask(client(first), turn1, { max_tokens: 12 });
    prompt = done.usage.prompt_tokens;
    answer = done.choices[0].message.content;
    assert.ok(await diskSettled(first) > 0);
    const stream = await client(first).chat.completions.create({
      model: 'tiny', messages: turn1, max_tokens: 4000, temperature: 0, ignore_eos: true, stream: true,
    });
    let pieces = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) pieces++;
      if (pieces === 40) break;  // well inside the answer, drafting
    }
    await first.kill();
  } finally {
    await first.stop();
  }
  const second = await startServer({ model, args });
  try {
    const warm = await ask(client(second), turn2(answer));
    const want = await ask(client(plain), turn2(answer));
    assertSameUpToNearTie(warm, want);
    assert.equal(warm.usage.prompt_tokens_details.cached_tokens, prompt);
    return warm;
  } finally {
    await second.stop();
  }
}

describe('speculative decoding (ngram-mod) through the server', () => {
  let dir; let model; let cacheDir; let plain;

  before(async () => {
    dir = tempDir('spec');
    model = makeModel(dir);
    cacheDir = join(dir, 'cache');
    plain = await startServer({ model, args: ['--no-cache'] });
  });
  after(async () => {
    await plain.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers as without speculation, drafts, and reuses the prefix next turn', async () => {
    const spec = await startServer({ model, args: ['--spec-type', 'ngram-mod', '--cache-dir', cacheDir] });
    try {
      const r1 = await ask(client(spec), turn1);
      const p1 = await ask(client(plain), turn1);
      assertSameUpToNearTie(r1, p1);
      assert.ok(r1.timings.draft_n > 0, `nothing drafted: ${JSON.stringify(r1.timings)}`);
      assert.ok(r1.timings.draft_n_accepted > 0 && r1.timings.draft_n_accepted <= r1.timings.draft_n);
      assert.equal(p1.timings.draft_n, undefined);  // no speculation, no draft fields
      const answer = r1.choices[0].message.content;
      const r2 = await ask(client(spec), turn2(answer));
      const p2 = await ask(client(plain), turn2(answer));
      assertSameUpToNearTie(r2, p2);
      assert.ok(r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens,
        `cached ${r2.usage.prompt_tokens_details.cached_tokens} of the first turn's ${r1.usage.prompt_tokens}`);
      const page = await metrics(spec);
      assert.ok(metric(page, 'prefixd_draft_tokens_total') >= r1.timings.draft_n + r2.timings.draft_n);
      assert.ok(metric(page, 'prefixd_draft_accepted_total') > 0);
      const off = await ask(client(spec), turn1, { 'speculative.n_max': 0 });
      assert.equal(off.timings.draft_n, undefined);
      assertSameUpToNearTie(off, p1);
      const bad = await post(spec, '/v1/chat/completions',
        { model: 'tiny', messages: turn1, 'speculative.p_min': 0.5 });
      assert.equal(bad.status, 400);
      assert.equal(bad.json.error.param, 'speculative.p_min');
      assert.match(bad.json.error.message, /--spec-type/);
      assert.ok(await diskSettled(spec) > 0, 'nothing reached the disk tier');
    } finally {
      await spec.stop();
    }
  });

  it('keeps its published prefix through a kill -9 in the middle of a speculating answer', async () => {
    await killMidAnswerThenResume(model, ['--spec-type', 'ngram-mod', '--cache-dir', join(dir, 'cache-kill')], plain);
  });
});

// The model's own MTP head (make-test-model --nextn 1; its trunk is the plain model of the same
// seed): answers equal the plain server's, drafts are counted, the prefix is reused next turn
// and after a restart, where the head starts afresh below the restored prefix.
describe('speculative decoding (draft-mtp) through the server', () => {
  let dir; let headDir; let mtpModel; let plain;

  before(async () => {
    dir = tempDir('spec-mtp');
    headDir = tempDir('spec-mtp-head');
    mtpModel = makeModel(headDir, 1, ['--nextn', '1']);
    plain = await startServer({ model: makeModel(dir), args: ['--no-cache'] });
  });
  after(async () => {
    await plain.stop();
    rmSync(dir, { recursive: true, force: true });
    rmSync(headDir, { recursive: true, force: true });
  });

  it('answers as the model without its head, across turns and a restart', async () => {
    const args = ['--spec-type', 'draft-mtp', '--cache-dir', join(dir, 'cache')];
    let answer; let prompt;
    const first = await startServer({ model: mtpModel, args });
    try {
      ({ answer, prompt } = await firstTurnDrafts(first, plain));
      const r2 = await ask(client(first), turn2(answer));
      assertSameUpToNearTie(r2, await ask(client(plain), turn2(answer)));
      assert.ok(r2.usage.prompt_tokens_details.cached_tokens >= prompt);
      assert.equal(r2.timings.mtp_cache_n, r2.usage.prompt_tokens_details.cached_tokens);
      assert.ok(await diskSettled(first) > 0, 'nothing reached the disk tier');
    } finally {
      await first.stop();
    }
    const second = await startServer({ model: mtpModel, args });
    try {
      const warm = await ask(client(second), turn2(answer));
      assertSameUpToNearTie(warm, await ask(client(plain), turn2(answer)));
      assert.ok(warm.usage.prompt_tokens_details.cached_tokens >= prompt,
        `cached ${warm.usage.prompt_tokens_details.cached_tokens} of ${prompt} after the restart`);
      assert.ok(warm.timings.draft_n > 0);
      // The MTP head's history came back from disk with every cached token.
      assert.equal(warm.timings.mtp_cache_n, warm.usage.prompt_tokens_details.cached_tokens,
        `head history ${warm.timings.mtp_cache_n} of ${warm.usage.prompt_tokens_details.cached_tokens} cached tokens`);
    } finally {
      await second.stop();
    }
  });

  it('restores the head\'s history from the shared tier on another server', async () => {
    const redis = await startRedis();
    const shared = ['--spec-type', 'draft-mtp', '--remote-cache', redis.url];
    const a = await startServer({ model: mtpModel, args: [...shared, '--cache-dir', join(dir, 'shared-a')] });
    const b = await startServer({ model: mtpModel, args: [...shared, '--cache-dir', join(dir, 'shared-b')] });
    try {
      const r1 = await ask(client(a), turn1, { max_tokens: 12 });
      assert.ok(await remoteSettled(a) > 0, 'nothing reached the shared tier');
      const answer = r1.choices[0].message.content;
      const warm = await ask(client(b), turn2(answer));
      assertSameUpToNearTie(warm, await ask(client(plain), turn2(answer)));
      const cached = warm.usage.prompt_tokens_details.cached_tokens;
      assert.ok(cached >= r1.usage.prompt_tokens, `cached ${cached} of ${r1.usage.prompt_tokens}`);
      assert.equal(warm.timings.mtp_cache_n, cached, JSON.stringify(warm.timings));
    } finally {
      await a.stop();
      await b.stop();
      await redis.stop();
    }
  });

  it('keeps the prompt and the head\'s history through a kill -9 in the middle of an answer', async () => {
    const warm = await killMidAnswerThenResume(mtpModel,
      ['--spec-type', 'draft-mtp', '--cache-dir', join(dir, 'cache-kill')], plain);
    assert.equal(warm.timings.mtp_cache_n, warm.usage.prompt_tokens_details.cached_tokens);
  });
});

// A pure-attention target (deepseek2's MLA; make-test-model --arch deepseek2 --nextn 1): its
// cache keeps no Snapshots and the next turn restores to wherever the template's rendering
// of the answer parts from the generated tokens, so the head's carry there comes from its rows
// (every head row is cached with the target's hidden row at its position). After a restart
// the head's history comes back with every cached token, and the answers are the model's.
describe('draft-mtp on a pure-attention target (deepseek2)', () => {
  let dir; let mtpModel; let plain;

  before(async () => {
    dir = tempDir('spec-mtp-mla');
    mtpModel = makeModel(dir, 1, ['--arch', 'deepseek2', '--nextn', '1']);
    const plainDir = join(dir, 'plain');
    execFileSync('mkdir', ['-p', plainDir]);
    plain = await startServer({ model: makeModel(plainDir, 1, ['--arch', 'deepseek2']), args: ['--no-cache'] });
  });
  after(async () => {
    await plain.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('restores the head\'s history at any position after a restart', async () => {
    const args = ['--spec-type', 'draft-mtp', '--cache-dir', join(dir, 'cache')];
    let answer; let prompt;
    const first = await startServer({ model: mtpModel, args });
    try {
      ({ answer, prompt } = await firstTurnDrafts(first, plain));
      assert.ok(await diskSettled(first) > 0, 'nothing reached the disk tier');
    } finally {
      await first.stop();
    }
    const second = await startServer({ model: mtpModel, args });
    try {
      const warm = await ask(client(second), turn2(answer));
      assertSameUpToNearTie(warm, await ask(client(plain), turn2(answer)));
      const cached = warm.usage.prompt_tokens_details.cached_tokens;
      assert.ok(cached >= prompt, `cached ${cached} of ${prompt} after the restart`);
      assert.equal(warm.timings.mtp_cache_n, cached,
        `head history ${warm.timings.mtp_cache_n} of ${cached} cached tokens`);
    } finally {
      await second.stop();
    }
  });
});

// A draft model (--model-draft: an attention model of the same vocabulary): its own history is
// cached with the prompt, so a session that moves to another server does not run its prompt
// through the draft model again.
describe('a draft model', () => {
  let dir; let model; let draft; let plain;

  before(async () => {
    dir = tempDir('spec-draft');
    model = makeModel(dir);
    draft = join(dir, 'draft.gguf');
    execFileSync(BIN, ['make-test-model', '--arch', 'llama', '--shape', 'tiny', '--seed', '2',
      '--out', draft], { stdio: ['ignore', 'ignore', 'inherit'] });
    plain = await startServer({ model, args: ['--no-cache'] });
  });
  after(async () => {
    await plain.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('restores its history from the shared tier on another server', async () => {
    const redis = await startRedis();
    const shared = ['--spec-type', 'draft', '--model-draft', draft, '--remote-cache', redis.url];
    const servers = [];
    try {
      const a = await startServer({ model, args: [...shared, '--cache-dir', join(dir, 'shared-a')] });
      servers.push(a);
      const b = await startServer({ model, args: [...shared, '--cache-dir', join(dir, 'shared-b')] });
      servers.push(b);
      const r1 = await ask(client(a), turn1, { max_tokens: 12 });
      assert.ok(await remoteSettled(a) > 0, 'nothing reached the shared tier');
      const answer = r1.choices[0].message.content;
      const warm = await ask(client(b), turn2(answer));
      assertSameUpToNearTie(warm, await ask(client(plain), turn2(answer)));
      assert.ok(warm.timings.draft_n > 0, JSON.stringify(warm.timings));
      const page = await metrics(b);
      const restored = metric(page, 'prefixd_draft_restored_tokens_total');
      const prefilled = metric(page, 'prefixd_draft_prefill_tokens_total');
      // The draft's history up to the last whole Block of the first turn came from Redis; the
      // draft model decoded only the rest.
      assert.ok(restored >= 256, `draft restored ${restored}, prefilled ${prefilled}`);
      assert.ok(prefilled < warm.usage.prompt_tokens, `draft prefilled ${prefilled} of ${warm.usage.prompt_tokens}`);
    } finally {
      for (const s of servers) await s.stop();
      await redis.stop();
    }
  });
});
