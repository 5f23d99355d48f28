// segcat dashboard: helpers shared by the overview (overview.js) and the table page (table.js).
// Plain browser JavaScript, no build step. Every text that comes from the API is put into the
// page with textContent (through el()), never as HTML.
'use strict';

window.__loadedAt = Date.now();

const OUTCOMES = ['ACCEPTED', 'REJECTED', 'INVALID', 'DUPLICATE', 'PRUNED', 'NOTED'];
const OUTCOME_COLORS = {
  ACCEPTED: '#1a9641',
  REJECTED: '#d7191c',
  INVALID: '#c51b7d',
  DUPLICATE: '#e6a100',
  PRUNED: '#8c8c8c',
  NOTED: '#1ba3c6',
};
const OPERATION_COLORS = {
  APPEND: '#3b6fd8',
  COMPACT: '#8e5bd0',
  REPLACE: '#e07b1f',
  DELETE: '#d4455a',
  SET_PROPERTIES: '#2aa198',
  SET_SCHEMA: '#8a6a3a',
  UPGRADE_PROTOCOL: '#5f6b7a',
  INTENT: '#9aa5b1',
  UNKNOWN: '#b0b0b0',
  UNDECODED: '#c9c9c9',
};

class HttpError extends Error {
  constructor(status, kind, message) {
    super(message);
    this.status = status;
    this.kind = kind;
  }
}

/** Builds an element; children that are not nodes become text nodes (never parsed as HTML). */
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = String(value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key === 'style') for (const [prop, v] of Object.entries(value)) node.style.setProperty(prop, v);
    else if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function setText(node, text) {
  if (node && node.textContent !== String(text)) node.textContent = String(text);
}

// ------------------------------------------------------------------ banner and auth

let authNeeded = false;

function showBanner(text, kind = 'error') {
  const banner = document.getElementById('banner');
  if (!banner) return;
  banner.className = `banner banner-${kind}`;
  banner.replaceChildren(...(Array.isArray(text) ? text : [text]));
  banner.hidden = false;
}

function clearBanner() {
  const banner = document.getElementById('banner');
  if (banner && !authNeeded) banner.hidden = true;
}

function showAuthNeeded() {
  authNeeded = true;
  showBanner(
    [
      el('strong', { text: 'This dashboard needs a token: ' }),
      'open ',
      el('code', { text: `${location.origin}/?token=…` }),
      ' once with the server\'s token (the server keeps it in a cookie and removes it from the address bar).',
    ],
    'auth',
  );
}

/** GET a JSON document from the server (relative URL); throws HttpError. */
async function api(path) {
  let resp;
  try {
    resp = await fetch(path, {
      headers: { Accept: 'application/json' },
      credentials: 'same-origin',
      cache: 'no-store',
    });
  } catch (err) {
    throw new HttpError(0, 'network', 'the server does not answer');
  }
  if (resp.ok) return resp.json();
  let body = null;
  try {
    body = await resp.json();
  } catch (err) {
    body = null;
  }
  if (resp.status === 401) showAuthNeeded();
  throw new HttpError(
    resp.status,
    (body && body.error) || 'http',
    (body && body.message) || `HTTP ${resp.status} ${resp.statusText}`,
  );
}

// ------------------------------------------------------------------ live connection indicator

/** Opens an EventSource and keeps the header's "live" indicator in step with it. */
function openEvents(url, onVersion) {
  const indicator = document.getElementById('live');
  const mark = (state, text) => {
    if (!indicator) return;
    indicator.className = `live live-${state}`;
    setText(indicator, text);
  };
  mark('connecting', 'connecting…');
  const source = new EventSource(url);
  source.addEventListener('open', () => mark('on', 'live'));
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED) mark('off', 'disconnected');
    else mark('connecting', 'reconnecting…');
    if (!authNeeded) probeAuth();
  });
  source.addEventListener('version', (ev) => {
    let data;
    try {
      data = JSON.parse(ev.data);
    } catch (err) {
      return;
    }
    mark('on', 'live');
    onVersion(data, ev);
  });
  return source;
}

/** An EventSource cannot tell a 401 from a dropped connection: ask once with fetch. */
let probing = false;
async function probeAuth() {
  if (probing) return;
  probing = true;
  try {
    await api('/api/tables');
  } catch (err) {
    // api() shows the token message on a 401; anything else the page's own polling reports
  } finally {
    probing = false;
  }
}

// ------------------------------------------------------------------ formatting

const intFormat = new Intl.NumberFormat('en-US');
const compactFormat = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });

function isNum(v) {
  return typeof v === 'number' && Number.isFinite(v);
}

function fmtInt(n) {
  return isNum(n) ? intFormat.format(n) : '—';
}

function fmtCount(n) {
  if (!isNum(n)) return '—';
  return Math.abs(n) < 10000 ? intFormat.format(n) : compactFormat.format(n);
}

function fmtBytes(n) {
  if (!isNum(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  let value = Math.abs(n);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : value >= 10 ? 1 : 2;
  return `${n < 0 ? '-' : ''}${value.toFixed(digits)} ${units[unit]}`;
}

function fmtRate(n) {
  if (!isNum(n)) return '—';
  return n === Math.round(n) ? String(n) : n.toFixed(1);
}

function fmtDuration(ms) {
  if (!isNum(ms)) return '—';
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

function pad2(n) {
  return String(n).padStart(2, '0');
}

/** Local time, "2026-11-23 14:05:09". */
function fmtTime(ms) {
  if (!isNum(ms)) return '—';
  const d = new Date(ms);
  return (
    `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ` +
    `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`
  );
}

function fmtHourMinute(ms) {
  if (!isNum(ms)) return '—';
  const d = new Date(ms);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
}

function fmtTimeShort(ms) {
  if (!isNum(ms)) return '—';
  const d = new Date(ms);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}

function isoTime(ms) {
  return isNum(ms) ? new Date(ms).toISOString() : '';
}

/** An element whose text is "N s ago", kept current by tickAgo() (every second). */
function agoElement(ms, cls = 'ago') {
  const node = el('span', { class: cls, title: isoTime(ms) });
  setAgo(node, ms);
  return node;
}

function setAgo(node, ms) {
  if (isNum(ms)) {
    node.dataset.ts = String(ms);
    node.title = `${fmtTime(ms)} (${isoTime(ms)})`;
  } else {
    delete node.dataset.ts;
    node.title = '';
  }
  renderAgo(node, Date.now());
}

function renderAgo(node, now) {
  const ts = Number(node.dataset.ts);
  if (!node.dataset.ts || !Number.isFinite(ts)) {
    setText(node, '—');
    return;
  }
  setText(node, `${fmtDuration(now - ts)} ago`);
}

function tickAgo() {
  const now = Date.now();
  for (const node of document.querySelectorAll('[data-ts]')) renderAgo(node, now);
}
setInterval(tickAgo, 1000);

/** Replays the "flash" animation on an element. */
function flash(node) {
  node.classList.remove('flash');
  void node.offsetWidth; // restart the CSS animation
  node.classList.add('flash');
}

function outcomeBadge(outcome) {
  const name = outcome || '?';
  return el('span', { class: `badge outcome outcome-${name.toLowerCase()}`, text: name });
}

function operationChip(operation) {
  const name = operation || 'UNDECODED';
  const color = OPERATION_COLORS[name] || OPERATION_COLORS.UNKNOWN;
  return el('span', { class: 'chip op', style: { '--op': color }, text: name });
}

function plotsAvailable() {
  return typeof uPlot !== 'undefined';
}
