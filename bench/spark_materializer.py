"""The materializer as the Spark benchmarks run it: a process of its own beside the session."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from segcat.catalog.config import Config


def spawn(config: Config, pattern: str) -> subprocess.Popen[bytes]:
    """The materializer as deployed: a process of its own, following only the tables ``pattern`` matches."""
    env = {
        **os.environ,
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url,
        "SEGCAT_WAREHOUSE": config.warehouse,
    }
    args = ["--pattern", pattern, "--group", f"bench-stream-{uuid.uuid4().hex[:8]}", "--instance-id", ""]
    return subprocess.Popen(
        [sys.executable, "-m", "segcat.materializer", *args, "--metrics-port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL when it has not exited within 30 s."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_for_heads(config: Config, offsets: dict[str, int], limit_s: float = 120.0) -> None:
    """Until Redis' head of every table reaches its offset (``TimeoutError`` after ``limit_s``)."""
    from segcat.catalog.storage.redis import RedisStore

    store = RedisStore.from_config(config)
    deadline = time.monotonic() + limit_s
    try:
        for name, offset in offsets.items():
            while True:
                head = store.head(name)
                if head is not None and head.offset >= offset:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the materializer did not reach offset {offset} of {name}")
                time.sleep(0.05)
    finally:
        store.close()
