"""Markdown tables for docs/BENCHMARKS.md and for each run's report, shared by every benchmark.

Benchmarks render tables, never sentences about their figures: the prose of docs/BENCHMARKS.md
is written by hand outside the rendered blocks and says nothing a rerun could falsify. Each
benchmark owns one block between ``<!-- <name>:start -->`` and ``<!-- <name>:end -->``;
``update_section`` replaces only that one, so the benchmarks share the file. A block is a pure
function of a results JSON, so it can be rendered again from a saved run (``--render``). The run
table every block starts with (command, when, machine, results file) is built here, so all
blocks cite a run the same way.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

DOC_HEADER = "# Benchmarks\n"
QUICK_BANNER = "> **Quick (smoke-test) mode: reduced counts; these are not the reference figures.**"
MET = {True: "yes", False: "**no**", None: "–"}


def update_section(doc: Path, name: str, body: str) -> None:
    """Replace the ``name`` block of ``doc`` (appended under a ``## name`` heading when the doc has
    none yet); every other byte of the file is kept."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body.strip()}\n{end}\n"
    text = doc.read_text() if doc.exists() else DOC_HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end) + r"\n?", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + f"\n\n## {name}\n\n" + block
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


def get(node: Any, *path: str | int) -> Any:
    """``node[path[0]][path[1]]…`` (an int indexes a list), or None where the results lack a
    part (a scenario not run)."""
    for key in path:
        in_list = isinstance(key, int) and isinstance(node, list) and -len(node) <= key < len(node)
        if not (in_list or (isinstance(node, dict) and key in node)):
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


def run_table(results: dict[str, Any], rows: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The run a block's figures come from, as one table: the command that reproduces it, when,
    on which machine and software (with the benchmark's own ``rows``: peers, engines), the tree,
    the load and the results file holding every sample."""
    env = results["environment"]
    pk = env["packages"]
    finished = results.get("finished_utc")
    load = f"{env['loadavg_at_start'][0]:.2f} at start"
    if results.get("loadavg_at_end"):
        load += f", {results['loadavg_at_end'][0]:.2f} at end"
    java = env["java"].replace('"', "")
    software = (
        f"{env['python']}, {java}; Kafka {env['kafka']}; confluent-kafka "
        f"{pk['confluent-kafka']} (librdkafka {env['librdkafka']}), fastavro {pk['fastavro']}"
    )
    cells = [
        ("Command", f"`{results['command']}`"),
        ("Measured", f"{env['date_utc']}{f' → {finished}' if finished else ''}"),
        ("Machine", f"{env['cpu']}, {env['nproc']} CPUs, {env['memory']}; {env['kernel']}"),
        ("Software", software),
        *rows,
        ("Tree", env["git"]),
        ("Load average (1 min)", load),
    ]
    if (waited := results.get("waited_for_others")) is not None and waited["still_running"]:
        cells.append(("Other benchmarks running", ", ".join(waited["still_running"])))
    report = Path(results["results_file"]).with_suffix(".md")
    cells.append(("Results", f"`{results['results_file']}` (every sample), `{report}` (every table)"))
    return [*([QUICK_BANNER, ""] if results.get("mode") == "quick" else []), *table(("Run", ""), cells, "ll")]


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
