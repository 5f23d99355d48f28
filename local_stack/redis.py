"""Run Redis on loopback: one server, or three masters joined as a Redis Cluster; ACL users on request.

No persistence (``save ""``, no AOF): Redis is a cache of what the log decides, rebuilt by the
materializer. With ``settings.secure`` the server has no anonymous access: the ``default``
user is off, ``segcat`` (what clients use) may touch only ``segcat:*`` keys and channels with
the commands the catalog runs, and ``segcat-admin`` (all commands) is what the stack itself
uses to probe and to create the cluster. Both passwords are made once per stack home under
``Layout.secrets`` (0700, files 0600); the servers read only their SHA-256 from an ACL file
(0600), so no password is ever on a command line or in a config file.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from segcat.local_stack import process, secret_files
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import LOOPBACK, Layout
from segcat.local_stack.probe import RedisProbe, redis_cluster_info
from segcat.local_stack.report import Reporter
from segcat.local_stack.service import ClientSetting, ServiceSpec
from segcat.local_stack.settings import StackSettings

NAME = "redis"
CLUSTER_SIZE = 3
BUS_PORT_OFFSET = 10_000
"""Redis Cluster's node-to-node bus listens on the client port + 10000."""

USER = "segcat"
ADMIN_USER = "segcat-admin"

USER_RULES = (
    "resetkeys ~segcat:* resetchannels &segcat:* nocommands "
    "+@read +@write +@pubsub +@transaction "
    "+evalsha +script|load +script|exists +time +ping +asking +cluster|slots +command "
    "-@dangerous"
)
"""What segcat runs. Found by running the test suite's Redis users (materializer, readers, watch,
leases, vacuum, purge, serve) as this user and reading ``ACL LOG``; each rule below is needed
(dropping any one fails them), except ``asking``, read from redis-py's cluster client:

* ``~segcat:*`` / ``&segcat:*``: the catalog's keys and channels (docs/PROTOCOL.md §6), nothing else;
* ``@read @write``: HGETALL/HMGET/XRANGE/SMEMBERS/SCAN, SADD/SREM/DEL, and what the Lua scripts call
  (HSET, XADD, XTRIM, ZADD, PEXPIRE, ...: commands inside scripts are checked against the ACL too);
* ``@pubsub``: SUBSCRIBE (watchers, ``segcat serve``) and PUBLISH (inside the record script);
* ``@transaction``: MULTI/EXEC of ``RedisStore.load``;
* ``evalsha``, ``script|load``, ``script|exists``: redis-py's scripts and pipelines (not EVAL,
  SCRIPT FLUSH/KILL or FUNCTION);
* ``time``: the lease scripts read the server clock; ``ping``: health checks;
* ``cluster|slots``, ``command``: redis-py's cluster client (slot map, key positions); ``asking``:
  its ASK redirects while a slot moves between masters;
* ``-@dangerous`` last: no FLUSHALL/FLUSHDB, KEYS, CONFIG, INFO, DEBUG, MONITOR, SHUTDOWN, ACL or
  CLUSTER changes, whatever the categories above let in.

Redis 7.2+ also gets ``+client|setinfo`` (``SETINFO_RULE``): redis-py sends it on every connect
and ignores a refusal, which would still fill ``ACL LOG``; older servers do not know the command.
"""
SETINFO_RULE = "+client|setinfo"


def node_count(settings: StackSettings) -> int:
    return CLUSTER_SIZE if settings.redis_cluster else 1


def node_name(settings: StackSettings, node: int) -> str:
    """``redis`` for a single server, ``redis-1`` .. ``redis-3`` for the cluster's masters."""
    return f"{NAME}-{node + 1}" if settings.redis_cluster else NAME


def node_port(settings: StackSettings, node: int) -> int:
    return settings.redis_ports()[node]


def address(settings: StackSettings) -> str:
    """The (first) node's address: enough for a cluster client, which discovers the others."""
    return f"{LOOPBACK}:{settings.redis_port}"


