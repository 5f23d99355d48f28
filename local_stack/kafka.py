"""Run a single-node Apache Kafka broker (KRaft, broker+controller) from the cached jars."""

from __future__ import annotations

import base64
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from segcat.local_stack import jars, kafka_access, process, tls
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import LOOPBACK, Layout
from segcat.local_stack.probe import KafkaProbe
from segcat.local_stack.report import Reporter
from segcat.local_stack.service import ClientSetting, ServiceSpec
from segcat.local_stack.settings import StackSettings

_quiet = logging.getLogger("segcat.local_stack.librdkafka")

NAME = "kafka"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


def node_name(settings: StackSettings, node: int) -> str:
    """``kafka`` for the single broker (as before), ``kafka-1`` .. ``kafka-N`` for a cluster."""
    return NAME if settings.brokers == 1 else f"{NAME}-{node + 1}"


def node_names(settings: StackSettings) -> list[str]:
    return [node_name(settings, i) for i in range(settings.brokers)]


def replication(settings: StackSettings) -> tuple[int, int]:
    """(replication factor, min in-sync replicas) for tables and internal topics: 3 / 2 on a
    cluster of three or more, so one broker may fail without refusing acks=all writes."""
    factor = min(settings.brokers, 3)
    return factor, max(1, factor - 1)


def address(settings: StackSettings, node: int = 0) -> str:
    return f"{LOOPBACK}:{settings.node_ports(node)[0]}"


def internal_address(settings: StackSettings, node: int = 0) -> str:
    """Where the stack itself talks to a node: the client listener, or with ``secure`` the
    inter-broker one (mutual TLS with the node certificate, a super user for the ACLs)."""
    client, _, internal = settings.node_ports(node)
    return f"{LOOPBACK}:{internal if settings.secure else client}"


def data_dir(layout: Layout, settings: StackSettings, node: int) -> Path:
    return layout.kafka_data if settings.brokers == 1 else layout.kafka_node_data(node)


def server_properties_path(layout: Layout, settings: StackSettings | None = None, node: int = 0) -> Path:
    if settings is None or settings.brokers == 1:
        return layout.conf / "server.properties"
    return layout.conf / f"server-{node + 1}.properties"


def marker(layout: Layout, settings: StackSettings | None = None, node: int = 0) -> str:
    """What only our broker's command line contains: the main class and our config path."""
    return f"{MAIN_CLASS} {server_properties_path(layout, settings, node)}"


