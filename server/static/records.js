// segcat dashboard: what the table page draws from the log records it read, without the DOM
// (tests run it under node). The page reads a window of the log (the newest records, then more
// on demand); everything here says only what that window proves.
'use strict';

/**
 * Records per minute of broker time, by key, for the minutes the records read cover whole.
 *
 * `records`: the history Records read (any order); `readFrom`: the first offset of the window
 * read; `logStart`: the log's first offset. When records before the window exist, the minute of
 * the oldest record read may hold records that were not read, so it and any earlier minute are
 * left out: a minute is drawn with its whole count or not at all (never 2,000 for a minute that
 * had 20,000). Returns {counts: Map(minuteSeconds -> Map(key -> n)), from: the first minute
 * covered (seconds) or null, partial: whether minutes were left out}.
 */
function minuteCounts(records, readFrom, logStart, keyOf, counted) {
  let oldest = null;
  for (const rec of records) {
    if (typeof rec.timestamp_ms !== 'number') continue;
    if (oldest === null || rec.offset < oldest.offset) oldest = rec;
  }
  const partial = oldest !== null && typeof readFrom === 'number' && readFrom > (logStart || 0);
  const firstWhole = oldest === null ? null : minuteOf(oldest.timestamp_ms) + (partial ? 60 : 0);
  const counts = new Map();
  for (const rec of records) {
    if (typeof rec.timestamp_ms !== 'number' || !counted(rec)) continue;
    const minute = minuteOf(rec.timestamp_ms);
    if (firstWhole !== null && minute < firstWhole) continue;
    const key = keyOf(rec);
    if (!counts.has(minute)) counts.set(minute, new Map());
    const m = counts.get(minute);
    m.set(key, (m.get(key) || 0) + 1);
  }
  return { counts, from: firstWhole, partial };
}

function minuteOf(ms) {
  return Math.floor(ms / 60000) * 60;
}

/**
 * What each section of the page shows, counted on the same basis: the records read.
 * `readFrom`/`readTo`: the window of offsets read ([from, to)); `logStart`/`logEnd`: the log's
 * first and newest offsets; `records`: the records read; `timelineShown`, `logShown`: items on
 * the page. Every count a section states is out of these.
 */
function sectionCounts(records, readFrom, readTo, logStart, logEnd, timelineShown, logShown) {
  const versions = records.filter((r) => r.outcome === 'ACCEPTED').length;
  const inLog = typeof logEnd === 'number' && logEnd >= 0 ? logEnd - (logStart || 0) + 1 : null;
  const span = typeof readFrom === 'number' && typeof readTo === 'number' ? readTo - readFrom : null;
  return {
    records: records.length,
    versions,
    timeline: Math.min(timelineShown, versions),
    log: Math.min(logShown, records.length),
    window: span, // offsets read
    inLog, // offsets in the log
    complete: span !== null && inLog !== null && span >= inLog,
  };
}

if (typeof module !== 'undefined') module.exports = { minuteCounts, sectionCounts };
