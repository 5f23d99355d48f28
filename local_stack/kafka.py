"""Run a single-node Apache Kafka broker (KRaft, broker+controller) from the cached jars."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from importlib import resources
from pathlib import Path

from segcat.local_stack import jars, process
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import LOOPBACK, Layout
from segcat.local_stack.report import Reporter
from segcat.local_stack.settings import StackSettings

NAME = "kafka"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


def address(settings: StackSettings) -> str:
    return f"{LOOPBACK}:{settings.kafka_port}"


def server_properties_path(layout: Layout) -> Path:
    return layout.conf / "server.properties"


def marker(layout: Layout) -> str:
    """What only our broker's command line contains: the main class and our config path."""
    return f"{MAIN_CLASS} {server_properties_path(layout)}"


def server_properties(layout: Layout, settings: StackSettings) -> str:
    """Broker config: loopback only, one partition per topic, a cleaner that runs often
    (so compaction is observable in tests) and no topic auto-creation (the catalog creates
    and checks its topics explicitly)."""
    port, controller = settings.kafka_port, settings.kafka_controller_port
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(layout.kafka_data),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.cleaner.enable": "true",
        "log.cleaner.backoff.ms": "1000",
        "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
    }
    lines = ["# Written by segcat on every `up`; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise StackError(
            "Java 17+ is needed to run the Kafka broker; install it "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
        )
    return java


def _cluster_id() -> str:
    """Same format as ``StorageTool random-uuid`` (base64url, no padding), without a JVM."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


def _write_config(layout: Layout, settings: StackSettings) -> tuple[Path, Path]:
    props = server_properties_path(layout)
    props.write_text(server_properties(layout, settings))
    log4j = layout.conf / "log4j2.properties"
    log4j.write_text(resources.files("segcat.local_stack").joinpath("log4j2.properties").read_text())
    return props, log4j


def _format_storage(java: str, classpath: str, layout: Layout, props: Path, log4j: Path) -> None:
    """Format the log dir once; later starts reuse its cluster id and data."""
    if (layout.kafka_data / "meta.properties").is_file():
        return
    argv = [
        java,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        classpath,
        STORAGE_TOOL,
        "format",
        "--ignore-formatted",
        "-t",
        _cluster_id(),
        "-c",
        str(props),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise StackError(
            f"formatting Kafka storage in {layout.kafka_data} failed (exit {out.returncode}):\n"
            + "\n".join((out.stdout + out.stderr).splitlines()[-30:])
        )


def start(layout: Layout, settings: StackSettings, reporter: Reporter) -> process.PidRecord:
    """Fetch jars if needed, write config, format storage once and launch the broker.

    Returns as soon as the JVM is spawned; the caller waits for it to answer.
    """
    java = find_java()
    jar_dir = jars.ensure_jars(layout, reporter)
    classpath = str(jar_dir / "*")  # the JVM expands the wildcard itself
    props, log4j = _write_config(layout, settings)
    _format_storage(java, classpath, layout, props, log4j)
    log_path = layout.log_file(NAME)
    process.rotate_log(log_path)
    argv = [
        java,
        f"-Xmx{settings.kafka_heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        # Let the broker log its own shutdown; log4j would otherwise stop first.
        "-Dlog4j2.shutdownHookEnabled=false",
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dkafka.logs.dir={layout.logs}",
        "-cp",
        classpath,
        MAIN_CLASS,
        str(props),
    ]
    proc = process.spawn(argv, log_path=log_path, cwd=layout.home)
    record = process.record_for(proc, marker=marker(layout), address=address(settings))
    process.write_pid_file(layout.pid_file(NAME), record)
    reporter.info(f"Started Kafka {settings.kafka_version} (pid {proc.pid}) on {record.address}")
    return record
