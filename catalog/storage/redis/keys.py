"""Key names, channels and the Lua scripts: the one place that knows how the cache is laid out.

The ``{<ns.table>}`` hash tag keeps one table's keys in one cluster slot, so the scripts and
MULTI blocks are legal on Redis Cluster too. Versions and offsets are compared inside Lua as
numbers (doubles): exact up to 2**53, far beyond any Kafka offset a table will reach.
"""

from __future__ import annotations

from segcat.catalog.protocol.names import TableName, table_name
from segcat.catalog.protocol.version_change import VersionChange
from segcat.catalog.storage.redis.types import Head

KEY_PREFIX = "segcat"
GLOBAL_CHANNEL = f"{KEY_PREFIX}:versions"
TABLES_KEY = f"{KEY_PREFIX}:tables"

TableRef = str | TableName


def key(table: TableRef, suffix: str) -> str:
    return f"{KEY_PREFIX}:{{{table_name(table).qualified}}}:{suffix}"


def head_key(table: TableRef) -> str:
    return key(table, "head")


def deltas_key(table: TableRef) -> str:
    return key(table, "deltas")


def keyframe_key(table: TableRef) -> str:
    return key(table, "keyframe")


def leases_key(table: TableRef) -> str:
    """Sorted set of version leases: lease id → expiry in server ms (``leases.LeaseStore``)."""
    return key(table, "leases")


def lease_info_key(table: TableRef) -> str:
    """Hash of version leases: lease id → JSON {version, holder, acquired_ms, ttl_ms}."""
    return key(table, "lease-info")


def channel(table: TableRef | None = None) -> str:
    """The table's channel, or the global one for ``None``."""
    return GLOBAL_CHANNEL if table is None else key(table, "versions")


def stream_id(version: int) -> str:
    """Stream id of a version: +1 because Redis refuses the id ``0-0``."""
    return f"{version + 1}-0"


# Which log the keys belong to (docs/PROTOCOL.md §6, *Which log*): the head and the key frame
# carry the log id (the topic id Kafka gave the table's topic) they were written from. A script
# writing for log L first clears the table's head, key frame and stream when either holds
# another log's (or a value from before the binding): the compare-and-sets below then never keep
# a re-created table behind the larger offset or version of the table that had its name before.
# With L = '' (a log without a topic id) nothing is cleared and the field stays empty.
#   KEYS: head, keyframe, deltas.  L: the log id.
_BIND_LUA = """
local function bind(head, keyframe, deltas, log)
  if log == '' then return end
  local has_head = redis.call('EXISTS', head) == 1
  local has_frame = redis.call('EXISTS', keyframe) == 1
  if (has_head and redis.call('HGET', head, 'log_id') ~= log)
      or (has_frame and redis.call('HGET', keyframe, 'log_id') ~= log)
      or (not has_head and not has_frame) then
    redis.call('DEL', head, keyframe, deltas)
  end
end
"""

# One script for every per-record write, so a commit costs one round trip and the head, the
# delta and the notification can never disagree.
#   KEYS: head, deltas, keyframe
#   ARGV[1..8]  head fields in HEAD_FIELDS order (commit_id/timestamp '' = none)
#   ARGV[9]     '1' to append a delta: ARGV[10] stream id, ARGV[11] version, ARGV[12] prev_version,
#               ARGV[13] ts, ARGV[14] value
#   ARGV[15]    event JSON ('' = publish nothing), ARGV[16] table channel, ARGV[17] global channel
#   ARGV[18]    the log id ('' = none)
# Returns {head moved (0/1), delta added (0/1)}.
RECORD_LUA = (
    _BIND_LUA
    + """
bind(KEYS[1], KEYS[3], KEYS[2], ARGV[18])
local moved = 0
local added = 0
local cur = redis.call('HMGET', KEYS[1], 'offset', 'keyframe_version')
if (not cur[1]) or tonumber(cur[1]) < tonumber(ARGV[1]) then
  moved = 1
  if ARGV[9] == '1' then
    local ok = redis.pcall('XADD', KEYS[2], ARGV[10], 'version', ARGV[11], 'prev_version', ARGV[12],
                           'ts', ARGV[13], 'value', ARGV[14])
    if type(ok) == 'table' and ok.err then
      if not string.find(ok.err, 'equal or smaller', 1, true) then
        return redis.error_reply(ok.err)
      end
    else
      added = 1
    end
  end
  local kfv = ARGV[8]
  if cur[2] and tonumber(cur[2]) > tonumber(kfv) then kfv = cur[2] end
  redis.call('HSET', KEYS[1], 'offset', ARGV[1], 'version', ARGV[2], 'commit_id', ARGV[3],
             'timestamp_ms', ARGV[4], 'live_count', ARGV[5], 'live_bytes', ARGV[6], 'live_rows', ARGV[7],
             'keyframe_version', kfv, 'log_id', ARGV[18])
  if ARGV[15] ~= '' then
    redis.call('PUBLISH', ARGV[16], ARGV[15])
    redis.call('PUBLISH', ARGV[17], ARGV[15])
  end
end
return {moved, added}
"""
)

# KEYS: keyframe, head, deltas. ARGV: version, data, sha256, trim MINID ('' = keep deltas), log id.
KEYFRAME_LUA = (
    _BIND_LUA
    + """
bind(KEYS[2], KEYS[1], KEYS[3], ARGV[5])
local cur = redis.call('HGET', KEYS[1], 'version')
if cur and tonumber(cur) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'sha256', ARGV[3], 'data', ARGV[2], 'log_id', ARGV[5])
if redis.call('EXISTS', KEYS[2]) == 1 then
  local kfv = redis.call('HGET', KEYS[2], 'keyframe_version')
  if (not kfv) or tonumber(kfv) < tonumber(ARGV[1]) then
    redis.call('HSET', KEYS[2], 'keyframe_version', ARGV[1])
  end
end
if ARGV[4] ~= '' then redis.call('XTRIM', KEYS[3], 'MINID', ARGV[4]) end
return 1
"""
)


def _opt(value: object | None) -> str:
    return "" if value is None else str(value)


def record_call(
    table: TableRef,
    head: Head,
    *,
    delta: tuple[int, bytes] | None = None,
    event: VersionChange | None = None,
) -> tuple[list[str], list[str | int | bytes]]:
    """The keys and arguments of one record-script call: ``head`` (moved only forward), the
    accepted commit's ``(prev_version, value)`` to append, the event to publish."""
    name = table_name(table)
    args: list[str | int | bytes] = [
        head.offset,
        head.version,
        _opt(head.commit_id),
        _opt(head.timestamp_ms),
        head.live_count,
        head.live_bytes,
        head.live_rows,
        head.keyframe_version,
    ]
    if delta is None:
        args += ["0", "", "", "", "", ""]
    else:
        prev_version, value = delta
        if prev_version >= head.version:
            raise ValueError(f"prev_version {prev_version} must be below version {head.version}")
        args += ["1", stream_id(head.version), head.version, prev_version, _opt(head.timestamp_ms), value]
    args += ["", "", ""] if event is None else [event.to_json(), channel(name), GLOBAL_CHANNEL]
    args.append(_opt(head.log_id))
    return [head_key(name), deltas_key(name), keyframe_key(name)], args
