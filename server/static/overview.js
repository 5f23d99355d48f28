// segcat dashboard, overview (/): the tables in pages of /api/tables (name order; "Load more"
// adds the next page), live from /api/events, rates and lag read again every 5 s for the pages
// loaded. ?namespace=NS shows one namespace, ?limit=N sets the page size.
'use strict';

const REFRESH_MS = 5000;
const PARAMS = new URLSearchParams(window.location.search);
const NAMESPACE = PARAMS.get('namespace') || null;
const PAGE_LIMIT = PARAMS.get('limit') || null;
/** Pages the user has loaded; a refresh reads them again, from the first. */
let pagesWanted = 1;
/** The name of the last table loaded when more pages follow (null: every table is loaded). */
let lastLoaded = null;

/** table name -> {head, row, cells}; head is the last TableHead, advanced by events. */
const tables = new Map();
let refetchTimer = null;
let fetching = null;
let loaded = false;

function tableUrl(name) {
  return `/tables/${encodeURIComponent(name)}`;
}

function perMinute(activity, key) {
  if (!activity || !isNum(activity[key])) return null;
  const windowS = isNum(activity.window_s) && activity.window_s > 0 ? activity.window_s : 60;
  return (activity[key] * 60) / windowS;
}

function buildRow(name) {
  const cells = {
    name: el('a', { href: tableUrl(name), class: 'table-link', text: name }),
    flags: el('span', { class: 'flags' }),
    version: el('td', { class: 'num version' }),
    segments: el('td', { class: 'num segments' }),
    rows: el('td', { class: 'num rows' }),
    bytes: el('td', { class: 'num bytes' }),
    ago: el('span', { class: 'ago' }),
    commits: el('td', { class: 'num commits' }),
    conflicts: el('td', { class: 'num conflicts' }),
    lag: el('td', { class: 'num lag' }),
  };
  const row = el(
    'tr',
    { dataset: { table: name } },
    el('td', { class: 'name' }, cells.name, cells.flags),
    cells.version,
    cells.segments,
    cells.rows,
    cells.bytes,
    el('td', { class: 'when' }, cells.ago),
    cells.commits,
    cells.conflicts,
    cells.lag,
  );
  return { row, cells, head: null };
}

function render(entry) {
  const { head, cells, row } = entry;
  setText(cells.version, isNum(head.version) && head.version >= 0 ? String(head.version) : '—');
  cells.version.title = isNum(head.log_end) ? `log end: offset ${head.log_end}` : '';
  setText(cells.segments, fmtInt(head.live_segments));
  cells.rows.title = isNum(head.live_rows) ? `${fmtInt(head.live_rows)} rows` : '';
  setText(cells.rows, fmtCount(head.live_rows));
  cells.bytes.title = isNum(head.live_bytes) ? `${fmtInt(head.live_bytes)} bytes` : '';
  setText(cells.bytes, fmtBytes(head.live_bytes));
  setAgo(cells.ago, head.timestamp_ms);

  const commits = perMinute(head.activity, 'commits');
  const conflicts = perMinute(head.activity, 'conflicts');
  setText(cells.commits, fmtRate(commits));
  setText(cells.conflicts, fmtRate(conflicts));
  cells.conflicts.classList.toggle('warn', isNum(conflicts) && conflicts > 0);
  if (head.activity) {
    const parts = [];
    for (const [k, v] of Object.entries(head.activity.by_operation || {})) parts.push(`${k}: ${v}`);
    for (const [k, v] of Object.entries(head.activity.by_outcome || {})) parts.push(`${k}: ${v}`);
    cells.commits.title = `last ${head.activity.window_s ?? 60} s — ${parts.join(', ') || 'nothing'}`;
    cells.conflicts.title = cells.commits.title;
  }

  const lag = head.materializer_lag;
  setText(cells.lag, isNum(lag) ? fmtInt(lag) : '—');
  cells.lag.title = isNum(lag) ? `${fmtInt(lag)} log records behind` : 'no materialized head in Redis';
  cells.lag.classList.toggle('warn', isNum(lag) && lag > 0 && lag <= 100);
  cells.lag.classList.toggle('bad', isNum(lag) && lag > 100);

  cells.flags.replaceChildren();
  if (head.dropped) cells.flags.append(el('span', { class: 'badge dropped', text: 'dropped' }));
  if (head.error) cells.flags.append(el('span', { class: 'badge error-badge', title: head.error, text: 'error' }));
  else if (!isNum(head.version)) cells.flags.append(el('span', { class: 'badge muted-badge', text: 'not materialized' }));
  row.classList.toggle('is-dropped', Boolean(head.dropped));
}

function applyFilter() {
  const needle = document.getElementById('filter').value.trim().toLowerCase();
  for (const [name, entry] of tables) entry.row.hidden = Boolean(needle) && !name.toLowerCase().includes(needle);
}

function updateSummary() {
  let rows = 0;
  let bytes = 0;
  let segments = 0;
  for (const { head, row } of tables.values()) {
    if (head.dropped || row.hidden) continue;
    rows += isNum(head.live_rows) ? head.live_rows : 0;
    bytes += isNum(head.live_bytes) ? head.live_bytes : 0;
    segments += isNum(head.live_segments) ? head.live_segments : 0;
  }
  const shown = [...tables.values()].filter((entry) => !entry.row.hidden).length;
  const count = shown === tables.size ? fmtInt(tables.size) : `${fmtInt(shown)} of ${fmtInt(tables.size)}`;
  setText(
    document.getElementById('summary'),
    `${count} table${tables.size === 1 ? '' : 's'} · ${fmtInt(segments)} segments · ` +
      `${fmtCount(rows)} rows · ${fmtBytes(bytes)}${lastLoaded === null ? '' : ' · more tables not loaded'}`,
  );
  const empty = document.getElementById('empty');
  empty.hidden = tables.size > 0;
  setText(empty, loaded ? 'No tables yet.' : 'Loading the tables…');
}

