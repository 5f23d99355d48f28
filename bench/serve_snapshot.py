"""A snapshot of many live segments over HTTP, JSON pages against one Arrow stream
(``bench.serve``'s ``snapshot`` scenario), and the route's steps redone in-process."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench.read_processes import make_segment
from bench.runner import Results, progress, summary
from bench.serve_services import Services, scrape
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import table_name

if TYPE_CHECKING:  # the run's parameters; bench.serve imports this module
    from bench.serve import Params


ARROW = "application/vnd.apache.arrow.stream"


def build_snapshot_table(services: Services, table: str, segments: int, per_commit: int) -> Results:
    from segcat import load_catalog

    commit_ms: list[float] = []
    version = -1
    with load_catalog(services.config).load_table(table, writer_id="bench-serve-snapshot") as writer:
        for start in range(0, segments, per_commit):
            batch = [make_segment("snap", i) for i in range(start, min(start + per_commit, segments))]
            began = time.perf_counter()
            version = writer.append(batch)
            commit_ms.append((time.perf_counter() - began) * 1000)
    began = time.perf_counter()
    services.wait_materialized(table, version, 300)
    from segcat.catalog.storage.redis import RedisStore

    head = RedisStore.from_config(services.config).head(table)
    return {
        "keyframe_version": None if head is None else head.keyframe_version,
        "commits": len(commit_ms),
        "per_commit": per_commit,
        "append_median_ms": round(statistics.median(commit_ms), 1),
        "version": version,
        "materialized_after_s": round(time.perf_counter() - began, 2),
    }


def snapshot_scenario(services: Services, table: str, p: Params) -> Results:
    import httpx
    import pyarrow as pa

    name = table_name(table).qualified
    progress(f"building {name}: {p.snapshot_segments:,} live segments in commits of {p.per_commit:,}")
    built = build_snapshot_table(services, table, p.snapshot_segments, p.per_commit)
    time.sleep(2.0)
    base = f"{services.url}/api/tables/{name}/snapshot"
    http = httpx.Client(timeout=120.0)
    full_limit = max(p.snapshot_segments, 1_000)

    def json_full() -> tuple[int, int, dict[str, Any]]:
        answer = http.get(base, params={"limit": full_limit})
        answer.raise_for_status()
        body = answer.content
        return 1, len(body), {"body": body}

    def json_page() -> tuple[int, int, dict[str, Any]]:
        answer = http.get(base)
        answer.raise_for_status()
        return 1, len(answer.content), {"body": answer.content}

    def json_paged() -> tuple[int, int, dict[str, Any]]:
        url: str | None = f"{base}?limit={p.json_page}"
        requests = size = 0
        bodies = []
        while url is not None:
            answer = http.get(url if url.startswith("http") else f"{services.url}{url}")
            answer.raise_for_status()
            requests += 1
            size += len(answer.content)
            bodies.append(answer.content)
            url = json.loads(answer.content)["next"]  # needed to go on: part of the request time
        return requests, size, {"bodies": bodies}

    def arrow() -> tuple[int, int, dict[str, Any]]:
        answer = http.get(base, headers={"Accept": ARROW})
        answer.raise_for_status()
        return 1, len(answer.content), {"body": answer.content, "headers": dict(answer.headers)}

    def decode_json(found: dict[str, Any]) -> int:
        if "bodies" in found:
            return sum(len(json.loads(b)["segments"]) for b in found["bodies"])
        return len(json.loads(found["body"])["segments"])

    def decode_arrow(found: dict[str, Any]) -> int:
        return int(pa.ipc.open_stream(found["body"]).read_all().num_rows)

    variants: dict[
        str, tuple[Callable[[], tuple[int, int, dict[str, Any]]], Callable[[dict[str, Any]], int]]
    ] = {
        "json_all": (json_full, decode_json),
        "json_default_page": (json_page, decode_json),
        "json_paged": (json_paged, decode_json),
        "arrow": (arrow, decode_arrow),
    }
    samples: dict[str, dict[str, list[float]]] = {k: {"request": [], "decode": []} for k in variants}
    facts: dict[str, dict[str, Any]] = {}
    metrics_before = scrape(services.url)
    for round_ in range(p.snapshot_reps + 1):
        for key, (fetch, decode) in variants.items():
            services.check_alive()
            began = time.perf_counter()
            requests, size, found = fetch()
            fetched = time.perf_counter()
            rows = decode(found)
            decoded = time.perf_counter()
            if round_ == 0:  # warm-up round: checks and facts only
                facts[key] = {"requests": requests, "bytes": size, "rows": rows}
                if key == "json_all":
                    first = json.loads(found["body"])
                    facts[key].update(
                        origin=first["origin"],
                        version=first["version"],
                        live_segments=first["live_segments"],
                        next=first["next"],
                    )
                if key == "arrow":
                    headers = found["headers"]
                    facts[key].update(
                        content_type=headers.get("content-type"),
                        version=headers.get("x-segcat-version"),
                        live_segments=headers.get("x-segcat-live-segments"),
                        columns=pa.ipc.open_stream(found["body"]).schema.names,
                    )
                continue
            samples[key]["request"].append((fetched - began) * 1000)
            samples[key]["decode"].append((decoded - fetched) * 1000)
            del found
    metrics_after = scrape(services.url)
    http.close()
    out: Results = {"table": name, "segments": p.snapshot_segments, "build": built, "variants": {}}
    for key in variants:
        req, dec = samples[key]["request"], samples[key]["decode"]
        total = [a + b for a, b in zip(req, dec, strict=True)]
        out["variants"][key] = {
            **facts[key],
            "request": summary(req),
            "decode": summary(dec),
            "total": summary(total),
        }
    out["server_histogram"] = {
        k: metrics_after[k] - metrics_before.get(k, 0) for k in metrics_after if "request_seconds" in k
    }
    out["full_limit"] = full_limit
    out["paged_limit"] = p.json_page
    out["server_steps"] = server_steps(services.config, name, full_limit, p.snapshot_reps)
    return out


def server_steps(config: Config, name: str, limit: int, reps: int) -> Results:
    """The snapshot route's steps redone in this process, as ``tables_api.snapshot`` runs them
    (medians): where the server's time goes. Not the server's own timings: no HTTP, no threads."""
    import pyarrow as pa

    from segcat.catalog.protocol.jsonio import dumps
    from segcat.catalog.read import snapshot_json
    from segcat.catalog.read.table import Tables

    opened = Tables(config).open(name)  # the server's read side, as `segcat serve` holds it
    steps: dict[str, list[float]] = {}

    def clock(label: str, began: float) -> float:
        now = time.perf_counter()
        steps.setdefault(label, []).append((now - began) * 1000)
        return now

    sizes: dict[str, int] = {}
    for round_ in range(reps + 1):
        t = time.perf_counter()
        snap = opened.snapshot(None, None)
        t = clock(SNAPSHOT_STEP, t)
        page = snap.segment_page(None, limit)
        t = clock(f"JSON: `segment_page(None, {limit:,})` (Avro-decodes each segment to a `Segment`)", t)
        shown = snapshot_json.document(snap, page)
        t = clock("JSON: `snapshot_json.document` (`segment_to_json` and `added_version` per segment)", t)
        body = dumps(shown).encode()
        t = clock("JSON: `jsonio.dumps` of the document", t)
        segments = snap.segments
        schema = segments.schema.with_metadata(snapshot_json.arrow_metadata(snap))
        t = clock("Arrow: `snap.segments` and the schema's metadata", t)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_table(segments.replace_schema_metadata(schema.metadata))
        data = sink.getvalue().to_pybytes()
        clock("Arrow: IPC stream write + `to_pybytes`", t)
        if round_ == 0:
            steps.clear()
            sizes = {"json_segments_bytes": len(body), "arrow_bytes": len(data)}
        del snap, page, shown, body, segments, data
    medians = {k: round(statistics.median(v), 2) for k, v in steps.items()}
    return {
        "median_ms": medians,
        "json_route_ms": round(
            sum(v for k, v in medians.items() if k.startswith("JSON") or k == SNAPSHOT_STEP), 1
        ),
        "arrow_route_ms": round(
            sum(v for k, v in medians.items() if k.startswith("Arrow") or k == SNAPSHOT_STEP), 1
        ),
        **sizes,
    }


SNAPSHOT_STEP = "both: `table.snapshot()` (Redis key frame + deltas)"
