"""The installed wheel as a user runs it: ``python -I wheel_smoke.py [EXTRA]`` in a clean venv.

Every install (bare or with an extra) imports segcat, creates a table, commits, reads it back
and watches the version arrive, against the test stack (SEGCAT_TEST_BOOTSTRAP_SERVERS /
SEGCAT_TEST_REDIS_URL as the suite uses, else the local stack's SEGCAT_BOOTSTRAP_SERVERS /
SEGCAT_REDIS_URL), runs ``segcat --help`` and ``segcat show``, and imports the module that
proves each extra it has. The bare install also proves the extras are absent: their modules
do not import and their commands end in the one-line ``pip install 'segcat[...]'`` error.
.ci/wheel_smoke.sh builds the wheel and makes the venvs.
"""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

PROOF = {
    "spark": "segcat.spark_integration.datasource",
    "server": "segcat.server.app",
    "materializer": "segcat.materializer.service",
    "stack": "segcat.local_stack.tls",
}
"""Per extra, a module that imports only when the extra is installed."""
MODULES = {
    "spark": "pyspark",
    "server": "fastapi",
    "materializer": "prometheus_client",
    "stack": "cryptography",
}
COMMANDS = {"server": ["serve"], "materializer": ["materializer"], "stack": ["stack", "status"]}
SEGCAT = str(Path(sys.executable).with_name("segcat"))


def run(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([SEGCAT, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == code, f"segcat {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    return done


def table_round_trip(warehouse: str) -> str:
    """Create, commit, read and watch one table with the base install's public API."""
    import segcat
    from segcat import ColumnStats, ColumnType, Segment

    env = dict(os.environ, SEGCAT_WAREHOUSE=warehouse)
    for key in ("SEGCAT_BOOTSTRAP_SERVERS", "SEGCAT_REDIS_URL"):
        env[key] = env.get(key.replace("SEGCAT_", "SEGCAT_TEST_", 1)) or env.get(key, "")
        assert env[key], f"no test stack: set {key.replace('SEGCAT_', 'SEGCAT_TEST_', 1)} or {key}"
    os.environ.update(env)  # for load_catalog() and the `segcat show` below
    name = f"smoke.wheel_{uuid.uuid4().hex[:12]}"
    day = dt.date(2026, 11, 1)
    stats = (ColumnStats("day", ColumnType.DATE, day, day, null_count=0),)
    segment = Segment("a", f"day={day}/a.parquet", 4_096, 100, partition=str(day), stats=stats)
    with segcat.load_catalog() as catalog:
        table = catalog.create_table(name)
        version = table.append([segment])
        snapshot = catalog.load_table(name).snapshot()
        assert snapshot.version == version, (snapshot.version, version)
        assert snapshot.segment_ids() == {"a"}, snapshot.segment_ids()
        with table.watch(from_version=version - 1, poll_s=0.1) as changes:
            assert next(iter(changes)).version == version
    return name


def main(extra: str) -> None:
    signal.alarm(300)  # a hung read or watch fails the run (SIGALRM ends the process)
    extras = set(PROOF) if extra == "all" else {extra} - {""}
    import segcat

    print(f"[{extra or 'bare'}] segcat from {Path(segcat.__file__).parent}")
    assert "site-packages" in segcat.__file__, "the smoke must run the installed wheel, not a checkout"
    with tempfile.TemporaryDirectory() as warehouse:
        name = table_round_trip(warehouse)
        shown = json.loads(run("show", name, "--json").stdout)
        assert shown["live_segments"] == 1, shown
    assert "table" in run("--help").stdout
    for each in PROOF:
        if each in extras:
            importlib.import_module(PROOF[each])
        elif not extras:  # bare: the extra is absent, and its command says what to install
            assert importlib.util.find_spec(MODULES[each]) is None, f"{MODULES[each]} installed bare"
            if each in COMMANDS:
                error = run(*COMMANDS[each], code=1).stderr.strip()
                assert error.startswith("error: MissingExtra: "), error
                assert error.endswith(f"pip install 'segcat[{each}]'"), error
    print(f"[{extra or 'bare'}] ok: import, create + commit + read + watch, CLI, extras {sorted(extras)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
