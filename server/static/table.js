// segcat dashboard, one table (/tables/{table}): head, timeline, plots, log, diff, tombstones,
// properties and schema. New versions arrive by /api/tables/{table}/events (SSE); the log and
// the per-minute plots follow /api/tables/{table}/history incrementally.
'use strict';

const TABLE = decodeURIComponent(location.pathname.replace(/^\/tables\//, '').replace(/\/+$/, ''));
const API = `/api/tables/${encodeURIComponent(TABLE)}`;

const HISTORY_LIMIT = 2000; // records read at load (what the plots draw)
const TIMELINE_MAX = 300; // versions kept in the timeline
const LOG_PAGE = 200; // log rows shown per "more"
const DIFF_MAX = 200; // segments listed per side of a diff
const POLL_MS = 5000;

const state = {
  head: null, // the last TableHead (+ schema, properties, …), advanced by events
  records: new Map(), // offset -> history Record
  points: new Map(), // accepted version -> {ts, segments, rows, bytes}
  timeline: new Map(), // version -> <li>
  oldestOffset: null, // the oldest record read (for "older records")
  readFrom: null, // the window of offsets read: [readFrom, readTo)
  readTo: null,
  newestOffset: -1, // the newest record read (the next incremental read starts after it)
  logShown: LOG_PAGE,
  moreOnServer: false,
  events: null,
};

const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------ head

function renderHead() {
  const head = state.head;
  setText($('head-version'), isNum(head.version) && head.version >= 0 ? String(head.version) : '—');
  setAgo($('head-ago'), head.timestamp_ms);
  setText($('head-time'), isNum(head.timestamp_ms) ? fmtTime(head.timestamp_ms) : 'no commit yet');
  setText($('head-segments'), fmtInt(head.live_segments));
  setText($('head-rows'), fmtCount(head.live_rows));
  $('head-rows').title = isNum(head.live_rows) ? `${fmtInt(head.live_rows)} rows` : '';
  setText($('head-bytes'), fmtBytes(head.live_bytes));
  $('head-bytes').title = isNum(head.live_bytes) ? `${fmtInt(head.live_bytes)} bytes` : '';

  const act = head.activity;
  if (act) {
    const windowS = isNum(act.window_s) && act.window_s > 0 ? act.window_s : 60;
    const commits = isNum(act.commits) ? (act.commits * 60) / windowS : null;
    const conflicts = isNum(act.conflicts) ? (act.conflicts * 60) / windowS : null;
    setText($('head-rates'), `${fmtRate(commits)} / ${fmtRate(conflicts)}`);
    $('head-rates').classList.toggle('warn', isNum(conflicts) && conflicts > 0);
  }

  const lag = head.materializer_lag;
  setText($('head-lag'), isNum(lag) ? fmtInt(lag) : '—');
  $('head-lag').classList.toggle('warn', isNum(lag) && lag > 0 && lag <= 100);
  $('head-lag').classList.toggle('bad', isNum(lag) && lag > 100);
  const mv = head.materialized_version;
  setText(
    $('head-materialized'),
    isNum(mv) && mv >= 0 ? `materialized v${mv}` : isNum(lag) ? 'no version materialized' : 'not materialized',
  );
  setText($('head-log'), isNum(head.log_end) ? `${fmtInt(head.log_start)} … ${fmtInt(head.log_end)}` : '—');
  const kf = head.keyframe_version;
  setText($('head-keyframe'), isNum(kf) && kf >= 0 ? `key frame v${kf}` : 'no key frame');

  const protocol = head.protocol;
  if (protocol) {
    setText($('head-protocol'), isNum(protocol.rules_version) ? `rules v${protocol.rules_version}` : '—');
    const features = Array.isArray(protocol.features) ? protocol.features : [];
    setText($('head-features'), features.length ? features.join(', ') : 'no features');
  }

  const flags = $('head-flags');
  flags.replaceChildren();
  if (head.dropped) flags.append(el('span', { class: 'badge dropped', text: 'dropped' }));
}

function renderMeta() {
  const head = state.head;
  // tombstones
  const tombstones = Array.isArray(head.tombstones) ? head.tombstones : [];
  setText($('tombstones-count'), tombstones.length ? String(tombstones.length) : '');
  if (tombstones.length) {
    $('tombstones').replaceChildren(
      el(
        'table',
        { class: 'grid compact' },
        el('thead', {}, el('tr', {}, el('th', { text: 'predicate' }), el('th', { class: 'num', text: 'version' }))),
        el(
          'tbody',
          {},
          tombstones.map((t) =>
            el('tr', {}, el('td', {}, el('code', { text: t.predicate })), el('td', { class: 'num', text: fmtInt(t.version) })),
          ),
        ),
      ),
    );
  } else {
    $('tombstones').replaceChildren(el('p', { class: 'muted', text: 'No tombstones.' }));
  }
  // properties
  const props = head.properties && typeof head.properties === 'object' ? Object.entries(head.properties) : [];
  props.sort(([a], [b]) => a.localeCompare(b));
  setText($('properties-count'), props.length ? String(props.length) : '');
  if (props.length) {
    $('properties').replaceChildren(
      el(
        'table',
        { class: 'grid compact kv' },
        el('tbody', {}, props.map(([k, v]) => el('tr', {}, el('th', { text: k }), el('td', {}, el('code', { text: String(v) }))))),
      ),
    );
  } else {
    $('properties').replaceChildren(el('p', { class: 'muted', text: 'No properties.' }));
  }
  // schema: a JSON string or null
  const schema = head.schema;
  const pre = $('schema');
  if (schema === null || schema === undefined || schema === '') {
    pre.classList.add('muted');
    setText(pre, 'No schema.');
  } else {
    pre.classList.remove('muted');
    let text = String(schema);
    try {
      text = JSON.stringify(typeof schema === 'string' ? JSON.parse(schema) : schema, null, 2);
    } catch (err) {
      // not JSON: show it as it is
    }
    setText(pre, text);
  }
}

let headFetching = false;
async function loadHead() {
  if (headFetching) return;
  headFetching = true;
  try {
    const fetched = await api(API);
    const known = state.head;
    if (known && isNum(known.version) && isNum(fetched.version) && fetched.version < known.version) {
      // events already moved past this answer: keep what they said about the head
      for (const key of ['version', 'timestamp_ms', 'live_segments', 'live_rows', 'live_bytes']) fetched[key] = known[key];
    }
    state.head = fetched;
    document.title = `segcat · ${TABLE} · v${fetched.version ?? '—'}`;
    renderHead();
    renderMeta();
    clearBanner();
  } catch (err) {
    if (err.status === 404) showBanner(`No table ${TABLE}: ${err.message}`);
    else if (err.status === 410) showBanner(`Table ${TABLE} is gone: ${err.message}`);
    else if (err.status !== 401) showBanner(`Could not read the table's head: ${err.message}`);
    throw err;
  } finally {
    headFetching = false;
  }
}

// ------------------------------------------------------------------ timeline

function timelineItem(version, ts, operation, adds, drops, fresh) {
  const item = el(
    'li',
    { class: 'tl-item', dataset: { version: String(version) } },
    el('span', { class: 'tl-version', text: `v${version}` }),
    operationChip(operation),
    el(
      'span',
      { class: 'tl-delta' },
      el('span', { class: 'plus', text: `+${isNum(adds) ? adds : '?'}` }),
      ' ',
      el('span', { class: 'minus', text: `−${isNum(drops) ? drops : '?'}` }),
    ),
    el('span', { class: 'tl-time', title: isoTime(ts), text: fmtTimeShort(ts) }),
  );
  if (fresh) item.classList.add('fresh');
  return item;
}

function addToTimeline(version, ts, operation, adds, drops, fresh) {
  if (!isNum(version) || state.timeline.has(version)) return;
  const list = $('timeline');
  const item = timelineItem(version, ts, operation, adds, drops, fresh);
  // newest first: insert before the first item with a smaller version
  let before = null;
  for (const child of list.children) {
    if (Number(child.dataset.version) < version) {
      before = child;
      break;
    }
  }
  list.insertBefore(item, before);
  state.timeline.set(version, item);
  while (state.timeline.size > TIMELINE_MAX) {
    const oldest = list.lastElementChild;
    state.timeline.delete(Number(oldest.dataset.version));
    oldest.remove();
  }
  if (fresh) flash(item);
  renderTimelineCount();
}

function renderTimelineCount() {
  const c = counts();
  const shown = state.timeline.size;
  setText(
    $('timeline-count'),
    shown < c.versions
      ? `newest ${fmtInt(shown)} of ${fmtInt(c.versions)} versions read`
      : `${fmtInt(shown)} version${shown === 1 ? '' : 's'}`,
  );
}

// ------------------------------------------------------------------ plots

const plots = {}; // name -> {u, el, ...}
const plotsOn = plotsAvailable();

function plotWidth(container) {
  return Math.max(200, Math.floor(container.clientWidth || container.parentElement.clientWidth || 300));
}

const INTEGER_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7];

function versionPlot(name, label, color, fmt) {
  const container = $(`plot-${name}`);
  const opts = {
    width: plotWidth(container),
    height: 150,
    scales: { x: { time: false } },
    legend: { show: false },
    hooks: tooltipHooks((u, idx) => `v${u.data[0][idx]}: ${fmt(u.data[1][idx])}`),
    cursor: { drag: { x: true, y: false }, points: { size: 6 } },
    series: [
      { label: 'version' },
      {
        label,
        stroke: color,
        width: 1.75,
        fill: `${color}22`,
        paths: uPlot.paths.stepped({ align: 1 }),
        points: { show: (u, si, i0, i1) => i1 - i0 < 40, size: 4, fill: color },
        value: (u, v) => (v === null || v === undefined ? '—' : fmt(v)),
      },
    ],
    axes: [
      {
        incrs: INTEGER_INCRS,
        values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? `v${v}` : '')),
        grid: { stroke: '#eef0f3' },
        ticks: { stroke: '#e3e6ea' },
        font: '11px system-ui, sans-serif',
      },
      {
        size: 62,
        values: (u, splits) => splits.map((v) => fmt(v)),
        grid: { stroke: '#eef0f3' },
        ticks: { stroke: '#e3e6ea' },
        font: '11px system-ui, sans-serif',
      },
    ],
  };
  const u = new uPlot(opts, [[], []], container);
  plots[name] = { u, container };
}

