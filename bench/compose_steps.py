"""What ``./dev compose`` and ``tests/containers`` add to a run, step by step, on this machine.

    python -m bench.compose_steps --runs 3           # warm: images and Compose already built
    python -m bench.compose_steps --runs 3 --cold    # also from an empty image store and Go cache

Steps: starting a bridge-less engine (when none answers), building Compose v2 from an empty
Go module cache (``--cold``), building every image from an empty image store (``--cold``:
the ``segcat-local/*`` images are removed first, the Debian base included), rebuilding them
on the layer cache, ``up --wait`` with the identity checks, and ``down --volumes``. Medians of
``--runs`` for the repeated steps; a cold step runs once per run too. The figures are printed
as a Markdown table (containers/README.md, "What each step costs"); this is a measuring tool,
not one of the ``bench.runner`` benchmarks.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from containers import compose_cli, compose_stack, engine, images


def _timed(step: Callable[[], object]) -> float:
    started = time.monotonic()
    step()
    return time.monotonic() - started


def _remove_local_images() -> None:
    listed = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", images.PREFIX + "/*"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = [n for n in listed.stdout.split() if n]
    if names:
        subprocess.run(["docker", "rmi", "--force", *names], capture_output=True, check=False)
    subprocess.run(["docker", "image", "prune", "--force"], capture_output=True, check=False)


def _cold_compose_build() -> None:
    with tempfile.TemporaryDirectory(prefix="compose-cold-") as tmp:
        os.environ["GOMODCACHE"], os.environ["GOCACHE"] = f"{tmp}/mod", f"{tmp}/build"
        try:
            compose_cli.build(Path(tmp) / "docker-compose")
        finally:
            subprocess.run(["chmod", "-R", "u+w", tmp], check=False)  # Go's module cache is read-only
            del os.environ["GOMODCACHE"], os.environ["GOCACHE"]


def measure(runs: int, cold: bool) -> dict[str, list[float]]:
    quiet: Callable[[str], None] = lambda _m: None  # noqa: E731
    found: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        found.setdefault(name, []).append(seconds)
        print(f"{name}: {seconds:.1f} s", file=sys.stderr, flush=True)

    if engine.server_version() is not None and not engine.stop():
        print("an engine not started here answers: engine start/stop are not measured", file=sys.stderr)
    for _ in range(runs):
        if engine.server_version() is None:
            note("engine start", _timed(engine.ensure))
        if cold:
            note("Compose v2 build (empty Go cache)", _timed(_cold_compose_build))
            _remove_local_images()
            note("images, empty image store", _timed(lambda: images.build_all(quiet)))
        started = time.monotonic()
        built = images.build_all(quiet)
        note("images, layer cache", time.monotonic() - started)
        started = time.monotonic()
        compose_stack.up(quiet, built=built)
        note("up --wait + identity checks", time.monotonic() - started)
        note("down --volumes", _timed(lambda: compose_stack.down(quiet)))
        if engine.recorded_pid() is not None:
            note("engine stop", _timed(engine.stop))
    return found


def table(found: dict[str, list[float]], runs: int) -> str:
    lines = [
        f"`python -m bench.compose_steps --runs {runs}{' --cold' if '--cold' in sys.argv else ''}`, "
        f"{platform.node()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| Step | Median | Runs |",
        "| --- | ---: | ---: |",
    ]
    for name, values in found.items():
        lines.append(f"| {name} | {statistics.median(values):.1f} s | {len(values)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compose_steps", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=3, help="repetitions (medians are reported)")
    parser.add_argument("--cold", action="store_true", help="also measure builds from empty caches")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(table(measure(args.runs, args.cold), args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
