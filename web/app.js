// prefixd's web page: dashboard, playground and cache browser over the server's JSON routes
// (docs/http-api.md, "Web page"). Plain JS, no dependencies, nothing fetched from elsewhere.
'use strict';

const $ = (sel) => document.querySelector(sel);
const KEY_STORE = 'prefixd.apiKey';
const POLL_MS = 2000;
const MAX_POINTS = 60;  // requests the chart shows

const state = {
  key: sessionStorage.getItem(KEY_STORE) || '',
  caller: null,
  requests: [],   // RequestRecord JSON, oldest first, at most 256
  lastSeq: 0,
  tab: 'dashboard',
  chat: [],       // {role, content}
  abort: null,
};

// ---------- HTTP ----------

function headers(extra = {}) {
  const h = { ...extra };
  if (state.key) h.Authorization = `Bearer ${state.key}`;
  return h;
}

class AuthError extends Error {}

async function api(path, opts = {}) {
  const r = await fetch(path, { ...opts, headers: headers(opts.headers) });
  if (r.status === 401) { askForKey('the key was refused'); throw new AuthError('401'); }
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new Error((body && body.error && body.error.message) || `HTTP ${r.status}`);
  return body;
}

function askForKey(why) {
  $('#key-form').hidden = false;
  $('#key-error').textContent = state.key ? why : '';
  $('#key-input').focus();
}

$('#key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  state.key = $('#key-input').value.trim();
  sessionStorage.setItem(KEY_STORE, state.key);
  $('#key-form').hidden = true;
  state.requests = []; state.lastSeq = 0;
  refresh();
});
$('#key-change').addEventListener('click', () => askForKey(''));

// ---------- formatting ----------

function fmtBytes(n) {
  if (n == null) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}
const fmtMs = (ms) => (ms == null ? '–' : ms < 1000 ? `${ms.toFixed(0)} ms` : `${(ms / 1000).toFixed(2)} s`);
function fmtAge(unixMs) {
  if (!unixMs) return '–';
  const s = Math.max(0, (Date.now() - unixMs) / 1000);
  if (s < 60) return `${s.toFixed(0)} s`;
  if (s < 3600) return `${(s / 60).toFixed(0)} min`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}
