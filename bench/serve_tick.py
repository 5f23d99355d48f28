"""The materializer's once-a-second tick by the number of tables it follows (``bench.serve``'s
``tick`` scenario): a ``Materializer`` in a thread, its tick timed, commit → notification."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bench.read_processes import make_segment
from bench.runner import Results, percentile, progress, summary
from bench.serve_services import Services

if TYPE_CHECKING:  # the run's parameters; bench.serve imports this module
    from bench.serve import Params


def tick_scenario(services: Services, ns: str, p: Params) -> Results:
    """How the materializer's periodic tick delays notifications, by the number of tables it follows:
    a ``Materializer`` in a thread of this process (the server idle), its ``_tick`` timed, one table
    committed to at the 1-client pace while the others stay idle; commit → Redis notification."""
    from segcat import Catalog, load_catalog
    from segcat.catalog.storage.redis import RedisStore
    from segcat.materializer.service import Materializer
    from segcat.materializer.table_materializer import TableMaterializer

    config = replace(services.config, metrics_port=0)
    catalog = Catalog(config)
    store = RedisStore.from_config(config)
    out: Results = {"commits": p.tick_commits, "pause_s": p.small_pause_s, "runs": {}}
    timings: dict[str, list[float]] = {}
    originals = {
        (Materializer, "_tick"): Materializer._tick,
        (TableMaterializer, "tick"): TableMaterializer.tick,  # Redis checks included
    }

    def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timings.setdefault(label, []).append((time.perf_counter() - began) * 1000)

        return run

    for (owner, attr), fn in originals.items():
        setattr(owner, attr, timed(f"{owner.__name__}.{attr}", fn))
    try:
        plan = [(count, None) for count in p.tick_tables] + [(max(p.tick_tables), "10")]
        for count, fetch_wait in plan:
            prefix = f"{ns}_tick{count}" + ("" if fetch_wait is None else f"w{fetch_wait}")
            run_config = (
                config
                if fetch_wait is None
                else replace(config, kafka={**config.kafka, "fetch.wait.max.ms": fetch_wait})
            )
            names = [f"{prefix}.t{i:03d}" for i in range(count)]
            for name in names:
                catalog.create_table(name)
            services.extra_tables.extend(names)
            progress(f"materializer tick with {count} table(s), fetch.wait.max.ms {fetch_wait or 'default'}")
            timings.clear()
            service = Materializer(
                run_config,
                group_id=f"bench-serve-{prefix}",
                pattern=rf"^segcat\.{prefix}\..*",
                instance_id=f"bench-serve-{prefix}",
            )
            ready = threading.Event()
            thread = threading.Thread(target=service.run, kwargs={"ready": ready.set}, daemon=True)
            thread.start()
            try:
                ready.wait(60)
                with load_catalog(config).load_table(names[0], writer_id="bench-serve-tick") as writer:
                    first = writer.append([make_segment("tick", 0)])
                    services.wait_materialized(names[0], first, 120)
                    arrived: dict[int, int] = {}
                    listening = threading.Event()
                    listener = threading.Thread(
                        target=_listen, args=(store, names[0], arrived, listening), daemon=True
                    )
                    listener.start()
                    if not listening.wait(30):
                        raise RuntimeError("the notification listener did not subscribe")
                    sends: dict[int, int] = {}
                    timings.clear()
                    began = time.perf_counter()
                    for k in range(p.tick_commits):
                        due = began + k * p.small_pause_s
                        if (wait := due - time.perf_counter()) > 0:
                            time.sleep(wait)
                        sent = time.time_ns()
                        sends[writer.append([make_segment("tick", k + 1)])] = sent
                    wall = time.perf_counter() - began
                    deadline = time.monotonic() + 60
                    while max(sends) not in arrived and time.monotonic() < deadline:
                        time.sleep(0.05)
                    window = time.perf_counter() - began  # until the last notification
                    taken = {label: list(values) for label, values in timings.items()}
                    listening.clear()
                    listener.join(10)
                latencies = [(arrived[v] - t) / 1e6 for v, t in sends.items() if v in arrived]
            finally:
                service.stop.set()
                thread.join(60)
            ticks = taken.get("Materializer._tick", [])
            inner = sum(taken.get("TableMaterializer.tick", []))
            key = str(count) if fetch_wait is None else f"{count}, fetch.wait.max.ms={fetch_wait}"
            out["runs"][key] = {
                "tables": count,
                "fetch_wait_max_ms": fetch_wait,
                "commit_to_notification": summary(latencies),
                "missing": len(sends) - len(latencies),
                "ticks": len(ticks),
                "tick": summary(ticks) if ticks else None,
                "tick_share_pct": round(100 * sum(ticks) / 1000 / window, 1),
                "tick_inner_ms_total": round(inner, 1),
                "tick_watermarks_ms_total": round(sum(ticks) - inner, 1),
                "wall_s": round(wall, 2),
                "window_s": round(window, 2),
            }
            tick = out["runs"][key]["tick"] or {}
            progress(
                f"  {count} table(s): tick median {tick.get('median_ms', 0):.0f} ms, commit → notification "
                f"p99 {percentile(sorted(latencies), 99):.1f} ms"
            )
    finally:
        for (owner, attr), fn in originals.items():
            setattr(owner, attr, fn)
    return out


def _listen(store: Any, table: str, arrived: dict[int, int], listening: threading.Event) -> None:
    """Record when each version's notification arrives, until ``listening`` is cleared."""
    with contextlib.closing(store.subscribe(table)) as sub:
        listening.set()
        while listening.is_set():
            event = sub.get(timeout=0.1)
            if event is not None:
                arrived.setdefault(event.version, time.time_ns())
