// The web page at `/` in headless chromium (Debian's, driven by puppeteer-core; no browser is
// downloaded): asks for a key, streams a chat answer in the playground, shows the second turn's
// cached tokens in the dashboard's request chart, and lets an admin evict a cached prefix.
// Screenshots go to $PREFIXD_E2E_ARTIFACTS (default: $TMPDIR/prefixd-e2e-artifacts).
// chromium missing is a failure, not a skip: scripts/setup-deps.sh installs it.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';
import { makeModel, sleep, startServer, tempDir, writeKeys } from './harness.js';

const CHROMIUM = process.env.PREFIXD_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.PREFIXD_E2E_ARTIFACTS || join(tmpdir(), 'prefixd-e2e-artifacts');
const ADMIN_KEY = 'sk-web-admin';
const TENANT_KEY = 'sk-web-tenant';
const WAIT = { timeout: 30000 };

describe('web page', () => {
  let dir; let server; let browser; let page;

  before(async () => {
    assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: run scripts/setup-deps.sh (installs chromium)`);
    mkdirSync(ARTIFACTS, { recursive: true });
    dir = tempDir('web');
    const adminFile = join(dir, 'admin.txt');
    writeFileSync(adminFile, `${ADMIN_KEY}\n`);
    server = await startServer({
      model: makeModel(dir),
      args: ['--slots', '2', '--ctx', '2048', '--block-size', '32',
        '--api-key-file', writeKeys(dir, [TENANT_KEY]), '--admin-key-file', adminFile],
    });
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  // Screenshots are artifacts for a reader, not assertions: one chromium fails to take is logged.
  const shot = async (name) => {
    const file = join(ARTIFACTS, `web-${name}.png`);
    try {
      await page.screenshot({ path: file, fullPage: true });
      console.log(`screenshot: ${file}`);
    } catch (e) {
      console.log(`screenshot ${file} not taken: ${e.message}`);
    }
  };
  // page.waitForFunction, failing with what the page showed instead of a bare timeout.
  const waitFor = async (what, fn, ...args) => {
    try {
      await page.waitForFunction(fn, WAIT, ...args);
    } catch (e) {
      throw new Error(`waiting for ${what}: ${e.message}${await pageState()}`);
    }
  };
  // page.click, again when the page rebuilt the element between finding and clicking it.
  const clickStable = async (selector) => {
    for (let i = 0; ; i++) {
      try {
        return await page.click(selector);
      } catch (e) {
        if (i >= 4 || !/detached|not clickable|No node found/i.test(e.message)) throw e;
        await sleep(200);
      }
    }
  };
  // What the page showed and logged, for a failure's message.
  const seen = [];
  const pageState = async () => {
    const chat = await page.$eval('#chat', (c) => c.innerText).catch((e) => `(unreadable: ${e.message})`);
    return `\n--- chat ---\n${chat}\n--- page log ---\n${seen.join('\n')}\n--- server log (tail) ---\n` +
      server.log.split('\n').slice(-30).join('\n');
  };

  it('serves / and its assets without a key, and the data only with one', async () => {
    for (const path of ['/', '/assets/app.js', '/assets/app.css']) {
      const r = await fetch(`${server.url}${path}`);
      assert.equal(r.status, 200, path);
      assert.doesNotMatch(await r.text(), /https?:\/\/(?!127\.0\.0\.1)/, `${path} fetches nothing from elsewhere`);
      // No other page may frame it, pull scripts into it, or have it sniffed as another type.
      assert.match(r.headers.get('content-security-policy') ?? '', /default-src 'self'/, path);
      assert.equal(r.headers.get('x-frame-options'), 'DENY', path);
      assert.equal(r.headers.get('x-content-type-options'), 'nosniff', path);
    }
    assert.equal((await fetch(`${server.url}/v1/cache/stats`)).status, 401);
    const tenant = { Authorization: `Bearer ${TENANT_KEY}` };
    const entries = await (await fetch(`${server.url}/v1/cache/entries`, { headers: tenant })).json();
    assert.equal(entries.scope, 'tenant');
    const del = await fetch(`${server.url}/v1/cache/entries/00/00`, { method: 'DELETE', headers: tenant });
    assert.equal(del.status, 403, 'a tenant key may not evict');
  });

  it('asks for a key, chats with streaming, charts the cached tokens, and evicts as admin', async () => {
    browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: [...(process.getuid?.() === 0 ? ['--no-sandbox'] : []), '--disable-gpu', '--disable-dev-shm-usage'],
    });
    page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 900 });
    const errors = [];
    page.on('pageerror', (e) => { errors.push(e.message); seen.push(`pageerror: ${e.message}`); });
    page.on('console', (m) => seen.push(`console.${m.type()}: ${m.text()}`));
    page.on('requestfailed', (r) => seen.push(`requestfailed: ${r.method()} ${r.url()} ${r.failure()?.errorText}`));
    page.on('response', (r) => { if (r.status() >= 400) seen.push(`HTTP ${r.status()}: ${r.request().method()} ${r.url()}`); });
    await page.goto(server.url + '/', { waitUntil: 'load' });

    await page.waitForSelector('#key-form:not([hidden])', WAIT);
    await page.type('#key-input', ADMIN_KEY);
    await page.click('#key-form button[type=submit]');
    await page.waitForSelector('#key-form', { hidden: true, ...WAIT });
    await waitFor('the model id', () => document.querySelector('#model-id').textContent === 'tiny');
    await waitFor('where the layers are and the KV types', () => {
      const info = document.querySelector('#model-info').textContent;
      return info.includes('devicesdefault') && info.includes('KV cachef16 / f16');
    });
    await waitFor('the admin caller', () => document.querySelector('#caller').textContent.includes('admin'));

    await page.click('.tab[data-tab=playground]');
    await page.$eval('#max-tokens', (e) => { e.value = '12'; });
    const turn = async (text, n) => {
      // The usage chunk lands before the stream ends; the form takes the next turn once it has.
      await waitFor('the send button', () => !document.querySelector('#send').disabled);
      await page.type('#user-input', text);
      await page.click('#send');
      await waitFor(`answer ${n}`, (k) => {
        const infos = document.querySelectorAll('.msg.assistant .cache-info');
        return infos.length === k && infos[k - 1].dataset.cached !== undefined;
      }, n);
      return page.$$eval('.msg.assistant', (ms) => ms.map((m) => ({
        text: m.querySelector('.text').textContent + m.querySelector('.thinking').textContent,
        cached: Number(m.querySelector('.cache-info').dataset.cached),
        info: m.querySelector('.cache-info').textContent,
      })));
    };
    const first = await turn('Hello! Please say something about caches.', 1);
    assert.ok(first[0].text.length > 0, `the streamed answer is shown${await pageState()}`);
    assert.match(first[0].info, /prompt tokens from the cache/, await pageState());
    const second = await turn('And one more thing?', 2);
    assert.ok(second[1].cached > 0, `the second turn reuses the first: ${second[1].info}${await pageState()}`);
    await shot('playground');

    await page.click('.tab[data-tab=dashboard]');
    await waitFor('the request chart', () => {
      const c = document.querySelector('#req-chart');
      return Number(c.dataset.points) >= 2 && Number(c.dataset.cachedPoints) >= 1;
    });
    assert.match(await page.$eval('#saved', (e) => e.textContent), /cached/, await pageState());
    await shot('dashboard');

    await page.click('.tab[data-tab=cache]');
    await page.waitForSelector('#entries tbody tr button.evict', WAIT);
    const ids = await page.$$eval('#entries tbody tr', (rs) => rs.map((r) => r.dataset.id));
    assert.ok(ids.length >= 1);
    await shot('cache');
    await clickStable(`#entries tbody tr[data-id="${ids[0]}"] button.evict`);
    await waitFor('the eviction message', () => document.querySelector('#cache-msg').textContent.startsWith('Evicted'));
    await waitFor('the evicted row to go', (id) => !document.querySelector(`#entries tbody tr[data-id="${id}"]`), ids[0]);
    assert.match(server.log, /prefixd cache_evicted id=/);
    assert.deepEqual(errors, [], `no script errors on the page${await pageState()}`);
  });

  // A tenant's stats leave out what every tenant shares (the queue, evictions, memory): null in
  // the JSON, and the page says nothing of them rather than "null".
  it('shows a tenant its own view without the fields it may not see', async () => {
    const context = await browser.createBrowserContext();  // no admin key stored
    const admin = page;
    page = await context.newPage();
    try {
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(server.url + '/', { waitUntil: 'load' });
      await page.waitForSelector('#key-form:not([hidden])', WAIT);
      await page.type('#key-input', TENANT_KEY);
      await page.click('#key-form button[type=submit]');
      await waitFor('the model id', () => document.querySelector('#model-id').textContent === 'tiny');
      await waitFor('the tiers', () => document.querySelector('#tiers').textContent.includes('blocks'));
      const caller = await page.$eval('#caller', (e) => e.textContent);
      assert.match(caller, /tenant/);
      assert.doesNotMatch(caller, /admin/);
      const text = await page.$eval('body', (b) => b.innerText);
      assert.doesNotMatch(text, /null|undefined|NaN/, `the tenant's page:\n${text}`);
      assert.equal(await page.$eval('#queue', (e) => e.textContent), '');
      assert.deepEqual(errors, []);
      await shot('tenant');
    } finally {
      await context.close();
      page = admin;
    }
  });
});