def url(settings: StackSettings) -> str:
    return f"redis://{LOOPBACK}:{settings.redis_port}/0"


def conf_path(layout: Layout, name: str = NAME) -> Path:
    return layout.conf / f"{name}.conf"


def marker(layout: Layout, name: str = NAME) -> str:
    """Redis rewrites its process title; our template keeps the config path in it."""
    return str(conf_path(layout, name))


def node_dir(layout: Layout, settings: StackSettings, node: int) -> Path:
    """Working directory: ``redis`` for a single server, ``redis-cluster-N`` (with nodes.conf) per master."""
    return layout.redis_node_data(node) if settings.redis_cluster else layout.redis_data


# ---------------------------------------------------------------------------- secrets


def password_file(layout: Layout, user: str) -> Path:
    """The password file of ``user`` (``segcat`` or ``segcat-admin``), made on first use (mode 0600)."""
    if user not in (USER, ADMIN_USER):
        raise StackError(f"unknown Redis user {user!r}; the secure stack has {USER} and {ADMIN_USER}")
    return secret_files.password_file(layout.secrets / f"redis-{user}.password")


def password(layout: Layout, user: str) -> str:
    return password_file(layout, user).read_text().strip()


def acl_path(layout: Layout) -> Path:
    return layout.secrets / "redis-users.acl"


def acl_file(layout: Layout, version: tuple[int, int] = (7, 0)) -> str:
    """The ACL file: users with the SHA-256 of their passwords (``#<hex>``), never the passwords."""

    def digest(user: str) -> str:
        return "#" + hashlib.sha256(password(layout, user).encode()).hexdigest()

    rules = USER_RULES + (f" {SETINFO_RULE}" if version >= (7, 2) else "")
    return (
        "user default off resetkeys resetchannels nocommands\n"
        f"user {ADMIN_USER} on {digest(ADMIN_USER)} ~* &* +@all\n"
        f"user {USER} on {digest(USER)} {rules}\n"
    )


def admin_credentials(layout: Layout, settings: StackSettings) -> tuple[str | None, str | None]:
    """(username, password) the stack itself connects with; (None, None) on an open stack."""
    return (ADMIN_USER, password(layout, ADMIN_USER)) if settings.secure else (None, None)


# ---------------------------------------------------------------------------- config and start


def find_redis_server(reporter: Reporter) -> str:
    """``redis-server`` from PATH, installing the Debian package when we may (root + apt)."""
    found = shutil.which("redis-server")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise StackError(
            "redis-server is not installed; install it (e.g. `sudo apt-get install -y "
            "redis-server` or `brew install redis`) and retry"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with reporter.step("Installing redis-server with apt-get"):
        for argv in ([apt, "update"], [apt, "install", "-y", "--no-install-recommends", "redis-server"]):
            out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if out.returncode != 0:
                raise StackError(
                    f"`{' '.join(argv)}` failed (exit {out.returncode}):\n"
                    + "\n".join((out.stdout + out.stderr).splitlines()[-30:])
                )
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").is_file() else None
    )
    if found is None:
        raise StackError("apt-get installed redis-server but it is not on PATH")
    return found


def find_redis_cli(redis_server: str) -> str:
    """``redis-cli`` next to ``redis-server`` (both come in Debian's redis-tools), else from PATH."""
    beside = Path(redis_server).with_name("redis-cli")
    found = str(beside) if beside.is_file() else shutil.which("redis-cli")
    if found is None:
        raise StackError("redis-cli is not installed (it comes with redis-server: package redis-tools)")
    return found


