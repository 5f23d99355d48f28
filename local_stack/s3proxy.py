"""Run S3Proxy, a real S3 HTTP API server, on loopback with a local directory as its storage.

An ``s3://`` warehouse then works on a laptop exactly as on AWS: pyarrow and Spark's s3a
speak the S3 protocol, sign every request (AWS v2 or v4) and find their keys in the standard
``AWS_*`` variables. No Debian or PyPI package ships S3Proxy, but Maven Central does: the
first start fetches it with Maven (as for the Kafka broker, ``jars.py``) and later starts are
offline. The identity and credential are made once per stack home and only ever live in
files of mode 0600 under ``Layout.secrets`` (the properties file that hands them to S3Proxy
included), never on a command line, in a log line or an error message.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import secrets
import shutil
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template

import pyarrow.fs as pafs

from segcat.local_stack import jars, kafka, process, secret_files
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import LOOPBACK, Layout
from segcat.local_stack.report import Reporter
from segcat.local_stack.service import ClientSetting, ServiceSpec
from segcat.local_stack.settings import StackSettings

NAME = "s3"
MAIN_CLASS = "org.gaul.s3proxy.Main"
REGION = "us-east-1"
"""S3Proxy ignores regions; clients still sign with one, and this is the one they default to."""
PROVIDER = "filesystem"
"""The on-disk backend (from S3Proxy 4.0 an alias of its own ``filesystem-nio2`` store)."""
MIN_VERSION = (4, 0)
"""Older S3Proxy releases are not a faithful S3 for segcat's clients. Run here, 2.6.0's
``filesystem`` store lists every directory as an extra zero-byte object (``ns/t/data`` beside
``ns/t/data/x.parquet``), its ``filesystem-nio2`` lists objects without a size (s3a's rename,
i.e. Spark's output commit, fails), and 2.6.0 and 2.9.0 refuse the aws-chunked uploads with a
CRC64NVME trailer that pyarrow's AWS SDK sends for every PutObject / UploadPart by default
(S3Proxy reads that trailer from 4.0 on)."""
HEAP = "256m"
WAREHOUSE_PREFIX = "warehouse"
_MARKER = ".complete"
_ACCESS_KEY_ALPHABET = string.ascii_uppercase + string.digits

_LOGBACK = """<!-- Written by segcat on every start; edits are overwritten. -->
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder>
      <pattern>%d{yyyy-MM-dd HH:mm:ss.SSS} %-5level [%thread] %logger{36} - %msg%n</pattern>
    </encoder>
  </appender>
  <logger name="org.eclipse.jetty" level="WARN"/>
  <logger name="org.gaul.shaded.org.eclipse.jetty" level="WARN"/>
  <root level="INFO">
    <appender-ref ref="STDOUT"/>
  </root>
</configuration>
"""
"""Without a config logback logs at DEBUG, which prints every request; INFO keeps the log small."""


@dataclass(frozen=True)
class Credentials:
    """The stack's S3 identity; ``repr`` leaves the secret out so it cannot reach a log by accident."""

    access_key: str
    secret_key: str = field(repr=False)


def address(settings: StackSettings) -> str:
    return f"{LOOPBACK}:{settings.s3_port}"


def endpoint(settings: StackSettings) -> str:
    """What ``SEGCAT_S3_ENDPOINT`` (and s3a's ``fs.s3a.endpoint``) must say: plain HTTP on loopback."""
    return f"http://{address(settings)}"


def access_key_file(layout: Layout) -> Path:
    return layout.secrets / "s3.access_key"


def secret_key_file(layout: Layout) -> Path:
    return layout.secrets / "s3.secret_key"


def properties_path(layout: Layout) -> Path:
    """Holds the credential, so it lives with the other secrets (mode 0600), not in ``conf/``."""
    return layout.secrets / "s3proxy.properties"


def marker(layout: Layout) -> str:
    """What only our S3Proxy's command line contains: the main class and our properties file."""
    return f"{MAIN_CLASS} --properties {properties_path(layout)}"


# ---------------------------------------------------------------------------- credentials


def credentials(layout: Layout) -> Credentials | None:
    """The stack's keys, or None before the first start made them."""
    try:
        access = access_key_file(layout).read_text().strip()
        secret = secret_key_file(layout).read_text().strip()
    except OSError:
        return None
    return Credentials(access, secret) if access and secret else None


def ensure_credentials(layout: Layout) -> Credentials:
    """The stack's keys, generated on first use (random, AWS-shaped) and kept for later starts."""
    access_file, secret_file = access_key_file(layout), secret_key_file(layout)
    if not access_file.is_file():
        access = "".join(secrets.choice(_ACCESS_KEY_ALPHABET) for _ in range(20))
        secret_files.write_private(access_file, access + "\n", keep_existing=True)
    if not secret_file.is_file():
        secret_files.write_private(secret_file, secrets.token_urlsafe(30) + "\n", keep_existing=True)
    found = credentials(layout)
    if found is None:
        raise StackError(f"the S3 keys in {layout.secrets} are unreadable or empty; delete them to renew")
    return found


# ---------------------------------------------------------------------------- jars


def _version(text: str) -> tuple[int, ...]:
    """``"4.0.0"`` → ``(4, 0, 0)``; a suffix such as ``-SNAPSHOT`` is ignored."""
    parts = []
    for part in text.split("."):
        digits = part[: len(part) - len(part.lstrip("0123456789"))]
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_version(settings: StackSettings) -> None:
    """Refuse an S3Proxy older than ``MIN_VERSION`` before fetching or starting anything."""
    if _version(settings.s3proxy_version) < MIN_VERSION:
        wanted = ".".join(map(str, MIN_VERSION))
        raise StackError(
            f"S3Proxy {settings.s3proxy_version} is too old for segcat (it needs {wanted} or newer: "
            "older releases list directories as objects and refuse the checksummed uploads "
            f'current AWS SDKs send); set s3proxy_version = "{wanted}.0" in the [stack] table'
        )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One fetch at a time per cache (``stack up`` and test runs may share it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _is_complete(folder: Path, version: str) -> bool:
    """True if a fetch of ``version`` finished and none of its jars went missing since."""
    try:
        data = json.loads((folder.parent / _MARKER).read_text())
        files = [str(name) for name in data["files"]]
        fetched = str(data["s3proxy_version"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return fetched == version and bool(files) and all((folder / name).is_file() for name in files)


def ensure_jars(layout: Layout, settings: StackSettings, reporter: Reporter) -> Path:
    """The folder holding S3Proxy's classpath (logback, its logging binding, included), fetched once."""
    folder, version = layout.s3proxy_jars, settings.s3proxy_version
    if _is_complete(folder, version):
        return folder
    dist = folder.parent
    with _locked(dist / ".lock"):
        if _is_complete(folder, version):  # another process fetched it while we waited
            return folder
        mvn = shutil.which("mvn")
        if mvn is None:
            raise StackError(
                f"Maven (mvn) is needed once to fetch S3Proxy {version} into {folder}; "
                "install it (e.g. `apt-get install maven`) and retry"
            )
        pom = dist / "pom.xml"
        template = resources.files("segcat.local_stack").joinpath("s3proxy-pom.xml").read_text()
        pom.write_text(Template(template).substitute(s3proxy_version=version))
        staging = dist / "jars.partial"
        shutil.rmtree(staging, ignore_errors=True)
        with reporter.step(f"Fetching S3Proxy {version} jars with Maven (first run only)"):
            jars.run_maven(
                mvn,
                pom,
                f"{jars.DEPENDENCY_PLUGIN}:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staging}",
            )
        core = staging / f"s3proxy-{version}.jar"
        if not core.is_file():
            raise StackError(f"Maven finished but {core.name} is missing from {staging}")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
        files = sorted(p.name for p in folder.glob("*.jar"))
        (dist / _MARKER).write_text(json.dumps({"s3proxy_version": version, "files": files}, indent=1) + "\n")
    reporter.info(f"Cached {len(files)} S3Proxy jars in {folder}")
    return folder


# ---------------------------------------------------------------------------- process


def s3proxy_properties(layout: Layout, settings: StackSettings, keys: Credentials) -> str:
    """Signed requests only (v2 or v4, as clients choose), path-style buckets, objects on disk."""
    props = {
        "s3proxy.endpoint": endpoint(settings),
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": keys.access_key,
        "s3proxy.credential": keys.secret_key,
        "jclouds.provider": PROVIDER,
        "jclouds.filesystem.basedir": str(layout.s3_data),
    }
    lines = ["# Written by segcat on every start; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def start(layout: Layout, settings: StackSettings, reporter: Reporter) -> process.PidRecord:
    """Fetch the jars if needed, write the config and launch S3Proxy; returns once it is spawned."""
    check_version(settings)
    java = kafka.find_java("S3Proxy")
    jar_dir = ensure_jars(layout, settings, reporter)
    keys = ensure_credentials(layout)
    layout.s3_data.mkdir(parents=True, exist_ok=True)
    layout.conf.mkdir(parents=True, exist_ok=True)
    props = properties_path(layout)
    secret_files.write_private(props, s3proxy_properties(layout, settings, keys))
    logback = layout.conf / "s3proxy-logback.xml"
    logback.write_text(_LOGBACK)
    log_path = layout.log_file(NAME)
    process.rotate_log(log_path)
    argv = [
        java,
        f"-Xmx{HEAP}",
        "-XX:+UseSerialGC",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlogback.configurationFile={logback}",
        "-cp",
        str(jar_dir / "*"),  # the JVM expands the wildcard itself
        MAIN_CLASS,
        "--properties",
        str(props),
    ]
    proc = process.spawn(argv, log_path=log_path, cwd=layout.home)
    record = process.record_for(proc, marker=marker(layout), address=address(settings))
    process.write_pid_file(layout.pid_file(NAME), record)
    reporter.info(f"Started S3Proxy {settings.s3proxy_version} (pid {proc.pid}) on {endpoint(settings)}")
    return record


def filesystem(
    settings: StackSettings, keys: Credentials, timeout_s: float, *, allow_bucket_creation: bool = False
) -> pafs.S3FileSystem:
    """A pyarrow client of our S3Proxy that gives up after one attempt (the caller retries)."""
    return pafs.S3FileSystem(
        access_key=keys.access_key,
        secret_key=keys.secret_key,
        region=REGION,
        scheme="http",
        endpoint_override=address(settings),
        connect_timeout=timeout_s,
        request_timeout=timeout_s,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        allow_bucket_creation=allow_bucket_creation,
    )


class S3Probe:
    """Answers only when an S3 API accepts *our* signature: an authenticated ListBuckets.

    A TCP connect succeeds while Jetty is up but the blob store is not, and any other S3
    server on the port would refuse our keys, so neither counts.
    """

    def __init__(self, layout: Layout, settings: StackSettings) -> None:
        self._layout = layout
        self._settings = settings

    def answers(self, timeout_s: float = 2.0) -> bool:
        keys = credentials(self._layout)
        if keys is None:
            return False
        try:
            fs = filesystem(self._settings, keys, timeout_s)
            fs.get_file_info(pafs.FileSelector("", recursive=False))
        except OSError:
            return False
        return True


# ---------------------------------------------------------------------------- the stack's API


def specs(layout: Layout, settings: StackSettings) -> list[ServiceSpec]:
    """One S3Proxy process when ``settings.s3`` asks for it, else none."""
    if not settings.s3:
        return []
    return [
        ServiceSpec(
            name=NAME,
            address=address(settings),
            ports=((settings.s3_port, "SEGCAT_STACK_S3_PORT"),),
            start=start,
            probe=lambda: S3Probe(layout, settings).answers,
        )
    ]


def finish(layout: Layout, settings: StackSettings, reporter: Reporter) -> None:
    """Make sure the warehouse bucket exists (idempotent: an existing bucket is left as it is)."""
    if not settings.s3:
        return
    bucket = settings.s3_bucket
    keys = ensure_credentials(layout)
    fs = filesystem(settings, keys, 10.0, allow_bucket_creation=True)
    try:
        if fs.get_file_info(bucket).type == pafs.FileType.Directory:
            return
        fs.create_dir(bucket)
    except OSError as exc:
        # A racing ``up`` may have created it meanwhile; only a bucket that is still missing is an error.
        with contextlib.suppress(OSError):
            if fs.get_file_info(bucket).type == pafs.FileType.Directory:
                return
        where = endpoint(settings)
        raise StackError(f"could not create bucket {bucket!r} on S3Proxy at {where}: {exc}") from exc
    reporter.info(f"Created bucket {bucket} on {endpoint(settings)}")


def client_settings(layout: Layout, settings: StackSettings) -> list[ClientSetting]:
    """A warehouse in the stack's bucket, the endpoint, and the keys as the standard AWS variables.

    pyarrow (``objectstore.s3_filesystem``) and Spark's s3a both read ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY``; both are secret files (made by the first start), never printed.
    """
    if not settings.s3:
        return []
    return [
        ClientSetting("SEGCAT_WAREHOUSE", f"s3://{settings.s3_bucket}/{WAREHOUSE_PREFIX}"),
        ClientSetting("SEGCAT_S3_ENDPOINT", endpoint(settings)),
        ClientSetting("SEGCAT_S3_REGION", REGION),
        ClientSetting("AWS_ACCESS_KEY_ID", secret_file=access_key_file(layout)),
        ClientSetting("AWS_SECRET_ACCESS_KEY", secret_file=secret_key_file(layout)),
    ]
