"""Fetch the Apache Kafka broker's jars from Maven Central once, then reuse them offline.

No Debian or PyPI package ships the broker, but Maven Central does. The first ``up`` runs
``mvn dependency:copy-dependencies`` on a tiny pom; a marker file written after success
makes every later run skip Maven entirely.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path
from string import Template

from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import Layout
from segcat.local_stack.report import Reporter

MARKER = ".complete"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MVN_TIMEOUT_S = 1800.0


def is_complete(layout: Layout) -> bool:
    """True if a previous fetch finished and none of its jars went missing since."""
    marker = layout.kafka_dist / MARKER
    try:
        data = json.loads(marker.read_text())
        files = [str(name) for name in data["files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return bool(files) and all((layout.jars / name).is_file() for name in files)


def ensure_jars(layout: Layout, reporter: Reporter) -> Path:
    """The folder holding the broker's classpath, fetching it first if needed."""
    if is_complete(layout):
        return layout.jars
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError(
            f"Maven (mvn) is needed once to fetch the Apache Kafka {layout.kafka_version} jars "
            f"into {layout.jars}; install it (e.g. `apt-get install maven`) and retry"
        )
    layout.kafka_dist.mkdir(parents=True, exist_ok=True)
    pom = layout.kafka_dist / "pom.xml"
    template = resources.files("segcat.local_stack").joinpath("kafka-pom.xml").read_text()
    pom.write_text(Template(template).substitute(kafka_version=layout.kafka_version))
    staging = layout.kafka_dist / "jars.partial"
    shutil.rmtree(staging, ignore_errors=True)
    with reporter.step(f"Fetching Apache Kafka {layout.kafka_version} jars with Maven (first run only)"):
        run_maven(
            mvn,
            pom,
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        )
        binding = _logging_binding(staging)
        if binding is not None:
            run_maven(
                mvn,
                pom,
                f"{DEPENDENCY_PLUGIN}:copy",
                f"-Dartifact={binding}",
                f"-DoutputDirectory={staging}",
            )
    core = staging / f"kafka_2.13-{layout.kafka_version}.jar"
    if not core.is_file():
        raise StackError(f"Maven finished but {core.name} is missing from {staging}")
    shutil.rmtree(layout.jars, ignore_errors=True)
    staging.rename(layout.jars)
    files = sorted(p.name for p in layout.jars.glob("*.jar"))
    (layout.kafka_dist / MARKER).write_text(
        json.dumps({"kafka_version": layout.kafka_version, "files": files}, indent=1) + "\n"
    )
    reporter.info(f"Cached {len(files)} Kafka jars in {layout.jars}")
    return layout.jars


def _version_of(folder: Path, artifact: str) -> str | None:
    pattern = re.compile(rf"^{re.escape(artifact)}-(\d[\w.\-]*)\.jar$")
    for jar in folder.glob(f"{artifact}-*.jar"):
        match = pattern.match(jar.name)
        if match:
            return match.group(1)
    return None


def _logging_binding(folder: Path) -> str | None:
    """Coordinates of the slf4j→log4j2 bridge matching the log4j-core that came in.

    The broker's POM brings log4j-core but no slf4j binding; without one it logs nothing.
    """
    log4j = _version_of(folder, "log4j-core")
    if log4j is None:
        return None
    slf4j = _version_of(folder, "slf4j-api") or "1"
    bridge = "log4j-slf4j2-impl" if slf4j.split(".")[0] == "2" else "log4j-slf4j-impl"
    return f"org.apache.logging.log4j:{bridge}:{log4j}"


def run_maven(mvn: str, pom: Path, *args: str) -> None:
    """`mvn -B -q` on ``pom``: the Kafka and S3Proxy jar fetches share it."""
    argv = [mvn, "-B", "-q", "--no-transfer-progress", "-f", str(pom), *args]
    try:
        out = subprocess.run(
            argv,
            cwd=pom.parent,
            capture_output=True,
            text=True,
            timeout=MVN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"`{' '.join(argv)}` did not finish within {MVN_TIMEOUT_S:.0f}s") from exc
    if out.returncode != 0:
        lines = "\n".join((out.stdout + out.stderr).splitlines()[-30:])
        raise StackError(
            f"`{' '.join(argv)}` failed (exit {out.returncode}); is Maven Central reachable?\n{lines}"
        )