def server_version(redis_server: str) -> tuple[int, int]:
    """(major, minor) of ``redis-server``; (0, 0) if it does not say."""
    out = subprocess.run([redis_server, "--version"], capture_output=True, text=True, check=False)
    match = re.search(r"v=(\d+)\.(\d+)", out.stdout)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def redis_conf(layout: Layout, settings: StackSettings, *, proc_title: bool, node: int = 0) -> str:
    """One server's config; no secret in it (the ACL file holds the users)."""
    lines = [
        "# Written by segcat on every `up`; edits are overwritten.",
        f"bind {LOOPBACK}",
        f"port {node_port(settings, node)}",
        "protected-mode yes",
        "daemonize no",
        f"dir {_quote(str(node_dir(layout, settings, node)))}",
        'save ""',
        "appendonly no",
        'logfile ""',
    ]
    if settings.redis_cluster:
        lines += [
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",  # in ``dir``: one per node
            "cluster-node-timeout 5000",
        ]
    if settings.secure:
        lines.append(f"aclfile {_quote(str(acl_path(layout)))}")
    if proc_title:
        lines.append('proc-title-template "{title} {listen-addr} {config-file}"')
    return "\n".join(lines) + "\n"


def _start_node(layout: Layout, settings: StackSettings, reporter: Reporter, node: int) -> process.PidRecord:
    """Write the node's config (and the ACL file) and launch ``redis-server`` in its own session."""
    name = node_name(settings, node)
    redis_server = find_redis_server(reporter)
    version = server_version(redis_server)
    if settings.secure and version < (7, 0):
        raise StackError(
            f"a secure stack needs Redis 7+ for its ACL rules; {redis_server} is {version[0]}.{version[1]}"
        )
    proc_title = version >= (6, 2)  # proc-title-template exists since 6.2
    workdir = node_dir(layout, settings, node)
    workdir.mkdir(parents=True, exist_ok=True)
    if settings.secure:
        secret_files.write_private(acl_path(layout), acl_file(layout, version))
    conf = conf_path(layout, name)
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(redis_conf(layout, settings, proc_title=proc_title, node=node))
    log_path = layout.log_file(name)
    process.rotate_log(log_path)
    proc = process.spawn([redis_server, str(conf)], log_path=log_path, cwd=workdir)
    where = f"{LOOPBACK}:{node_port(settings, node)}"
    # Without a title template the title is "redis-server 127.0.0.1:<port>".
    expected = marker(layout, name) if proc_title else f"redis-server {where}"
    record = process.record_for(proc, marker=expected, address=where)
    process.write_pid_file(layout.pid_file(name), record)
    reporter.info(
        f"Started Redis{' cluster node' if settings.redis_cluster else ''} (pid {proc.pid}) on {where}"
    )
    return record


def start(layout: Layout, settings: StackSettings, reporter: Reporter) -> process.PidRecord:
    """Start the single server (or the cluster's first node)."""
    return _start_node(layout, settings, reporter, 0)


def _probe(layout: Layout, settings: StackSettings, node: int) -> Callable[[], Callable[[float], bool]]:
    def make() -> Callable[[float], bool]:
        username, secret = admin_credentials(layout, settings)
        return RedisProbe(LOOPBACK, node_port(settings, node), username, secret).answers

    return make


def _starter(node: int) -> Callable[[Layout, StackSettings, Reporter], process.PidRecord]:
    def start_node(layout: Layout, settings: StackSettings, reporter: Reporter) -> process.PidRecord:
        return _start_node(layout, settings, reporter, node)

    return start_node


def specs(layout: Layout, settings: StackSettings) -> list[ServiceSpec]:
    """One spec ``redis``, or ``redis-1`` .. ``redis-3`` (cluster-enabled) with ``redis_cluster``."""
    out = []
    for node in range(node_count(settings)):
        port = node_port(settings, node)
        ports: tuple[tuple[int, str], ...] = ((port, "SEGCAT_STACK_REDIS_PORT"),)
        if settings.redis_cluster:
            ports += ((port + BUS_PORT_OFFSET, "SEGCAT_STACK_REDIS_PORT"),)
        out.append(
            ServiceSpec(
                name=node_name(settings, node),
                address=f"{LOOPBACK}:{port}",
                ports=ports,
                start=_starter(node),
                probe=_probe(layout, settings, node),
            )
        )
    return out