function minutePlot(name, keys, colors) {
  const container = $(`plot-${name}`);
  const old = plots[name];
  if (old) old.u.destroy();
  const raw = keys.map(() => []);
  const series = [
    { label: 'minute', value: (u, v) => (v === null || v === undefined ? 'total' : fmtHourMinute(v * 1000)) },
  ];
  keys.forEach((key, i) => {
    const color = colors[key] || '#999999';
    series.push({
      label: key,
      stroke: color,
      fill: color,
      width: 0,
      paths: uPlot.paths.bars({ size: [0.75, 48], align: 0 }),
      points: { show: false },
      // under the cursor: that minute's count; elsewhere: the total over the plot
      value: (u, v, si, idx) =>
        idx === null || idx === undefined ? String(raw[i].reduce((a, b) => a + b, 0)) : String(raw[i][idx] ?? 0),
    });
  });
  const opts = {
    width: plotWidth(container),
    height: 150,
    scales: {
      x: { time: true, range: (u, min, max) => [min - 45, max + 45] },
      y: { range: (u, min, max) => [0, Math.max(2, Math.ceil(max * 1.1))] },
    },
    legend: { show: true, live: true },
    cursor: { drag: { x: true, y: false }, points: { show: false } },
    series,
    axes: [
      {
        values: (u, splits) => splits.map((v) => fmtHourMinute(v * 1000)),
        grid: { stroke: '#eef0f3' },
        ticks: { stroke: '#e3e6ea' },
        font: '11px system-ui, sans-serif',
      },
      {
        size: 40,
        incrs: INTEGER_INCRS,
        values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : '')),
        grid: { stroke: '#eef0f3' },
        ticks: { stroke: '#e3e6ea' },
        font: '11px system-ui, sans-serif',
      },
    ],
  };
  const u = new uPlot(opts, [[], ...keys.map(() => [])], container);
  plots[name] = { u, container, keys: keys.join('|'), raw };
}