/** Merges a fetched head: events may already have moved a table past its materialized head. */
function merge(entry, fetched) {
  const known = entry.head;
  if (known && isNum(known.version) && (!isNum(fetched.version) || fetched.version < known.version)) {
    entry.head = {
      ...fetched,
      version: known.version,
      timestamp_ms: known.timestamp_ms,
      live_segments: known.live_segments,
      live_rows: known.live_rows,
      live_bytes: known.live_bytes,
    };
  } else {
    entry.head = fetched;
  }
}

function pageUrl(cursor) {
  const query = new URLSearchParams();
  if (NAMESPACE) query.set('namespace', NAMESPACE);
  if (PAGE_LIMIT) query.set('limit', PAGE_LIMIT);
  if (cursor) query.set('cursor', cursor);
  const text = query.toString();
  return text ? `/api/tables?${text}` : '/api/tables';
}

/** The pages loaded so far, read again in order: their heads, and the cursor of the next page. */
async function readPages() {
  const heads = [];
  let cursor = null;
  for (let page = 0; page < pagesWanted; page += 1) {
    const body = await api(pageUrl(cursor));
    heads.push(...(body.tables || []));
    cursor = body.next || null;
    if (!cursor) break;
  }
  return { heads, next: cursor };
}

/** Name order of the server: namespace, then table. */
function nameOrder(a, b) {
  const [na, ta] = splitName(a);
  const [nb, tb] = splitName(b);
  if (na !== nb) return na < nb ? -1 : 1;
  if (ta !== tb) return ta < tb ? -1 : 1;
  return 0;
}

function splitName(name) {
  const dot = name.indexOf('.');
  return [name.slice(0, dot), name.slice(dot + 1)];
}

/** Whether a table the overview does not show would be on the pages loaded. */
function withinLoaded(name) {
  if (NAMESPACE && splitName(name)[0] !== NAMESPACE) return false;
  return lastLoaded === null || nameOrder(name, lastLoaded) < 0;
}

async function refresh() {
  if (fetching) return fetching;
  fetching = (async () => {
    try {
      const { heads, next } = await readPages();
      lastLoaded = next && heads.length ? heads[heads.length - 1].table : null;
      const more = document.getElementById('more');
      more.hidden = !next;
      more.disabled = false;
      const body_ = document.getElementById('tables-body');
      const seen = new Set();
      for (const head of heads) {
        seen.add(head.table);
        let entry = tables.get(head.table);
        if (!entry) {
          entry = buildRow(head.table);
          tables.set(head.table, entry);
        }
        merge(entry, head);
        render(entry);
      }
      loaded = true;
      for (const [name, entry] of tables) {
        if (!seen.has(name)) {
          entry.row.remove();
          tables.delete(name);
        }
      }
      // keep the rows in name order (append moves existing nodes; skipped when nothing moved)
      const rows = heads.map((h) => tables.get(h.table).row);
      const current = body_.children;
      if (current.length !== rows.length || rows.some((row, i) => current[i] !== row)) body_.append(...rows);
      applyFilter();
      updateSummary();
      clearBanner();
    } catch (err) {
      if (err.status !== 401) showBanner(`Could not load the tables: ${err.message}`);
    } finally {
      fetching = null;
    }
  })();
  return fetching;
}

function scheduleRefresh(delayMs) {
  if (refetchTimer !== null) return;
  refetchTimer = setTimeout(() => {
    refetchTimer = null;
    refresh();
  }, delayMs);
}

function onVersion(event) {
  const entry = tables.get(event.table);
  if (!entry) {
    if (loaded && withinLoaded(event.table)) scheduleRefresh(200); // a table created since the list was read
    return;
  }
  const head = { ...entry.head };
  if (isNum(head.version) && isNum(event.version) && event.version <= head.version) return; // already known
  const added = Array.isArray(event.added) ? event.added.length : 0;
  const dropped = Array.isArray(event.dropped) ? event.dropped.length : 0;
  const exact = isNum(head.version) && event.prev_version === head.version;
  head.version = event.version;
  head.timestamp_ms = event.timestamp_ms;
  if (isNum(head.live_segments)) head.live_segments += added - dropped;
  if (isNum(head.live_rows) && isNum(event.rows_delta)) head.live_rows += event.rows_delta;
  if (isNum(head.live_bytes) && isNum(event.bytes_delta)) head.live_bytes += event.bytes_delta;
  entry.head = head;
  render(entry);
  updateSummary();
  flash(entry.row);
  // a gap (or a delta the server could not give) is corrected by the next list
  if (!exact || !isNum(event.rows_delta) || !isNum(event.bytes_delta)) scheduleRefresh(500);
}

document.getElementById('more').addEventListener('click', async (ev) => {
  ev.target.disabled = true;
  pagesWanted += 1;
  if (fetching) await fetching; // a refresh under way read the pages before this one
  refresh();
});

document.getElementById('filter').addEventListener('input', () => {
  applyFilter();
  updateSummary();
});

/** Polls the list every REFRESH_MS, counted from the end of the previous read (a slow list
 * on a big catalog is never asked for twice at once). */
async function poll() {
  await refresh();
  if (!authNeeded) setTimeout(poll, REFRESH_MS);
}

// the event stream opens at once: versions that land while the list loads are not missed (a
// table the list does not have yet asks for the list again)
openEvents('/api/events', onVersion);
poll();
