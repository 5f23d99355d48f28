"""Every image docker-compose.yml names, built on this machine from what it can reach.

With no image registry, each image comes from a package registry instead: a Debian base from
``debootstrap`` (the mirror the host's apt uses), Java, Redis, Python and Node.js from Debian's
packages, Kafka and S3Proxy from the Maven jars the local stack already fetches, and the segcat
image from the project's own Dockerfile with those parents as build arguments. Builds run with
``--network host`` (the engine has no bridge) and the host's extra certificate authorities as
the Dockerfile's generic ``EXTRA_CA_CERTS`` argument. Docker's layer cache makes a second build
of an unchanged image take seconds.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from containers.engine import EngineError, install_packages
from containers.paths import BUILD_DIR, REPO_ROOT
from segcat.local_stack import jars as kafka_jars
from segcat.local_stack import s3proxy
from segcat.local_stack.layout import Layout
from segcat.local_stack.report import LogReporter
from segcat.local_stack.settings import StackSettings

HERE = Path(__file__).resolve().parent
PREFIX = "segcat-local"
SUITE = "bookworm"
BASE = f"{PREFIX}/debian:{SUITE}"
CA_GLOB_ENV = "SEGCAT_EXTRA_CA_CERTS"
DEFAULT_CA_GLOB = "/usr/local/share/ca-certificates/*.crt"


@dataclass(frozen=True)
class LocalImages:
    """The image names the compose override and the container tests use."""

    kafka: str
    redis: str
    s3: str
    segcat: str

    def compose_env(self) -> dict[str, str]:
        return {
            "KAFKA_IMAGE": self.kafka,
            "REDIS_IMAGE": self.redis,
            "S3_IMAGE": self.s3,
            "SEGCAT_IMAGE": self.segcat,
        }


def exists(image: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False)
    return done.returncode == 0


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror the host's apt uses (``SEGCAT_DEBIAN_MIRROR`` overrides it): the first
    deb822 stanza or one-line entry of the host's sources that serves the base's suite."""
    chosen = os.environ.get("SEGCAT_DEBIAN_MIRROR", "").strip()
    if chosen:
        return chosen
    for source in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in source.read_text(errors="replace").split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.MULTILINE)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.MULTILINE)
            enabled = re.search(r"^Enabled:\s*no\s*$", stanza, re.MULTILINE | re.IGNORECASE) is None
            if uris and suites and enabled and SUITE in suites.group(1).split():
                return uris.group(1)
    listing = apt_dir / "sources.list"
    if listing.is_file():
        for line in listing.read_text(errors="replace").splitlines():
            entry = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line.strip())
            if entry and entry.group(2) == SUITE:
                return entry.group(1)
    raise EngineError(f"no Debian {SUITE} mirror in the host's apt sources; set SEGCAT_DEBIAN_MIRROR")


def extra_ca_certs() -> str:
    """PEM text of the host's locally added authorities (Debian's place for them)."""
    pattern = os.environ.get(CA_GLOB_ENV, DEFAULT_CA_GLOB)
    return "".join(Path(p).read_text() for p in sorted(glob.glob(pattern)))


def build_base(say: Callable[[str], None]) -> str:
    """A minimal Debian from debootstrap, imported as an image, with the host's apt sources."""
    if exists(BASE):
        return BASE
    if shutil.which("debootstrap") is None:
        install_packages(["debootstrap"])
    mirror = debian_mirror()
    say(f"debootstrap --variant=minbase {SUITE} from the host's mirror")
    with tempfile.TemporaryDirectory(prefix="segcat-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        _run(["debootstrap", "--variant=minbase", SUITE, str(root), mirror], "debootstrap")
        sources = root / "etc/apt/sources.list.d"
        for source in glob.glob("/etc/apt/sources.list.d/*.sources"):
            shutil.copy(source, sources / Path(source).name)
        if any(sources.glob("*.sources")):
            (root / "etc/apt/sources.list").unlink(missing_ok=True)
        for deb in (root / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "-", BASE], stdin=tar.stdout, capture_output=True, text=True, check=False
        )
        if tar.stdout is not None:
            tar.stdout.close()
        tar.wait()
        if imported.returncode != 0:
            raise EngineError(f"docker import of the Debian base failed: {imported.stderr.strip()}")
    return BASE


def docker_build(tag: str, context: Path, say: Callable[[str], None], **build_args: str) -> str:
    say(f"docker build {tag}")
    argv = ["docker", "build", "--network", "host", "--quiet", "-t", tag]
    for key, value in build_args.items():
        argv += ["--build-arg", f"{key}={value}"]
    _run([*argv, str(context)], f"docker build {tag}")
    return tag


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-8:]
        raise EngineError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(tail))


def _context(name: str) -> Path:
    """A fresh build context holding the files of ``containers/<name>/``."""
    target = BUILD_DIR / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(HERE / name, target)
    return target


def build_all(say: Callable[[str], None] = print) -> LocalImages:
    """Build (or refresh from the layer cache) every image; returns their names."""
    settings = replace(StackSettings.load(), home=REPO_ROOT / ".segcat")
    layout = Layout.of(settings)
    reporter = LogReporter()
    base = build_base(say)
    jre = docker_build(f"{PREFIX}/jre:17", HERE / "jre", say, BASE_IMAGE=base)
    redis = docker_build(f"{PREFIX}/redis:7", HERE / "redis", say, BASE_IMAGE=base)
    python = docker_build(f"{PREFIX}/python:3.11", HERE / "python", say, BASE_IMAGE=base)
    node = docker_build(f"{PREFIX}/node:{SUITE}", HERE / "node", say, BASE_IMAGE=base)

    kafka_context = _context("kafka")
    shutil.copytree(kafka_jars.ensure_jars(layout, reporter), kafka_context / "jars")
    _fetch_kafka_tools(settings.kafka_version, kafka_context / "jars")
    shutil.copy(REPO_ROOT / "local_stack" / "log4j2.properties", kafka_context / "log4j2.properties")
    kafka = docker_build(f"{PREFIX}/kafka:{settings.kafka_version}", kafka_context, say, JRE_IMAGE=jre)

    s3_context = _context("s3proxy")
    shutil.copytree(s3proxy.ensure_jars(layout, settings, reporter), s3_context / "jars")
    s3 = docker_build(f"{PREFIX}/s3proxy:{settings.s3proxy_version}", s3_context, say, JRE_IMAGE=jre)

    segcat = docker_build(
        f"{PREFIX}/segcat:dev",
        REPO_ROOT,
        say,
        PYTHON_IMAGE=python,
        NODE_IMAGE=node,
        EXTRA_CA_CERTS=extra_ca_certs(),
    )
    return LocalImages(kafka=kafka, redis=redis, s3=s3, segcat=segcat)


def _fetch_kafka_tools(version: str, into: Path) -> None:
    """kafka-tools (ClusterTool, for the health check): the broker's own jars carry the rest."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise EngineError("Maven (mvn) is needed to fetch kafka-tools for the Kafka image")
    _run(
        [
            mvn,
            "-B",
            "-q",
            "--no-transfer-progress",
            f"{kafka_jars.DEPENDENCY_PLUGIN}:copy",
            f"-Dartifact=org.apache.kafka:kafka-tools:{version}",
            f"-DoutputDirectory={into}",
        ],
        "mvn dependency:copy kafka-tools",
    )