/** A small hover label for the version plots (their legend is hidden to save room). */
function tooltipHooks(text) {
  let tip = null;
  return {
    init: [
      (u) => {
        tip = el('div', { class: 'plot-tip', hidden: true });
        u.over.append(tip);
      },
    ],
    setCursor: [
      (u) => {
        const idx = u.cursor.idx;
        if (!tip) return;
        if (idx === null || idx === undefined || u.data[0].length === 0 || u.data[1][idx] == null) {
          tip.hidden = true;
          return;
        }
        tip.hidden = false;
        setText(tip, text(u, idx));
        const left = u.valToPos(u.data[0][idx], 'x');
        tip.style.left = `${Math.min(Math.max(left + 8, 0), Math.max(0, u.over.clientWidth - tip.offsetWidth))}px`;
      },
    ],
  };
}

function initPlots() {
  if (!plotsOn) {
    $('plots').hidden = true;
    $('plots-unavailable').hidden = false;
    return;
  }
  versionPlot('segments', 'live segments', '#3b6fd8', fmtInt);
  versionPlot('rows', 'rows', '#1a9641', fmtCount);
  versionPlot('bytes', 'bytes', '#8e5bd0', fmtBytes);
  const observer = new ResizeObserver(() => {
    for (const p of Object.values(plots)) {
      const width = plotWidth(p.container);
      if (Math.abs(width - p.u.width) > 2) p.u.setSize({ width, height: p.u.height });
    }
  });
  for (const name of ['segments', 'rows', 'bytes', 'ops', 'verdicts']) observer.observe($(`plot-${name}`));
}

