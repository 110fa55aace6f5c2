// Makes the README's dashboard screenshot: a server on the tiny model, three agent-like sessions
// (two sharing a system prompt) and an edited history, then the dashboard in headless chromium.
//   cd tests/e2e && PREFIXD_BIN=../../build/bin/prefixd node readme_screenshot.mjs ../../docs/img/dashboard.png
// Not a test (run.sh runs ./*.test.js only).
import { rmSync } from 'node:fs';
import puppeteer from 'puppeteer-core';
import { makeModel, startServer, tempDir, post } from './harness.js';
const dir = tempDir('shot');
const server = await startServer({ model: makeModel(dir), args: ['--slots', '2', '--ctx', '4096', '--block-size', '64'] });
const sys = { role: 'system', content: 'You are a coding agent. Tools: read_file, write_file, run_tests. '.repeat(6) };
const convs = [[sys], [sys], [{ role: 'system', content: 'Another agent with other rules. '.repeat(5) }]];
const words = ['Open the parser and fix the bug.', 'Now run the tests.', 'Show me the failing case.', 'Refactor the helper.', 'Write the docs.', 'Commit it.'];
for (let turn = 0; turn < 6; turn++) {
  for (const [i, c] of convs.entries()) {
    if (i === 2 && turn % 2) continue;
    c.push({ role: 'user', content: `${words[turn]} (session ${i})` });
    const r = await post(server, '/v1/chat/completions', { messages: c, max_tokens: 16, stream: false });
    c.push({ role: 'assistant', content: r.json.choices[0].message.content || 'ok' });
  }
}
// an edited history: diverges inside the cached path
const edited = convs[0].slice(0, 3).concat([{ role: 'user', content: 'Actually, do something else.' }]);
await post(server, '/v1/chat/completions', { messages: edited, max_tokens: 16 });
const browser = await puppeteer.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--disable-gpu'] });
const page = await browser.newPage();
await page.setViewport({ width: 1200, height: 860 });
await page.goto(server.url + '/');
await page.waitForFunction(() => Number(document.querySelector('#req-chart').dataset.points) > 10, { timeout: 20000 });
await new Promise((r) => setTimeout(r, 500));
await page.screenshot({ path: process.argv[2], clip: { x: 0, y: 0, width: 1200, height: 860 } });
await browser.close();
await server.stop();
rmSync(dir, { recursive: true, force: true });
process.exit(0);