const pct = (x) => `${(100 * x).toFixed(1)}%`;

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v; else if (k.startsWith('on')) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function fillDl(dl, pairs) {
  dl.replaceChildren(...pairs.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}

// ---------- dashboard ----------

function renderStats(s) {
  state.caller = s.caller;
  $('#model-id').textContent = s.model.id;
  $('#attach').hidden = !s.model.reads_images;  // the playground takes an image for such a model
  $('#caller').textContent = s.caller.tenant === '-' ? '' : `tenant ${s.caller.tenant}${s.caller.admin ? ' (admin)' : ''}`;
  fillDl($('#model-info'), [
    ['memory layout', s.model.memory_layout || '–'], ['cache', s.model.cache],
    ['block size', s.model.block_size], ['context / slot', s.model.n_ctx_per_slot],
    ['vocabulary', s.model.n_vocab], ['devices', s.model.devices || 'default'],
    ['KV cache', s.model.cache_type_k ? `${s.model.cache_type_k} / ${s.model.cache_type_v}` : '–'],
  ]);
  $('#slots tbody').replaceChildren(...s.slots.map((v) => el('tr', {},
    el('td', {}, v.index), el('td', { class: v.busy ? 'busy' : '' }, v.busy ? 'busy' : 'idle'),
    el('td', {}, v.n_tokens), el('td', { class: 'mono' }, v.session || '–'))));
  // A tenant's view leaves out what every tenant shares (the queue, evictions): null.
  $('#queue').textContent = s.queue_depth == null ? '' : `queue: ${s.queue_depth} waiting`;
  renderTiers(s.tiers);
  const t = s.totals;
  const misses = Object.entries(t.misses_by_reason).map(([k, v]) => `${k} ${v}`).join(', ') || '–';
  fillDl($('#totals'), [
    ['requests', t.requests], ['token hit ratio', pct(t.token_hit_ratio)],
    ['cached / prompt tokens', `${t.cached_tokens} / ${t.prompt_tokens}`],
    ['hits slot / RAM / disk', `${t.hits.slot} / ${t.hits.ram} / ${t.hits.disk}`],
    ['misses', `${t.misses} (${misses})`], ['restored', fmtBytes(t.restored_bytes)],
    ...(t.speculation ? [['speculation', `${t.speculation}: ${t.draft_accepted} of ${t.draft_tokens} ` +
      `drafted tokens taken (${pct(t.draft_tokens ? t.draft_accepted / t.draft_tokens : 0)})`]] : []),
  ]);
}

function tierBlock(name, used, limit, cls, details) {
  const frac = limit ? Math.min(1, used / limit) : 0;
  return el('div', {},
    el('div', {}, el('b', {}, name), ` ${fmtBytes(used)} of ${fmtBytes(limit)}`),
    el('div', { class: `bar ${cls}` }, el('div', { style: `width:${(100 * frac).toFixed(1)}%` })),
    el('div', { class: 'muted' }, details));
}

const evicted = (n) => (n == null ? '' : `; ${n} evicted`);

function renderTiers(t) {
  const parts = [tierBlock('RAM', t.ram.used_bytes, t.ram.budget_bytes, '',
    `${t.ram.blocks} blocks, ${t.ram.snapshots} snapshots, ${t.ram.tails} tails${evicted(t.ram.evictions)}`)];
  parts.push(t.disk ? tierBlock('Disk', t.disk.used_bytes, t.disk.quota_bytes, 'disk',
    `${t.disk.records} records (${Object.entries(t.disk.records_by_kind).map(([k, v]) => `${v} ${k}`).join(', ') || 'none'})` +
    evicted(t.disk.evictions)) : el('div', { class: 'muted' }, 'Disk: off'));
  parts.push(t.shared ? tierBlock('Shared', t.shared.used_bytes, t.shared.quota_bytes, 'disk',
    `${t.shared.records} records`) : el('div', { class: 'muted' }, 'Shared tier: not configured'));
  $('#tiers').replaceChildren(...parts);
}

function addRequests(list) {
  for (const r of list) { state.requests.push(r); state.lastSeq = Math.max(state.lastSeq, r.seq); }
  if (state.requests.length > 256) state.requests.splice(0, state.requests.length - 256);
}

const COLORS = { slot: '--slot', ram: '--ram', disk: '--disk', eval: '--eval', ttft: '--ttft' };
const color = (k) => getComputedStyle(document.documentElement).getPropertyValue(COLORS[k]).trim();

function drawRequestChart() {
  const canvas = $('#req-chart');
  const pts = state.requests.slice(-MAX_POINTS);
  canvas.dataset.points = String(pts.length);
  canvas.dataset.cachedPoints = String(pts.filter((r) => r.cached_tokens > 0).length);
  const g = canvas.getContext('2d');
  const W = canvas.width, H = canvas.height, L = 50, R = 50, T = 10, B = 20;
  g.clearRect(0, 0, W, H);
  g.font = '11px system-ui, sans-serif';
  g.fillStyle = '#6b7280';
  if (!pts.length) { g.fillText('no requests yet', L, H / 2); return; }
  const maxTok = Math.max(1, ...pts.map((r) => r.prompt_tokens));
  const maxTtft = Math.max(1, ...pts.map((r) => r.ttft_ms || 0));
  const slotW = (W - L - R) / MAX_POINTS, barW = Math.max(2, slotW * 0.7);
  const y = (v) => H - B - (v / maxTok) * (H - T - B);
  g.fillText(String(maxTok), 4, T + 8); g.fillText('0', 4, H - B);
  g.fillText('tokens', 4, H / 2);
  g.fillText(fmtMs(maxTtft), W - R + 4, T + 8); g.fillText('TTFT', W - R + 4, H / 2);
  pts.forEach((r, i) => {
    const x = L + i * slotW;
    g.fillStyle = color(r.tier in COLORS ? r.tier : 'eval');
    g.fillRect(x, y(r.cached_tokens), barW, H - B - y(r.cached_tokens));
    g.fillStyle = color('eval');
    g.fillRect(x, y(r.cached_tokens + r.evaluated_tokens), barW, y(r.cached_tokens) - y(r.cached_tokens + r.evaluated_tokens));
  });
  g.strokeStyle = color('ttft'); g.lineWidth = 2; g.beginPath();
  pts.forEach((r, i) => {
    const x = L + i * slotW + barW / 2;
    const yy = H - B - ((r.ttft_ms || 0) / maxTtft) * (H - T - B);
    if (i) g.lineTo(x, yy); else g.moveTo(x, yy);
  });
  g.stroke();
  g.strokeStyle = '#e3e6eb'; g.lineWidth = 1; g.beginPath(); g.moveTo(L, H - B); g.lineTo(W - R, H - B); g.stroke();
  const saved = pts.reduce((a, r) => a + r.saved_ms, 0);
  const last = pts[pts.length - 1];
  $('#saved').textContent = `Prefill time the cache saved over these ${pts.length} requests: about ${fmtMs(saved)}. ` +
    `Last: ${last.cached_tokens} of ${last.prompt_tokens} prompt tokens cached (${last.tier}), TTFT ${fmtMs(last.ttft_ms)}` +
    (last.draft_tokens ? `, ${last.draft_accepted} of ${last.draft_tokens} drafted tokens taken.` : '.');
}

function drawRatioChart() {
  const canvas = $('#ratio-chart');
  const g = canvas.getContext('2d');
  const W = canvas.width, H = canvas.height, L = 36, T = 8, B = 16;
  g.clearRect(0, 0, W, H);
  g.font = '11px system-ui, sans-serif'; g.fillStyle = '#6b7280';
  g.fillText('100%', 2, T + 8); g.fillText('0%', 2, H - B);
  const pts = state.requests;
  if (pts.length < 1) return;
  let cached = 0, prompt = 0;
  const ratios = pts.map((r) => { cached += r.cached_tokens; prompt += r.prompt_tokens; return prompt ? cached / prompt : 0; });
  g.strokeStyle = color('ram'); g.lineWidth = 2; g.beginPath();
  ratios.forEach((v, i) => {
    const x = L + (ratios.length === 1 ? 0 : (i / (ratios.length - 1)) * (W - L - 4));
    const yy = H - B - v * (H - T - B);
    if (i) g.lineTo(x, yy); else g.moveTo(x, yy);
  });
  g.stroke();
}

function renderMisses() {
  const rows = state.requests.filter((r) => r.miss_reason || r.diverged_at).slice(-8).reverse();
  $('#misses tbody').replaceChildren(...rows.map((r) => el('tr', {},
    el('td', { class: 'mono' }, `#${r.seq}${r.session ? ` · ${r.session}` : ''}`), el('td', {}, r.miss_reason ? `miss: ${r.miss_reason}` : `hit (${r.tier})`),
    el('td', {}, r.diverged_at ?? '–'), el('td', { class: 'mono' }, r.diverged ?? '–'))));
}

async function refreshDashboard() {
  const [stats, recent] = await Promise.all([
    api('/v1/cache/stats'), api(`/v1/requests/recent?after=${state.lastSeq}`)]);
  renderStats(stats);
  addRequests(recent.requests);
  drawRequestChart();
  drawRatioChart();
  renderMisses();
}

// ---------- cache browser ----------

let shownEntries = '';  // what the table shows: it is rebuilt only when that changes

async function refreshEntries() {
  const data = await api('/v1/cache/entries');
  const admin = state.caller && state.caller.admin;
  // Rebuilding the rows on every poll would take a button away under a click in progress.
  const shown = JSON.stringify([admin, data.scope, data.entries]);
  if (shown === shownEntries) return;
  shownEntries = shown;
  $('#cache-scope').textContent = (data.scope === 'all'
    ? 'Every domain (admin view).' : 'The prefixes of your API key only.') +
    (data.entries.length ? '' : ' Nothing cached yet.');
  const tier = (e) => [e.ram && 'RAM', e.disk && 'disk'].filter(Boolean).join(' + ');
  const size = (e) => [e.ram && `${fmtBytes(e.ram.bytes)} RAM`, e.disk && `${fmtBytes(e.disk.bytes)} disk`].filter(Boolean).join(', ');
  // A companion tree (the MTP head's or the draft model's history) names the prompts it follows.
  const roles = { mtp_head: 'MTP head', draft_model: 'draft model' };
  const companion = (e) => (e.role && e.role !== 'prompt'
    ? el('div', { class: 'muted' }, `${roles[e.role] || e.role} of ${e.of_domain}`) : '');
  const counts = (e) => { const t = e.ram || e.disk; return `${t.blocks} / ${t.snapshots} / ${t.tails}`; };
  $('#entries tbody').replaceChildren(...data.entries.map((e) => el('tr', { 'data-id': e.id },
    el('td', { class: 'mono' }, e.domain, companion(e)), el('td', { class: 'mono' }, e.root), el('td', {}, e.n_tokens),
    el('td', {}, tier(e)), el('td', {}, size(e)), el('td', {}, counts(e)),
    el('td', {}, fmtAge(e.created_unix_ms)), el('td', {}, `${fmtAge(e.used_unix_ms)} ago`),
    el('td', {}, admin ? el('button', { class: 'small evict', onclick: () => evict(e.id) }, 'Evict') : ''))));
}

async function evict(id) {
  try {
    const r = await api(`/v1/cache/entries/${id}`, { method: 'DELETE' });
    $('#cache-msg').textContent = `Evicted ${r.evicted}: ${r.ram_entries} RAM entries, ${r.disk_records} disk records.`;
  } catch (e) {
    $('#cache-msg').textContent = `Evict failed: ${e.message}`;
  }
  refreshEntries().catch(() => {});
}

// ---------- playground ----------

function addMessage(role, text) {
  const thinking = el('span', { class: 'thinking' });
  const body = el('span', { class: 'text' }, text);
  const info = el('span', { class: 'cache-info' });
  const m = el('div', { class: `msg ${role}` }, el('span', { class: 'who' }, role === 'user' ? 'You' : 'Model'),
    thinking, body, info);
  $('#chat').append(m);
  $('#chat').scrollTop = $('#chat').scrollHeight;
  return { thinking, body, info };
}

// Reads an SSE body: calls onData with each `data:` payload.
async function readSse(response, onData) {
  const reader = response.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      for (const line of ev.split('\n')) if (line.startsWith('data: ')) onData(line.slice(6));
    }
  }
}