# ---------------------------------------------------------------------------- cluster set-up


def _cluster_states(layout: Layout, settings: StackSettings) -> list[dict[str, str]]:
    username, secret = admin_credentials(layout, settings)
    return [
        redis_cluster_info(LOOPBACK, port, username, secret, timeout_s=2.0) for port in settings.redis_ports()
    ]


def finish(layout: Layout, settings: StackSettings, reporter: Reporter) -> None:
    """Join the three masters into one cluster once (``redis-cli --cluster create``), then wait for
    ``cluster_state:ok`` on every node. Idempotent: nodes that already hold slots (a restarted
    stack keeps its nodes.conf) are only waited for. Nothing to do for a single server."""
    if not settings.redis_cluster:
        return
    states = _cluster_states(layout, settings)
    if all(int(s.get("cluster_slots_assigned", "0")) == 0 for s in states):
        _create_cluster(layout, settings, reporter)
    elif not all(s.get("cluster_state") == "ok" for s in states):
        reporter.info("Redis Cluster nodes already joined; waiting for cluster_state:ok")
    deadline = time.monotonic() + settings.start_timeout_s
    with reporter.step("Waiting for Redis Cluster cluster_state:ok"):
        while True:
            states = _cluster_states(layout, settings)
            if all(
                s.get("cluster_state") == "ok" and s.get("cluster_known_nodes") == str(CLUSTER_SIZE)
                for s in states
            ):
                return
            if time.monotonic() >= deadline:
                raise StackError(
                    f"Redis Cluster on ports {settings.redis_ports()} is not ok after "
                    f"{settings.start_timeout_s:.0f}s: "
                    + "; ".join(
                        f"{p}: {s.get('cluster_state', 'no answer')}, "
                        f"{s.get('cluster_known_nodes', '?')} nodes"
                        for p, s in zip(settings.redis_ports(), states, strict=True)
                    )
                )
            time.sleep(0.2)


def _create_cluster(layout: Layout, settings: StackSettings, reporter: Reporter) -> None:
    """``redis-cli --cluster create``; the admin password travels in ``REDISCLI_AUTH``, not argv."""
    cli = find_redis_cli(find_redis_server(reporter))
    argv = [cli, "--cluster", "create", *(f"{LOOPBACK}:{p}" for p in settings.redis_ports())]
    argv += ["--cluster-replicas", "0", "--cluster-yes"]
    env = {k: v for k, v in os.environ.items() if k != "REDISCLI_AUTH"}
    username, secret = admin_credentials(layout, settings)
    if username is not None and secret is not None:
        argv += ["--user", username]
        env["REDISCLI_AUTH"] = secret
    with reporter.step(f"Creating the Redis Cluster on ports {settings.redis_ports()}"):
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    if out.returncode != 0:
        text = (out.stdout + out.stderr).replace(secret or "\0", "***")
        raise StackError(
            f"`redis-cli --cluster create` failed (exit {out.returncode}):\n"
            + "\n".join(text.splitlines()[-30:])
        )


# ---------------------------------------------------------------------------- clients


def client_settings(layout: Layout, settings: StackSettings) -> list[ClientSetting]:
    """``SEGCAT_REDIS_URL``; ``SEGCAT_REDIS_CLUSTER`` for the cluster; the ACL user when secure."""
    out = [ClientSetting("SEGCAT_REDIS_URL", url(settings))]
    if settings.redis_cluster:
        out.append(ClientSetting("SEGCAT_REDIS_CLUSTER", "true"))
    if settings.secure:
        out.append(ClientSetting("SEGCAT_REDIS_USERNAME", USER))
        out.append(ClientSetting("SEGCAT_REDIS_PASSWORD", secret_file=password_file(layout, USER)))
    return out