function drawVersionPlots() {
  if (!plotsOn) return;
  const versions = [...state.points.keys()].sort((a, b) => a - b);
  const xs = versions;
  const pick = (key) => versions.map((v) => state.points.get(v)[key]);
  plots.segments.u.setData([xs, pick('segments')]);
  plots.rows.u.setData([xs, pick('rows')]);
  plots.bytes.u.setData([xs, pick('bytes')]);
  setText(
    $('plots-note'),
    versions.length
      ? `v${versions[0]} … v${versions[versions.length - 1]} · ${fmtInt(versions.length)} versions · ${readNote(counts())}`
      : 'no versions yet',
  );
}

const MAX_MINUTES = 720; // the per-minute plots show at most 12 hours
const MIN_MINUTES = 6; // … and at least 6 minutes

function drawMinutePlot(name, keyOf, order, colors, counted) {
  // only the minutes the records read cover whole (records.js): never a part of a minute's count
  const found = minuteCounts([...state.records.values()], state.readFrom, state.head?.log_start, keyOf, counted);
  const counts = found.counts; // minute (s) -> Map(key -> n)
  const seen = new Set();
  for (const m of counts.values()) for (const key of m.keys()) seen.add(key);
  const keys = [...seen].sort((a, b) => {
    const ia = order.indexOf(a);
    const ib = order.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
  if (!keys.length) keys.push(order[0]);
  let p = plots[name];
  if (!p || p.keys !== keys.join('|')) {
    minutePlot(name, keys, colors);
    p = plots[name];
  }
  const minutes = [...counts.keys()];
  const newest = minutes.length ? Math.max(...minutes) : Math.floor(Date.now() / 60000) * 60;
  const oldestSeen = minutes.length ? Math.min(...minutes) : newest;
  let oldest = Math.max(newest - (MAX_MINUTES - 1) * 60, Math.min(oldestSeen, newest - (MIN_MINUTES - 1) * 60));
  if (found.partial && found.from !== null) oldest = Math.max(oldest, found.from); // no zeros for unread minutes
  const xs = [];
  for (let t = oldest; t <= newest; t += 60) xs.push(t);
  keys.forEach((key, i) => {
    p.raw[i] = xs.map((t) => (counts.has(t) ? counts.get(t).get(key) || 0 : 0));
  });
  // stacked bars: series i draws the sum of keys i.. (tallest first, the others over it)
  const stacked = keys.map((_, i) => xs.map((_, j) => keys.slice(i).reduce((s, __, k) => s + p.raw[i + k][j], 0)));
  // the legend's value() closures read p.raw: keep it the same array object
  p.u.setData([xs, ...stacked]);
  return found;
}

function drawMinutePlots() {
  if (!plotsOn) return;
  const opOrder = Object.keys(OPERATION_COLORS);
  drawMinutePlot('ops', (r) => r.operation || 'UNDECODED', opOrder, OPERATION_COLORS, (r) => r.outcome === 'ACCEPTED');
  const found = drawMinutePlot('verdicts', (r) => r.outcome || 'UNKNOWN', OUTCOMES, OUTCOME_COLORS, () => true);
  setText(
    $('minutes-note'),
    found.partial && found.from !== null
      ? `per minute from ${fmtHourMinute(found.from * 1000)}: earlier minutes were not read whole ("older records" reads more)`
      : '',
  );
}

/** The same basis for every section's count: the records read, out of the log's. */
function counts() {
  return sectionCounts(
    [...state.records.values()],
    state.readFrom,
    state.readTo,
    state.head?.log_start,
    state.head?.log_end,
    state.timeline.size,
    state.logShown,
  );
}

function readNote(c) {
  if (c.complete || !isNum(c.inLog)) return `${fmtInt(c.records)} records read (the whole log)`;
  return `${fmtInt(c.records)} records read of ${fmtInt(c.inLog)} in the log`;
}

// ------------------------------------------------------------------ log

function conflictCell(rec) {
  const cell = el('td', { class: 'conflict' });
  if (rec.rule) cell.append(el('span', { class: 'rule', text: rec.rule }));
  if (isNum(rec.conflicting_version)) {
    cell.append(el('span', { class: 'vs', text: `with v${rec.conflicting_version}` }));
  }
  if (isNum(rec.original_version)) {
    cell.append(el('span', { class: 'vs', text: `original v${rec.original_version}` }));
  }
  if (rec.detail) cell.append(el('div', { class: 'detail', text: rec.detail }));
  return cell;
}

function logRow(rec) {
  const props = rec.commit_properties && typeof rec.commit_properties === 'object' ? rec.commit_properties : {};
  const propText = Object.entries(props)
    .map(([k, v]) => `${k}=${v}`)
    .join('\n');
  const outcome = rec.outcome || '?';
  return el(
    'tr',
    { class: `rec rec-${outcome.toLowerCase()}`, dataset: { offset: String(rec.offset) } },
    el('td', { class: 'num', text: String(rec.offset) }),
    el('td', { class: 'when', title: isoTime(rec.timestamp_ms), text: fmtTime(rec.timestamp_ms) }),
    el('td', {}, outcomeBadge(outcome)),
    el('td', {}, operationChip(rec.operation)),
    el(
      'td',
      { class: 'num delta' },
      el('span', { class: 'plus', text: `+${isNum(rec.adds) ? rec.adds : 0}` }),
      ' ',
      el('span', { class: 'minus', text: `−${isNum(rec.drops) ? rec.drops : 0}` }),
    ),
    el('td', { class: 'writer', title: rec.writer_id || '', text: rec.writer_id || '—' }),
    conflictCell(rec),
    el(
      'td',
      { class: 'commit', title: [rec.commit_id || '', propText].filter(Boolean).join('\n') },
      el('code', { text: rec.commit_id ? rec.commit_id.slice(0, 8) : '—' }),
      propText ? el('span', { class: 'props-mark', text: ` +${Object.keys(props).length} props` }) : null,
    ),
  );
}

function renderLog() {
  const filter = $('log-filter').value;
  const all = [...state.records.values()].sort((a, b) => b.offset - a.offset);
  const matching = all.filter((r) =>
    !filter ? true : filter === 'conflicts' ? r.outcome !== 'ACCEPTED' : r.outcome === filter,
  );
  const shown = matching.slice(0, state.logShown);
  $('log-body').replaceChildren(...shown.map(logRow));
  if (!shown.length) {
    $('log-body').append(el('tr', {}, el('td', { colspan: 8, class: 'muted empty-row', text: 'No records.' })));
  }
  const counts = {};
  for (const r of all) counts[r.outcome] = (counts[r.outcome] || 0) + 1;
  const parts = OUTCOMES.filter((o) => counts[o]).map((o) => `${fmtInt(counts[o])} ${o.toLowerCase()}`);
  setText(
    $('log-counts'),
    `${fmtInt(shown.length)} of ${fmtInt(matching.length)} shown · ${readNote(counts())}` +
      (parts.length ? ` · ${parts.join(', ')}` : ''),
  );
  $('log-older').hidden = !(matching.length > shown.length || state.moreOnServer);
}

// ------------------------------------------------------------------ history

function takeRecords(records) {
  let changed = false;
  for (const rec of records) {
    if (!isNum(rec.offset)) continue;
    state.records.set(rec.offset, rec);
    changed = true;
    state.newestOffset = Math.max(state.newestOffset, rec.offset);
    state.oldestOffset = state.oldestOffset === null ? rec.offset : Math.min(state.oldestOffset, rec.offset);
    if (rec.outcome === 'ACCEPTED') {
      if (isNum(rec.live_segments)) {
        state.points.set(rec.offset, {
          ts: rec.timestamp_ms,
          segments: rec.live_segments,
          rows: rec.live_rows,
          bytes: rec.live_bytes,
        });
      }
      addToTimeline(rec.offset, rec.timestamp_ms, rec.operation, rec.adds, rec.drops, false);
    }
  }
  return changed;
}

function takeWindow(body) {
  if (isNum(body.from)) state.readFrom = state.readFrom === null ? body.from : Math.min(state.readFrom, body.from);
  if (isNum(body.to)) state.readTo = state.readTo === null ? body.to : Math.max(state.readTo, body.to);
}

function redrawFromRecords() {
  drawVersionPlots();
  drawMinutePlots();
  renderLog();
  renderTimelineCount();
}

async function loadHistory() {
  const body = await api(`${API}/history?limit=${HISTORY_LIMIT}`);
  const records = (body.records || []).slice().sort((a, b) => a.offset - b.offset);
  state.moreOnServer = isNum(body.from) && isNum(state.head?.log_start) ? body.from > state.head.log_start : records.length >= HISTORY_LIMIT;
  takeRecords(records);
  takeWindow(body);
  if (isNum(body.to)) state.newestOffset = Math.max(state.newestOffset, body.to - 1);
  redrawFromRecords();
}

let historyBusy = false;
let historyAgain = false;
/** Reads the records after the newest one read (incrementally, page by page). */
async function loadNewerHistory() {
  if (historyBusy) {
    historyAgain = true;
    return;
  }
  historyBusy = true;
  try {
    let changed = false;
    for (let page = 0; page < 10; page++) {
      const from = state.newestOffset + 1;
      const body = await api(`${API}/history?from=${from}&limit=1000`);
      const records = body.records || [];
      if (takeRecords(records)) changed = true;
      takeWindow(body);
      if (isNum(body.to)) state.newestOffset = Math.max(state.newestOffset, body.to - 1);
      if (!records.length || !isNum(body.next_from) || body.next_from <= from) break;
    }
    if (changed) redrawFromRecords();
  } catch (err) {
    // the periodic poll tries again; a 401 is reported by api()
  } finally {
    historyBusy = false;
    if (historyAgain) {
      historyAgain = false;
      setTimeout(loadNewerHistory, 300);
    }
  }
}

async function loadOlderHistory() {
  const filterMatches = [...state.records.values()].length;
  if (state.logShown < filterMatches) {
    state.logShown += LOG_PAGE;
    renderLog();
    return;
  }
  if (!state.moreOnServer || state.oldestOffset === null) return;
  try {
    const body = await api(`${API}/history?to=${state.oldestOffset}&limit=${LOG_PAGE * 2}`);
    const records = body.records || [];
    takeRecords(records);
    takeWindow(body);
    state.moreOnServer = records.length > 0 && isNum(body.from) && body.from > (state.head?.log_start ?? 0);
    state.logShown += LOG_PAGE;
    redrawFromRecords();
  } catch (err) {
    if (err.status !== 401) showBanner(`Could not read older records: ${err.message}`);
  }
}

// ------------------------------------------------------------------ live events

let historyTimer = null;
let headTimer = null;

function debounce(kind, fn, ms) {
  if (kind === 'history') {
    if (historyTimer === null) historyTimer = setTimeout(() => ((historyTimer = null), fn()), ms);
  } else if (headTimer === null) {
    headTimer = setTimeout(() => ((headTimer = null), fn()), ms);
  }
}

function onVersion(ev) {
  if (ev.table && ev.table !== TABLE) return;
  const head = state.head;
  if (!isNum(ev.version)) return;
  if (isNum(head.version) && ev.version <= head.version) {
    // already known from the head or history; still make sure the timeline has it
    addToTimeline(ev.version, ev.timestamp_ms, ev.operation, ev.added?.length, ev.dropped?.length, false);
    return;
  }
  const added = Array.isArray(ev.added) ? ev.added.length : 0;
  const dropped = Array.isArray(ev.dropped) ? ev.dropped.length : 0;
  const exact = ev.prev_version === head.version || !isNum(head.version) || head.version < 0;
  head.version = ev.version;
  head.timestamp_ms = ev.timestamp_ms;
  head.live_segments = (isNum(head.live_segments) ? head.live_segments : 0) + added - dropped;
  if (isNum(ev.rows_delta)) head.live_rows = (isNum(head.live_rows) ? head.live_rows : 0) + ev.rows_delta;
  if (isNum(ev.bytes_delta)) head.live_bytes = (isNum(head.live_bytes) ? head.live_bytes : 0) + ev.bytes_delta;
  renderHead();
  flash($('head-version'));
  document.title = `segcat · ${TABLE} · v${ev.version}`;
  addToTimeline(ev.version, ev.timestamp_ms, ev.operation, added, dropped, true);
  if (exact && isNum(ev.rows_delta) && isNum(ev.bytes_delta)) {
    state.points.set(ev.version, {
      ts: ev.timestamp_ms,
      segments: head.live_segments,
      rows: head.live_rows,
      bytes: head.live_bytes,
    });
    drawVersionPlots();
  }
  debounce('history', loadNewerHistory, 1000);
  // lag, log end, tombstones, properties, schema: from the exact head, a little later
  debounce('head', () => loadHead().catch(() => {}), exact ? 2000 : 300);
}

// ------------------------------------------------------------------ diff

function segmentTable(segments, total, what) {
  const shown = segments.slice(0, DIFF_MAX);
  const wrap = el('div', { class: 'diff-side' });
  wrap.append(
    el(
      'h3',
      {},
      `${what} `,
      el('span', { class: 'muted', text: total > shown.length ? `(${fmtInt(shown.length)} of ${fmtInt(total)} shown)` : `(${fmtInt(total)})` }),
    ),
  );
  if (!shown.length) {
    wrap.append(el('p', { class: 'muted', text: 'none' }));
    return wrap;
  }
  wrap.append(
    el(
      'div',
      { class: 'table-wrap diff-wrap' },
      el(
        'table',
        { class: 'grid compact' },
        el(
          'thead',
          {},
          el('tr', {}, el('th', { text: 'segment' }), el('th', { text: 'path' }), el('th', { class: 'num', text: 'rows' }), el('th', { class: 'num', text: 'bytes' })),
        ),
        el(
          'tbody',
          {},
          shown.map((s) =>
            el(
              'tr',
              {},
              el('td', {}, el('code', { text: s.segment_id })),
              el('td', { class: 'path', title: s.path, text: s.path }),
              el('td', { class: 'num', text: fmtInt(s.row_count) }),
              el('td', { class: 'num', title: `${fmtInt(s.size_bytes)} bytes`, text: fmtBytes(s.size_bytes) }),
            ),
          ),
        ),
      ),
    ),
  );
  return wrap;
}

async function runDiff(event) {
  if (event) event.preventDefault();
  const from = $('diff-from').value.trim();
  const to = $('diff-to').value.trim();
  const out = $('diff-result');
  if (from === '' || to === '') return;
  out.replaceChildren(el('p', { class: 'muted', text: 'comparing…' }));
  try {
    const body = await api(`${API}/diff?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`);
    const load = body.load || [];
    const unload = body.unload || [];
    out.replaceChildren(
      el('p', { class: 'diff-summary', text: `v${body.from_version} → v${body.to_version}` }),
      el(
        'div',
        { class: 'diff-sides' },
        segmentTable(load, isNum(body.load_count) ? body.load_count : load.length, 'load'),
        segmentTable(unload, isNum(body.unload_count) ? body.unload_count : unload.length, 'unload'),
      ),
    );
  } catch (err) {
    out.replaceChildren(el('p', { class: 'error-text', text: `${err.kind}: ${err.message}` }));
  }
}

function defaultDiff() {
  const versions = [...state.timeline.keys()].sort((a, b) => b - a);
  if (!versions.length) return;
  $('diff-to').value = String(versions[0]);
  $('diff-from').value = String(versions[Math.min(5, versions.length - 1)]);
  runDiff();
}

// ------------------------------------------------------------------ start

async function start() {
  setText($('table-name'), TABLE);
  setText($('crumb-table'), TABLE);
  document.title = `segcat · ${TABLE}`;
  $('diff-form').addEventListener('submit', runDiff);
  $('log-filter').addEventListener('change', () => {
    state.logShown = LOG_PAGE;
    renderLog();
  });
  $('log-older').addEventListener('click', loadOlderHistory);
  initPlots();
  try {
    await loadHead();
  } catch (err) {
    return;
  }
  try {
    await loadHistory();
  } catch (err) {
    if (err.status !== 401) showBanner(`Could not read the table's history: ${err.message}`);
  }
  defaultDiff();
  const since = isNum(state.head.version) && state.head.version >= 0 ? `?from=${state.head.version}` : '';
  state.events = openEvents(`${API}/events${since}`, onVersion);
  setInterval(() => {
    if (authNeeded) return;
    loadHead().catch(() => {});
    loadNewerHistory();
  }, POLL_MS);
}

start();
