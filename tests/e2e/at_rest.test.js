// The cache at rest with `serve --encrypt-cache`: the records a conversation leaves on disk
// hold none of its token ids (they do without the flag); the key lives outside the cache dir,
// so a copy of the dir, searched and attacked as an attacker would (every file tried as key
// material, under the old derivation and the new), opens no record, while the same code with
// the key file opens all of them; a restart with the same key file hits the disk, one with
// another key file or none gets no hit and no error; and a key inside the cache dir, a key
// others may read, or no key at all is refused at start. On a shared Redis, a copy of Redis's
// data holds no prompt, and servers given the same key file share records.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';
import {
  chmodSync, cpSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync,
} from 'node:fs';
import { join, relative, sep } from 'node:path';
import {
  client, diskSettled, makeModel, metric, metrics, post, remoteSettled, sleep, startRedis, startServer,
  tempDir, writeKeys,
} from './harness.js';

const SYSTEM = 'You are the release agent of a private repository named quartz-falcon. '
  + 'Keep the signing keys out of every log and answer in one line. '.repeat(10);
const turn1 = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Ship 4.2.0.' }];
const turn2 = [...turn1, { role: 'assistant', content: 'Tagging 4.2.0.' },
  { role: 'user', content: 'Tool result: tagged. Publish it.' }];
const ask = async (server, messages, apiKey) => (await client(server, apiKey).chat.completions.create(
  { model: 'tiny', messages, max_tokens: 4, temperature: 0 })).usage;

// Where a key might otherwise come from: none of these may leak in from the test's environment.
for (const name of ['PREFIXD_CACHE_KEY_FILE', 'PREFIXD_CACHE_KEY', 'CREDENTIALS_DIRECTORY']) {
  delete process.env[name];
}

function filesUnder(dir) {
  return readdirSync(dir, { recursive: true }).map((f) => join(dir, f)).filter((f) => statSync(f).isFile());
}

// The prompt as an attacker would look for it: its distinctive text, and every run of 8
// consecutive token ids of the system prompt as int32 LE (a record holds whole blocks of them).
function needles(ids) {
  const out = [Buffer.from('quartz-falcon'), Buffer.from('Keep the signing keys out')];
  for (let at = 0; at + 8 <= ids.length; at++) {
    const b = Buffer.alloc(32);
    for (let i = 0; i < 8; i++) b.writeInt32LE(ids[at + i], 4 * i);
    out.push(b);
  }
  return out;
}

// The files under `dir` that hold any of the needles.
function filesHolding(dir, ids) {
  const ns = needles(ids);
  return filesUnder(dir).filter((f) => {
    const bytes = readFileSync(f);
    return ns.some((n) => bytes.includes(n));
  });
}

// A record file's sealed payload and the identity it is bound to (docs/disk-format.md,
// "Record file" and "Sealed records").
function parseRecord(bytes) {
  assert.equal(bytes.readUInt32LE(0), 0x52445850, 'record magic');
  const h = bytes.readUInt32LE(8);
  const body = bytes.subarray(12, 12 + h);
  const position = Buffer.alloc(4);
  body.copy(position, 0, 100, 104);
  const aad = Buffer.concat([body.subarray(0, 96), body.subarray(96, 98), position]);
  const n = Number(bytes.readBigUInt64LE(16 + h));
  return { sealed: (body.readUInt16LE(98) & 1) === 1, aad, payload: bytes.subarray(24 + h, 24 + h + n) };
}

// The token ids a sealed record holds, or null when `key` does not open it.
function openRecord(key, { aad, payload }) {
  try {
    const d = createDecipheriv('aes-256-gcm', key, payload.subarray(0, 12));
    d.setAAD(aad);
    d.setAuthTag(payload.subarray(payload.length - 16));
    const plain = Buffer.concat([d.update(payload.subarray(12, payload.length - 16)), d.final()]);
    const n = plain.readUInt32LE(plain.length - 4);
    const tokens = [];
    for (let i = 0; i < n; i++) tokens.push(plain.readInt32LE(plain.length - 4 - 4 * (n - i)));
    return tokens;
  } catch {
    return null;
  }
}

// The records' key from a key file's raw bytes (docs/disk-format.md, "Sealed records").
const recordKey = (material) => Buffer.from(
  hkdfSync('sha256', material, Buffer.alloc(0), 'prefixd cache records v2', 32));