def _listener_props(layout: Layout, settings: StackSettings, node: int) -> dict[str, str]:
    client, controller, internal = settings.node_ports(node)
    if not settings.secure:
        return {
            "listeners": f"PLAINTEXT://{LOOPBACK}:{client},CONTROLLER://{LOOPBACK}:{controller}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{client}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }
    certs = tls.files(layout)
    return {
        "listeners": (
            f"CLIENT://{LOOPBACK}:{client},INTERNAL://{LOOPBACK}:{internal},"
            f"CONTROLLER://{LOOPBACK}:{controller}"
        ),
        "advertised.listeners": f"CLIENT://{LOOPBACK}:{client},INTERNAL://{LOOPBACK}:{internal}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL",
        # Clients: SCRAM-SHA-512 over TLS. Nodes: mutual TLS, the certificate is the principal.
        "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.client.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.controller.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.node_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca_cert),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": tls.NODE_PRINCIPAL,
        "allow.everyone.if.no.acl.found": "false",
    }


def server_properties(layout: Layout, settings: StackSettings, node: int = 0) -> str:
    """Broker config: loopback only, one partition per topic, a cleaner that runs often
    (so compaction is observable in tests) and no topic auto-creation (the catalog creates
    and checks its topics explicitly). A cluster replicates everything 3 ways with min ISR 2
    and never elects an out-of-sync leader."""
    factor, min_isr = replication(settings)
    voters = ",".join(f"{i + 1}@{LOOPBACK}:{settings.node_ports(i)[1]}" for i in range(settings.brokers))
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node + 1),
        "controller.quorum.voters": voters,
        **_listener_props(layout, settings, node),
        "log.dirs": str(data_dir(layout, settings, node)),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "default.replication.factor": str(factor),
        "min.insync.replicas": str(min_isr),
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": str(factor),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": str(factor),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": str(factor),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        # KIP-848 groups (`segcat materializer --group-protocol consumer`): a dead instance's
        # tables move after 10 s, as on the classic protocol, not after Kafka's default 45 s
        "group.consumer.session.timeout.ms": "10000",
        "group.consumer.min.session.timeout.ms": "6000",
        "log.cleaner.enable": "true",
        "log.cleaner.backoff.ms": "1000",
        "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
    }
    lines = ["# Written by segcat on every `up`; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def find_java(what: str = "the Kafka broker") -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH (the broker and S3Proxy both run on it)."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise StackError(
            f"Java 17+ is needed to run {what}; install it "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
        )
    return java


def _cluster_id() -> str:
    """Same format as ``StorageTool random-uuid`` (base64url, no padding), without a JVM."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


def _shared_cluster_id(layout: Layout) -> str:
    """Every node of one stack home formats with the same cluster id (kept in ``conf/``)."""
    path = layout.conf / "cluster.id"
    if path.is_file():
        return path.read_text().strip()
    value = _cluster_id()
    path.write_text(value + "\n")
    return value


def _write_config(layout: Layout, settings: StackSettings, node: int) -> tuple[Path, Path]:
    if settings.secure:
        tls.ensure(layout)
    props = server_properties_path(layout, settings, node)
    props.write_text(server_properties(layout, settings, node))
    log4j = layout.conf / "log4j2.properties"
    log4j.write_text(resources.files("segcat.local_stack").joinpath("log4j2.properties").read_text())
    return props, log4j


def _format_storage(java: str, classpath: str, layout: Layout, data: Path, props: Path, log4j: Path) -> None:
    """Format the log dir once; later starts reuse its cluster id and data."""
    if (data / "meta.properties").is_file():
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
        _shared_cluster_id(layout),
        "-c",
        str(props),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise StackError(
            f"formatting Kafka storage in {data} failed (exit {out.returncode}):\n"
            + "\n".join((out.stdout + out.stderr).splitlines()[-30:])
        )


def start(layout: Layout, settings: StackSettings, reporter: Reporter, node: int = 0) -> process.PidRecord:
    """Fetch jars if needed, write config, format storage once and launch node ``node``.

    Returns as soon as the JVM is spawned; the caller waits for it to answer.
    """
    java = find_java()
    jar_dir = jars.ensure_jars(layout, reporter)
    classpath = str(jar_dir / "*")  # the JVM expands the wildcard itself
    props, log4j = _write_config(layout, settings, node)
    data = data_dir(layout, settings, node)
    data.mkdir(parents=True, exist_ok=True)
    _format_storage(java, classpath, layout, data, props, log4j)
    name = node_name(settings, node)
    log_path = layout.log_file(name)
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
    record = process.record_for(proc, marker=marker(layout, settings, node), address=address(settings, node))
    process.write_pid_file(layout.pid_file(name), record)
    reporter.info(f"Started Kafka {settings.kafka_version} {name} (pid {proc.pid}) on {record.address}")
    return record


def stack_client_config(layout: Layout, settings: StackSettings, node: int | None = None) -> dict[str, str]:
    """librdkafka settings for the stack's own admin work (probes, users, ACLs): plaintext, or
    mutual TLS as the node principal (a super user) on the inter-broker listener."""
    nodes = range(settings.brokers) if node is None else [node]
    conf = {"bootstrap.servers": ",".join(internal_address(settings, i) for i in nodes)}
    if settings.secure:
        certs = tls.files(layout)
        conf |= {
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca_cert),
            "ssl.certificate.location": str(certs.node_cert),
            "ssl.key.location": str(certs.node_key),
        }
    return conf


def specs(layout: Layout, settings: StackSettings) -> list[ServiceSpec]:
    """One spec per node; each node's probe asks that node alone for metadata."""

    def one(node: int) -> ServiceSpec:
        client, controller, internal = settings.node_ports(node)
        ports = [(client, "SEGCAT_STACK_KAFKA_PORT"), (controller, "SEGCAT_STACK_KAFKA_CONTROLLER_PORT")]
        if settings.secure:
            ports.append((internal, "SEGCAT_STACK_KAFKA_PORT"))

        def start_node(lay: Layout, s: StackSettings, reporter: Reporter) -> process.PidRecord:
            return start(lay, s, reporter, node)

        def probe() -> Callable[[float], bool]:
            return KafkaProbe(internal_address(settings, node), _probe_extra(layout, settings)).answers

        return ServiceSpec(
            name=node_name(settings, node),
            address=address(settings, node),
            ports=tuple(ports),
            start=start_node,
            probe=probe,
        )

    return [one(i) for i in range(settings.brokers)]


def _probe_extra(layout: Layout, settings: StackSettings) -> dict[str, str]:
    conf = stack_client_config(layout, settings, 0)
    del conf["bootstrap.servers"]
    return conf


def finish(layout: Layout, settings: StackSettings, reporter: Reporter) -> None:
    """Once every node answers: wait until all brokers are registered; with ``secure``, create
    the principals' SCRAM credentials and ACLs (both idempotent)."""
    conf: dict[str, Any] = {**stack_client_config(layout, settings), "logger": _quiet, "log_level": 2}
    admin = AdminClient(conf)
    deadline = time.monotonic() + settings.start_timeout_s
    with reporter.step(f"Waiting for {settings.brokers} broker(s) to register"):
        while True:
            try:
                brokers = admin.list_topics(timeout=5).brokers
            except KafkaException:
                brokers = {}
            if len(brokers) >= settings.brokers:
                break
            if time.monotonic() > deadline:
                raise StackError(
                    f"only {len(brokers)} of {settings.brokers} Kafka brokers registered within "
                    f"{settings.start_timeout_s:.0f}s; see the logs in {layout.logs}"
                )
            time.sleep(0.5)
    if settings.secure:
        with reporter.step("Creating Kafka principals and ACLs"):
            kafka_access.apply(admin, layout)


def client_settings(layout: Layout, settings: StackSettings, principal: str) -> list[ClientSetting]:
    """What a client acting as ``principal`` sets (the principal matters only with ``secure``)."""
    factor, min_isr = replication(settings)
    out = [ClientSetting("SEGCAT_BOOTSTRAP_SERVERS", settings.bootstrap_servers)]
    if factor > 1:
        out += [
            ClientSetting("SEGCAT_REPLICATION_FACTOR", str(factor)),
            ClientSetting("SEGCAT_MIN_INSYNC_REPLICAS", str(min_isr)),
        ]
    if settings.secure:
        out += [
            ClientSetting("SEGCAT_KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
            ClientSetting("SEGCAT_KAFKA_SASL_MECHANISMS", "SCRAM-SHA-512"),
            ClientSetting("SEGCAT_KAFKA_SASL_USERNAME", principal),
            ClientSetting(
                "SEGCAT_KAFKA_SASL_PASSWORD", secret_file=kafka_access.password_file(layout, principal)
            ),
            ClientSetting("SEGCAT_KAFKA_SSL_CA_LOCATION", str(tls.files(layout).ca_cert)),
        ]
    return out
