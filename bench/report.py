"""Markdown for docs/BENCHMARKS.md, shared by every benchmark: formats, tables, the section head.

Each benchmark owns one section between ``<!-- <name>:start -->`` and ``<!-- <name>:end -->``;
``update_section`` replaces only that one, so the benchmarks share the file. A section is a
pure function of a results JSON, so it can be rendered again from a saved run (``--render``).
The head every section starts with (when, which command, which results file, which machine)
and the targets table are built here, so all sections cite them the same way.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

DOC_HEADER = """# Benchmarks

Measured figures for segcat, one section per benchmark. Each section is written by the
benchmark script named in it (between its `<!-- …:start -->` / `<!-- …:end -->` markers);
edit the script, not the section. Raw results are kept under `bench/results/` (git-ignored).
"""

QUICK_BANNER = "> **Quick (smoke-test) mode: reduced counts; these are not the reference figures.**"
MET = {True: "yes", False: "**no**", None: "–"}


def update_section(doc: Path, name: str, body: str) -> None:
    """Replace (or append) the ``name`` section of ``doc``; every other byte of the file is kept."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body.strip()}\n{end}\n"
    text = doc.read_text() if doc.exists() else DOC_HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end) + r"\n?", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    doc.parent.mkdir(parents=True, exist_ok=True)
    tmp = doc.with_name(f".{doc.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(doc)


# --------------------------------------------------------------------------- numbers


def ms(
    value: float | None, *, fine: int = 2, mid: int = 2, seconds_from: float | None = None, unit: str = " ms"
) -> str:
    """A duration in ms: ``fine`` decimals below 10, ``mid`` below 100, whole ms (thousands
    separated) from 100 on, and seconds with one decimal from ``seconds_from`` on; "–" if missing."""
    if value is None or math.isnan(value):
        return "–"
    if seconds_from is not None and value >= seconds_from:
        return f"{value / 1000:,.1f} s"
    if value >= 100:
        return f"{value:,.0f}{unit}"
    return f"{value:,.{fine if value < 10 else mid}f}{unit}"


def count(value: float) -> str:
    return f"{value:,.0f}"


def mb(n: float | None) -> str:
    return "–" if n is None else f"{n / 1e6:,.1f} MB"


def ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None or b == 0 else f"{a / b:.1f}×"


def size_label(n: int | str) -> str:
    """1000 → "1k", 1000000 → "1M", others as they are."""
    n = int(n)
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def get(node: Any, *path: str) -> Any:
    """``node[path[0]][path[1]]…``, or None where the results lack a part (a scenario not run)."""
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


# --------------------------------------------------------------------------- blocks


def row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> list[str]:
    """A Markdown table; ``align`` has a letter per column (l, r, c), default: first left, rest right."""
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    align = align or "l" + "r" * (len(header) - 1)
    return [row(header), row(marks[a] for a in align), *(row(r) for r in rows)]


def bullets(items: Iterable[str]) -> list[str]:
    return [f"- {item}" for item in items]


def head(results: dict[str, Any], title: str, scope: str, rows: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Title, when and how it was measured (command, results file) and the machine table, with
    the benchmark's own ``rows`` (peers, engines) among the software."""
    env = results["environment"]
    pk = env["packages"]
    finished = results.get("finished_utc")
    load = ", ".join(f"{v:.2f}" for v in env["loadavg_at_start"]) + " at start"
    if results.get("loadavg_at_end"):
        load += "; " + ", ".join(f"{v:.2f}" for v in results["loadavg_at_end"]) + " at end"
    machine = [
        ("CPU", f"{env['cpu']}, `nproc` = {env['nproc']}"),
        ("Memory (`free -h`)", env["memory"]),
        ("Kernel", env["kernel"]),
        ("Python", env["python"]),
        ("Java", env["java"].replace('"', "")),
        ("Kafka", env["kafka"]),
        (
            "Clients",
            f"confluent-kafka {pk['confluent-kafka']} (librdkafka {env['librdkafka']}), fastavro "
            f"{pk['fastavro']}",
        ),
        *rows,
        ("Tree", env["git"]),
        ("Load average (1, 5, 15 min)", load),
    ]
    if rss := results.get("peak_rss_mb"):
        machine.append(
            (
                "Peak RSS",
                f"benchmark process {rss['benchmark_process']:,} MB, largest child process "
                f"{rss['largest_child_process']:,} MB",
            )
        )
    if (waited := results.get("waited_for_others")) is not None:
        others = waited["still_running"]
        machine.append(
            (
                "Other benchmarks",
                f"still running after waiting {waited['waited_s']} s: {', '.join(others)}"
                if others
                else f"none running (waited {waited['waited_s']} s)",
            )
        )
    return [
        f"## {title}",
        "",
        *([QUICK_BANNER, ""] if results.get("mode") == "quick" else []),
        f"Measured {env['date_utc']}{f' → {finished}' if finished else ''} on one machine, {scope} "
        f"(`{results['results_file']}` holds every sample). Reproduce from the repository root, with the "
        "local stack running or startable (`segcat stack up`):",
        "",
        "```sh",
        results["command"],
        "```",
        "",
        "### Machine and software",
        "",
        *table(("", ""), machine, "ll"),
    ]


# --------------------------------------------------------------------------- targets


def target(what: str, measured: float | None, limit: float, unit: str) -> dict[str, Any]:
    """One target: met when ``measured`` is at most ``limit`` for durations (``unit`` "ms"), at
    least ``limit`` for rates and ratios; ``met`` is None when the figure was not measured."""
    higher = unit != "ms"
    met = None if measured is None else (measured >= limit if higher else measured <= limit)
    return {"target": what, "measured": measured, "limit": limit, "unit": unit, "met": met}


def _value(value: float | None, unit: str, fmt: Any) -> str:
    if value is None:
        return "–"
    if unit == "ms":
        return str(fmt(value))
    return f"{value:.1f}×" if unit == "×" else f"{value:,.0f} {unit}"


def _limit(t: dict[str, Any], fmt: Any) -> str:
    return ("≤ " if t["unit"] == "ms" else "≥ ") + _value(t["limit"], t["unit"], fmt)


def targets_table(targets: Iterable[dict[str, Any]], fmt: Any = ms) -> list[str]:
    """The targets as a table; ``fmt`` formats durations the way the rest of the section does."""
    rows = [
        (t["target"], _limit(t, fmt), _value(t["measured"], t["unit"], fmt), MET[t["met"]]) for t in targets
    ]
    return table(("Target", "Limit", "Measured", "Met?"), rows, "lrrc")


def targets_text(targets: Iterable[dict[str, Any]], fmt: Any = ms) -> str:
    """The targets for the terminal, one line each."""
    marks = {True: "met    ", False: "NOT met", None: "–      "}
    return "\n".join(
        f"{marks[t['met']]}  {t['target']}: {_value(t['measured'], t['unit'], fmt)} ({_limit(t, fmt)})"
        for t in targets
    )


# --------------------------------------------------------------------------- profiles


def profile_table(prof: dict[str, Any] | None, key: str = "by_cumulative_time", top: int = 10) -> list[str]:
    """Rows of a cProfile summary (``runner.summarize_profile``): calls, own and cumulative ms."""
    rows = [
        (f"`{r['function']}`", f"{r['ncalls']:,}", f"{r['tottime_ms']:,.1f}", f"{r['cumtime_ms']:,.1f}")
        for r in (prof or {}).get(key, [])[:top]
    ]
    return table(("function", "calls", "own ms", "cumulative ms"), rows) if rows else []