// The file chosen in the playground as a data URL, or null.
function readImage() {
  const file = $('#image-input').files?.[0];
  if (!file || $('#attach').hidden) return Promise.resolve(null);
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve({ name: file.name, url: reader.result });
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function send(text) {
  const image = await readImage();
  $('#image-input').value = '';
  // The image stays in the conversation: every later turn sends it again, and the cache
  // restores it with the rest of the prompt.
  state.chat.push({ role: 'user', content: image
    ? [{ type: 'text', text }, { type: 'image_url', image_url: { url: image.url } }] : text });
  addMessage('user', image ? `${text} [image: ${image.name}]` : text);
  const out = addMessage('assistant', '');
  const messages = [];
  const sys = $('#system').value.trim();
  if (sys) messages.push({ role: 'system', content: sys });
  messages.push(...state.chat);
  state.abort = new AbortController();
  $('#send').disabled = true; $('#stop').disabled = false;
  let answer = '', reasoning = '';
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', signal: state.abort.signal,
      headers: headers({ 'Content-Type': 'application/json' }),
      body: JSON.stringify({
        messages, stream: true, stream_options: { include_usage: true },
        max_tokens: Number($('#max-tokens').value) || 256, temperature: Number($('#temperature').value) || 0,
      }),
    });
    if (r.status === 401) { askForKey('the key was refused'); throw new Error('API key needed'); }
    if (!r.ok) { const b = await r.json().catch(() => null); throw new Error(b?.error?.message || `HTTP ${r.status}`); }
    await readSse(r, (data) => {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      const delta = chunk.choices?.[0]?.delta;
      if (delta?.reasoning_content) { reasoning += delta.reasoning_content; out.thinking.textContent = reasoning; }
      if (delta?.content) { answer += delta.content; out.body.textContent = answer; }
      $('#chat').scrollTop = $('#chat').scrollHeight;
      if (chunk.usage) {
        const cached = chunk.usage.prompt_tokens_details?.cached_tokens ?? 0;
        out.info.textContent = `${cached} of ${chunk.usage.prompt_tokens} prompt tokens from the cache` +
          (chunk.timings ? `, prefill ${fmtMs(chunk.timings.prompt_ms)}` : '');
        out.info.dataset.cached = String(cached);
      }
    });
  } catch (e) {
    out.info.textContent = e.name === 'AbortError' ? 'stopped' : `error: ${e.message}`;
  } finally {
    state.chat.push({ role: 'assistant', content: answer });
    state.abort = null;
    $('#send').disabled = false; $('#stop').disabled = true;
    refreshDashboard().catch(() => {});
  }
}

$('#chat-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = $('#user-input').value.trim();
  if (!text || state.abort) return;
  $('#user-input').value = '';
  send(text);
});
$('#user-input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); $('#chat-form').requestSubmit(); }
});
$('#stop').addEventListener('click', () => state.abort && state.abort.abort());
$('#clear-chat').addEventListener('click', () => { state.chat = []; $('#chat').replaceChildren(); });

// ---------- tabs and polling ----------

function showTab(name) {
  state.tab = name;
  for (const b of document.querySelectorAll('.tab')) b.classList.toggle('active', b.dataset.tab === name);
  for (const p of document.querySelectorAll('.panel')) p.hidden = p.id !== name;
  if (name === 'cache') refreshEntries().catch(() => {});
  if (name === 'dashboard') refreshDashboard().catch(() => {});
}
for (const b of document.querySelectorAll('.tab')) b.addEventListener('click', () => showTab(b.dataset.tab));

async function refresh() {
  try {
    await refreshDashboard();
    if (state.tab === 'cache') await refreshEntries();
  } catch (e) {
    if (!(e instanceof AuthError)) console.warn('refresh failed:', e.message);
  }
}

refresh();
setInterval(() => { if (!document.hidden && $('#key-form').hidden) refresh(); }, POLL_MS);