// Every key an attacker can make of `material`: it as a key, its hex decoded, the derivation
// before this one (HMAC-SHA256 of a server-secret with the v1 purpose), and the current one.
function candidateKeys(material) {
  const keys = [createHmac('sha256', material).update('prefixd cache records v1').digest(),
    recordKey(material)];
  if (material.length === 32) keys.push(material);
  const text = material.toString('latin1').trim();
  if (/^([0-9a-fA-F]{2}){32,}$/.test(text)) {
    const raw = Buffer.from(text, 'hex');
    keys.push(recordKey(raw));
    if (raw.length === 32) keys.push(raw);
  }
  return keys;
}

const API_KEY = 'sk-at-rest-admin';
// A key file as an operator makes one: 32 random bytes, the owner's alone.
function makeKeyFile(path) {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, randomBytes(32), { mode: 0o600 });
  return path;
}

describe('serve --encrypt-cache', () => {
  let dir; let model; let ids; let keyFile; let tenant;
  before(() => {
    dir = tempDir('at-rest');
    model = makeModel(dir);
    keyFile = makeKeyFile(join(dir, 'keys', 'cache-key'));
    // With keys the cache dir holds a server-secret (the tenants' salts come from it), the file
    // the records' key was derived from before: the copy below has it to try. An admin key is
    // a tenant that may read /metrics too.
    tenant = ['--admin-key-file', writeKeys(dir, [API_KEY])];
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  async function served(cacheDir, extra, body) {
    const adminKey = extra.includes('--admin-key-file') ? API_KEY : '';
    const server = await startServer({ model, args: ['--cache-dir', cacheDir, ...extra], adminKey });
    try { return await body(server); } finally { await server.stop(); }
  }
  const sealing = (key) => ['--encrypt-cache', '--cache-key-file', key, ...tenant];

  it('leaves the prompt in the clear without it: the checks below can fail', async () => {
    const plain = join(dir, 'plain');
    await served(plain, [], async (s) => {
      const t = await post(s, '/tokenize', { content: SYSTEM });
      ids = t.json.tokens;
      assert.ok(ids.length > 100);
      await ask(s, turn1);
      assert.ok(await diskSettled(s) > 0);
    });
    assert.ok(filesHolding(plain, ids).length > 0, 'plain records hold the prompt\'s token ids');
  });

  it('a copied cache dir holds no key and no prompt; the key file opens every record', async () => {
    const sealed = join(dir, 'sealed');
    await served(sealed, sealing(keyFile), async (s) => {
      await ask(s, turn1, API_KEY);
      assert.ok(await diskSettled(s) > 0);
    });
    const copy = join(dir, 'stolen');
    cpSync(sealed, copy, { recursive: true });

    assert.deepEqual(filesHolding(copy, ids), [], 'no file of the copy holds the prompt\'s text or ids');
    const isRecord = (f) => relative(copy, f).startsWith(`records${sep}`);
    const records = filesUnder(copy).filter(isRecord).map((f) => parseRecord(readFileSync(f)));
    assert.ok(records.length > 0);
    assert.ok(records.every((r) => r.sealed), 'every record is sealed');
    // The attacker's search: every file of the copy but the records is tried as key material
    // (server-secret, the index log, the lock), with every derivation.
    const others = filesUnder(copy).filter((f) => !isRecord(f));
    assert.ok(others.some((f) => f.endsWith(`${sep}server-secret`)), 'the copy has a server-secret to try');
    for (const f of others) {
      for (const key of candidateKeys(readFileSync(f))) {
        assert.equal(records.filter((r) => openRecord(key, r) !== null).length, 0,
          `${relative(copy, f)} opens no record`);
      }
    }
    // The same code with the key file: every record opens, and the prompt's ids are in them.
    const opened = records.map((r) => openRecord(recordKey(readFileSync(keyFile)), r));
    assert.ok(opened.every((t) => t !== null), 'the key file opens every record');
    const clear = Buffer.concat(opened.map((t) => Buffer.from(Int32Array.from(t).buffer)));
    assert.ok(needles(ids).slice(2).some((n) => clear.includes(n)), 'and they hold the prompt\'s ids');
  });

  it('a restart with the same key file reads its records back', async () => {
    await served(join(dir, 'sealed'), sealing(keyFile), async (s) => {
      const u = await ask(s, turn2, API_KEY);
      assert.ok(u.prompt_tokens_details.cached_tokens > 0, 'the restart reads the sealed records');
      // Counted once the request's cache work is done, a moment after the answer.
      let hits = 0;
      for (let i = 0; i < 50 && hits < 1; i++) {
        hits = metric(await metrics(s), 'prefixd_cache_hits_total{tier="disk"}') ?? 0;
        if (hits < 1) await sleep(100);
      }
      assert.ok(hits >= 1, 'a disk hit');
    });
  });

  it('another key file, or none, gets no hit and no error', async () => {
    const sealed = join(dir, 'sealed');
    await served(sealed, sealing(makeKeyFile(join(dir, 'keys', 'other-key'))), async (s) => {
      const u = await ask(s, turn2, API_KEY);
      assert.equal(u.prompt_tokens_details.cached_tokens, 0, 'records it cannot open are misses');
    });
    await served(sealed, tenant, async (s) => {
      const u = await ask(s, turn2, API_KEY);
      assert.equal(u.prompt_tokens_details.cached_tokens, 0, 'a server without the key: misses');
    });
  });

  it('refuses a key inside the cache dir, a key others may read, and no key at all', async () => {
    const cacheDir = join(dir, 'refusals');
    const inside = makeKeyFile(join(cacheDir, 'cache-key'));
    symlinkSync(inside, join(dir, 'keys', 'link-into-cache'));
    for (const key of [inside, `${cacheDir}/../refusals/./cache-key`, join(dir, 'keys', 'link-into-cache')]) {
      await assert.rejects(startServer({ model, args: ['--cache-dir', cacheDir, ...sealing(key)] }),
        /--cache-key-file .* lies inside the cache dir/, key);
    }
    const open = join(dir, 'keys', 'readable');
    writeFileSync(open, randomBytes(32));
    chmodSync(open, 0o644);
    await assert.rejects(startServer({ model, args: ['--cache-dir', cacheDir, ...sealing(open)] }),
      /group or others may read or write it; `chmod 600/);
    await assert.rejects(startServer({ model, args: ['--cache-dir', cacheDir, '--encrypt-cache'] }),
      /--encrypt-cache needs a key kept outside the cache dir: give --cache-key-file/);
    await assert.rejects(startServer({ model, args: ['--cache-dir', cacheDir, '--cache-key-file', keyFile] }),
      /--cache-key-file seals nothing without --encrypt-cache/);
    assert.deepEqual(readdirSync(cacheDir), ['cache-key'], 'a refused start writes nothing there');
  });
});

describe('serve --encrypt-cache on a shared Redis', () => {
  let dir; let model; let redis; let ids; let keyFile;
  before(async () => {
    dir = tempDir('at-rest-redis');
    model = makeModel(dir);
    keyFile = makeKeyFile(join(dir, 'keys', 'fleet-key'));
    redis = await startRedis();
    redis.cli(['CONFIG', 'SET', 'rdbcompression', 'no']);  // the dump holds values as stored
  });
  after(async () => {
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function served(name, extra, body) {
    const server = await startServer({ model,
      args: ['--cache-dir', join(dir, name), '--remote-cache', redis.url, ...extra] });
    try { return await body(server); } finally { await server.stop(); }
  }
  // A copy of Redis's data: what SAVE writes to its dump file.
  function copiedRedis() {
    redis.cli(['SAVE']);
    const copy = join(dir, `dump-${Date.now()}`);
    mkdirSync(copy);
    cpSync(join(redis.dir, 'dump.rdb'), join(copy, 'dump.rdb'));
    return copy;
  }

  it('a copy of Redis holds the prompt without the flag, and none of it with it', async () => {
    await served('plain', [], async (s) => {
      ids = (await post(s, '/tokenize', { content: SYSTEM })).json.tokens;
      await ask(s, turn1);
      assert.ok(await remoteSettled(s) > 0);
    });
    assert.ok(filesHolding(copiedRedis(), ids).length > 0, 'plain values hold the prompt\'s ids');
    redis.cli(['FLUSHALL']);
    await served('a', ['--encrypt-cache', '--cache-key-file', keyFile], async (s) => {
      await ask(s, turn1);
      assert.ok(await remoteSettled(s) > 0);
    });
    assert.deepEqual(filesHolding(copiedRedis(), ids), [], 'sealed values hold no text or id of it');
  });

  it('servers given the same key file share records; another key gets no hit', async () => {
    await served('b', ['--encrypt-cache', '--cache-key-file', keyFile], async (s) => {
      const u = await ask(s, turn2);
      assert.ok(u.prompt_tokens_details.cached_tokens > 0, 'B reads what A sealed');
    });
    const other = makeKeyFile(join(dir, 'keys', 'other-key'));
    await served('c', ['--encrypt-cache', '--cache-key-file', other], async (s) => {
      const u = await ask(s, turn2);
      assert.equal(u.prompt_tokens_details.cached_tokens, 0, 'a server with another key: misses');
    });
  });
});
