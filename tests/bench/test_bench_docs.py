"""docs/BENCHMARKS.md and the benchmarks that write it stay in step (no services needed).

Every ``python -m bench.<module>`` the docs name is a benchmark that parses its command line;
every rendered block of docs/BENCHMARKS.md belongs to one; a block is replaced without touching
the hand-written text around it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from bench import report, runner

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "BENCHMARKS.md"
NAMING = (REPO / "README.md", REPO / "dev", *sorted((REPO / "docs").glob("*.md")))
COMMAND = re.compile(r"python -m (bench\.[a-z_]+)")
BLOCK = re.compile(r"<!-- ([a-z-]+):start -->\n(.*?)<!-- \1:end -->", re.DOTALL)


def _benchmark(module: str) -> runner.Benchmark:
    found = importlib.import_module(module).BENCHMARK
    assert isinstance(found, runner.Benchmark) and found.module == module
    return found


def _named() -> set[str]:
    return {m for path in NAMING for m in COMMAND.findall(path.read_text())}


@pytest.mark.parametrize("module", sorted(_named()))
def test_every_benchmark_the_docs_name_parses_its_command_line(module: str) -> None:
    """A runner benchmark parses the common options; a measuring tool of its own (whose figures
    go to another doc, e.g. ``bench.broker_topics`` → OPERATIONS.md) at least answers ``--help``."""
    loaded = importlib.import_module(module)
    if not hasattr(loaded, "BENCHMARK"):
        with pytest.raises(SystemExit) as exited:
            loaded.main(["--help"])
        assert exited.value.code == 0
        return
    bench = _benchmark(module)
    args = runner._parser(bench).parse_args(["--quick", "--no-doc", "--only", ",".join(bench.scenarios)])
    assert args.quick and args.no_doc


def test_every_block_of_the_doc_is_a_benchmark_s_and_the_doc_stays_short() -> None:
    text = DOC.read_text()
    names = {_benchmark(m).name for m in runner.BENCH_MODULES}
    blocks = BLOCK.findall(text)
    assert {name for name, _ in blocks} <= names
    starts, ends = (
        re.findall(rf"^<!-- [a-z-]+:{edge} -->$", text, re.MULTILINE) for edge in ("start", "end")
    )
    assert len(blocks) == len(starts) == len(ends)
    assert len(text.splitlines()) <= 600, "one current table per scenario; history goes to CHANGELOG.md"


def test_a_block_is_replaced_and_the_hand_written_text_kept(tmp_path: Path) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# B\n\nby hand\n\n<!-- x:start -->\nold\n<!-- x:end -->\n\nafter, by hand\n")
    report.update_section(doc, "x", "| new |")
    report.update_section(doc, "y", "| other |")
    assert doc.read_text() == (
        "# B\n\nby hand\n\n<!-- x:start -->\n| new |\n<!-- x:end -->\n\nafter, by hand\n\n"
        "## y\n\n<!-- y:start -->\n| other |\n<!-- y:end -->\n"
    )
