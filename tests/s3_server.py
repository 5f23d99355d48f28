"""A real S3 API for the tests: S3Proxy from the local stack (``segcat.local_stack.s3proxy``).

One server per test session, started on first use on a free loopback port with a data dir
of its own, and stopped when its last user is done. Its home is a fresh temp dir whose
``s3proxy/`` links to ``<repo>/.segcat/s3proxy``, so the jars are fetched with Maven once
and shared with ``segcat stack up --s3`` and every later run. While it runs, the standard
``AWS_*`` variables hold its keys, as a user's would (pyarrow and Spark's s3a read them).

A server that cannot start is ``service_failure``: a skip on a laptop, a failure in CI.
Import the fixture into a test module with ``from tests.s3_server import s3_server``.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from segcat.catalog.config import Config
from segcat.catalog.errors import SegcatError
from segcat.local_stack import process, s3proxy
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import Layout
from segcat.local_stack.private import free_port
from segcat.local_stack.report import LogReporter
from segcat.local_stack.settings import StackSettings
from tests.services import LOCAL_STACK_HOME, service_failure

BUCKET = "segcat-test"
START_TIMEOUT_S = 120.0
_ATTEMPTS = 3
"""A free port can be taken between choosing it and S3Proxy binding it: then try another."""


@dataclass(frozen=True)
class S3Server:
    """A running S3Proxy with one bucket; ``repr`` leaves the secret key out."""

    endpoint: str
    """``http://127.0.0.1:<port>``, what ``SEGCAT_S3_ENDPOINT`` says."""
    bucket: str
    region: str
    data_dir: Path
    """S3Proxy's filesystem backend: ``<data_dir>/<bucket>/<key>`` is an object's bytes."""
    access_key: str
    secret_key: str = field(repr=False)

    def env(self) -> dict[str, str]:
        """The standard AWS variables for this server (no session token, no metadata service)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def warehouse(self) -> str:
        """A fresh warehouse URI in the bucket (tests never share one)."""
        return f"s3://{self.bucket}/{uuid.uuid4().hex}/warehouse"

    def config(self, base: Config, warehouse: str | None = None) -> Config:
        """``base`` with its warehouse on this server (a fresh one unless given)."""
        return replace(
            base, warehouse=warehouse or self.warehouse(), s3_endpoint=self.endpoint, s3_region=self.region
        )

    def filesystem(self) -> pafs.S3FileSystem:
        """A client of its own (not segcat's), to look at what segcat stored."""
        host = self.endpoint.split("://", 1)[1]
        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            scheme="http",
            endpoint_override=host,
        )

    def on_disk(self, uri: str) -> Path:
        """Where S3Proxy keeps the object ``s3://<bucket>/<key>`` (proof it went through the server)."""
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        return self.data_dir / bucket / key


def _start(home: Path, bucket: str) -> tuple[S3Server, process.PidRecord]:
    """Start S3Proxy in ``home`` and wait until it answers signed requests; StackError if not."""
    failure = "no attempt made"
    for _ in range(_ATTEMPTS):
        # The user's [stack] settings (SEGCAT_CONFIG) choose the S3Proxy version, as for `stack up`.
        settings = replace(StackSettings.load(), home=home, s3=True, s3_port=free_port(), s3_bucket=bucket)
        layout = Layout.of(settings)
        (spec,) = s3proxy.specs(layout, settings)
        reporter = LogReporter()
        record = spec.start(layout, settings, reporter)
        answers = spec.probe()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(2.0):
            if not process.is_ours(record) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        else:
            try:
                s3proxy.finish(layout, settings, reporter)
            except BaseException:
                process.stop(record, timeout_s=10.0)
                raise
            env = {c.name: c.reveal() for c in s3proxy.client_settings(layout, settings)}
            server = S3Server(
                endpoint=env["SEGCAT_S3_ENDPOINT"],
                bucket=bucket,
                region=env["SEGCAT_S3_REGION"],
                data_dir=layout.s3_data,
                access_key=env["AWS_ACCESS_KEY_ID"],
                secret_key=env["AWS_SECRET_ACCESS_KEY"],
            )
            return server, record
        log = process.tail(layout.log_file(s3proxy.NAME))
        process.stop(record, timeout_s=10.0)
        failure = f"S3Proxy did not answer on {spec.address}; last lines of its log:\n{log}"
        if "Address already in use" not in log:
            break
    raise StackError(failure)


@contextlib.contextmanager
def s3proxy_server(bucket: str = BUCKET) -> Iterator[S3Server]:
    """S3Proxy with ``bucket`` for the duration, the ``AWS_*`` variables set to its keys.

    Raises ``StackError`` (or another ``SegcatError``) when it cannot start: no Java, no Maven
    for the first fetch, a server that never answers.
    """
    home = Path(tempfile.mkdtemp(prefix="segcat-s3proxy-"))
    shared = LOCAL_STACK_HOME / "s3proxy"
    shared.mkdir(parents=True, exist_ok=True)
    (home / "s3proxy").symlink_to(shared, target_is_directory=True)
    record: process.PidRecord | None = None
    try:
        server, record = _start(home, bucket)
        with pytest.MonkeyPatch.context() as patch:
            for name, value in server.env().items():
                patch.setenv(name, value)
            patch.delenv("AWS_SESSION_TOKEN", raising=False)
            patch.delenv("AWS_PROFILE", raising=False)
            yield server
    finally:
        if record is not None:
            process.stop(record, timeout_s=30.0)
        shutil.rmtree(home, ignore_errors=True)  # the link goes, the shared jars stay


class _Shared:
    """The session's one server, started by its first user and stopped after its last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None
        self._server: S3Server | None = None
        self._users = 0

    def acquire(self) -> S3Server:
        """The running server (starting it if needed); raises ``SegcatError`` when it cannot start."""
        with self._lock:
            if self._server is None:
                stack = contextlib.ExitStack()
                self._server = stack.enter_context(s3proxy_server())
                self._stack = stack
            self._users += 1
            return self._server

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._stack is None:
                return
            stack, self._stack, self._server = self._stack, None, None
            stack.close()


shared = _Shared()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """The session's S3Proxy; fails in CI (skips elsewhere) when it cannot start."""
    try:
        server = shared.acquire()
    except SegcatError as exc:
        service_failure(f"could not start S3Proxy: {exc}")
    try:
        yield server
    finally:
        shared.release()
