"""The dashboard in a real browser (Debian's headless Chromium driven by selenium).

A table with a few dozen commits of every kind (one of them rejected) is served by ``segcat serve``;
the table page and the overview must show a new commit without a reload (the table page within
a second of the commit returning), and neither page may ask anything of any other origin.
``SEGCAT_SAVE_SCREENSHOT=1`` keeps the table page's screenshot as docs/img/dashboard.png.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict
from segcat.catalog.storage.redis import RedisStore
from tests.factories import segment
from tests.materializer_support import head_offset, namespace, running_materializer, wait_for_head
from tests.server_support import serving

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REPO_ROOT = Path(__file__).resolve().parents[2]
VENDOR = REPO_ROOT / "server" / "static" / "vendor"
VENDOR_SCRIPT = REPO_ROOT / "server" / "web" / "vendor.sh"
SCREENSHOT = REPO_ROOT / "docs" / "img" / "dashboard.png"

LIVE_BUDGET_S = 1.0
"""How soon after a commit returns the table page must show it."""
OVERVIEW_FIRST_S = 120.0
"""How long the overview's first list may take: the server's first ``/api/tables`` reads the recent
log of every table its Redis has no head of, and a developer's long-lived test broker holds
well over a thousand tables the private Redis of this test knows nothing about."""

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": False},
            {"name": "day", "type": "date", "nullable": False},
            {"name": "country", "type": "string", "nullable": True},
            {"name": "amount", "type": "double", "nullable": True},
        ],
    }
)


def _missing(reason: str) -> None:
    """Fail in CI (a broken pipeline must not pass green), skip on a developer's machine."""
    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def _browser_present() -> None:
    """Checked before Kafka and Redis are started (autouse fixtures of a scope come first)."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            _missing(f"{path} is missing: apt-get install {package}")


@pytest.fixture(scope="session")
def vendored() -> None:
    """uPlot in server/static/vendor/ (vendor.sh is quick when it is already there)."""
    vendored = (VENDOR / "uPlot.iife.min.js").is_file() and (VENDOR / "uPlot.min.css").is_file()
    if not vendored and shutil.which("npm") is None:
        _missing("uPlot is not vendored and npm is missing: run server/web/vendor.sh")
    done = subprocess.run(["bash", str(VENDOR_SCRIPT)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        _missing(f"server/web/vendor.sh failed: {done.stderr.strip()[-2000:]}")


@pytest.fixture
def driver() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    try:
        browser = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    except WebDriverException as exc:
        _missing(f"headless chromium does not start: {exc.msg}")
        raise
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


class Requests:
    """Every request the browser's pages sent (from the DevTools performance log) and the
    JavaScript errors they logged; the logs are drained as they are read."""

    def __init__(self, driver: WebDriver) -> None:
        self.driver = driver
        self.urls: list[str] = []
        self.console: list[dict[str, Any]] = []

    def _log(self, kind: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.driver.get_log(kind)  # type: ignore[no-untyped-call]
        return entries

    def drain(self) -> None:
        for entry in self._log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                self.urls.append(message["params"]["request"]["url"])
            elif message.get("method") == "Network.webSocketCreated":
                self.urls.append(message["params"]["url"])
        self.console.extend(self._log("browser"))


def _wait(
    driver: WebDriver, script: str, *args: Any, timeout_s: float, poll_s: float = 0.02
) -> tuple[bool, float]:
    """Poll a JavaScript expression until it is truthy; (whether it was, seconds waited)."""
    started = time.monotonic()
    while True:
        if driver.execute_script(script, *args):
            return True, time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            return False, time.monotonic() - started
        time.sleep(poll_s)


def _require(driver: WebDriver, script: str, *args: Any, timeout_s: float, what: str) -> float:
    ok, waited = _wait(driver, script, *args, timeout_s=timeout_s)
    if not ok:
        banner = driver.execute_script(
            "const b = document.getElementById('banner'); return b && !b.hidden ? b.textContent : ''"
        )
        raise AssertionError(f"{what} within {timeout_s} s (banner: {banner!r})")
    return waited


HEAD_IS = "return document.getElementById('head-version')?.textContent === arguments[0]"
SHOWS_VERSION = (
    "return document.getElementById('head-version')?.textContent === arguments[0]"
    ' && document.querySelector(`#timeline [data-version="${arguments[0]}"]`) !== null'
)
OVERVIEW_SHOWS = (
    "const row = [...document.querySelectorAll('tr[data-table]')]"
    ".find((r) => r.dataset.table === arguments[0]);"
    "return row?.querySelector('.version')?.textContent === arguments[1]"
)
OVERVIEW_ROWS = (
    "const names = [...document.querySelectorAll('tr[data-table]')].map((r) => r.dataset.table);"
    "return JSON.stringify(names) === JSON.stringify(arguments[0])"
)
MORE_SHOWN = "return document.getElementById('more')?.hidden === false"
LIVE = "return document.getElementById('live')?.classList.contains('live-on') === true"
PLOTS_DRAWN = (
    "return typeof uPlot !== 'undefined' && document.querySelectorAll('#plots canvas').length >= 5"
    " && document.querySelectorAll('#log-body tr.rec-rejected').length > 0"
    " && document.querySelectorAll('#diff-result table').length > 0"
)


def _commit_history(config: Config, table: str, writer: Table) -> int:
    """About twenty commits of every kind, one of them rejected; returns the rejected one's offset."""
    writer.set_schema(SCHEMA)
    writer.set_properties({"owner": "analytics", "retention.days": "30", "team": "payments"})
    days = ["2026-11-01", "2026-11-02", "2026-11-03"]
    for k in range(8):
        writer.append(
            [segment(f"a{k}-{j}", days[(k + j) % 3], rows=40 + 13 * k + 5 * j) for j in range(1 + k % 3)],
            properties={"spark.app": f"ingest-{k // 3}"},
        )
    with load_catalog(config).load_table(table, writer_id="compactor-late") as late:
        late.refresh()  # its image stops here: its compaction below loses to the one of `writer`
        live = sorted(writer.refresh().segments)
        writer.compact(live[:3], [segment("c0", days[0], rows=150)])
        try:
            late.compact([live[0], live[3]], [segment("c-late", days[0], rows=90)])
        except CommitConflict as conflict:
            rejected = conflict.version
        else:
            raise AssertionError("the stale compaction was accepted")
    assert rejected is not None
    for k in range(8, 12):
        writer.append([segment(f"a{k}-0", days[k % 3], rows=60 + 7 * k)])
    writer.delete(predicates=["country = 'XX'"])
    live = sorted(writer.refresh().segments)
    writer.compact(live[:4], [segment("c1", days[1], rows=210)])
    writer.replace([segment("r0", days[2], rows=120)], scope=[days[2]])
    writer.set_properties({"retention.days": "45"})
    for k in range(12, 15):
        writer.append([segment(f"a{k}-0", days[k % 3], rows=30 + 9 * k)])
    return rejected


def test_the_dashboard_follows_commits_live_and_stays_on_its_origin(
    mconfig: Config, driver: WebDriver, vendored: None, tmp_path: Path
) -> None:
    ns, pattern = namespace()
    name = f"{ns}.orders"
    Catalog(mconfig).create_table(name)
    Catalog(mconfig).create_table(f"{ns}.accounts")  # the first page of one: orders is on the second
    requests = Requests(driver)
    with (
        running_materializer(mconfig, pattern),
        load_catalog(mconfig).load_table(name, writer_id="ingest-7f3a") as writer,
    ):
        rejected = _commit_history(mconfig, name, writer)
        wait_for_head(RedisStore.from_config(mconfig), name, head_offset(mconfig, name))
        head = writer.refresh().last_accepted_version
        with serving(mconfig) as base:
            origin = urlsplit(base)

            # the table page: the head, then a commit from here shows up live
            driver.get(f"{base}/tables/{name}")
            _require(driver, HEAD_IS, str(head), timeout_s=15, what=f"#head-version shows {head}")
            _require(driver, LIVE, timeout_s=10, what="the table page's event stream opens")
            _require(driver, PLOTS_DRAWN, timeout_s=10, what="plots, the rejected record and the diff drawn")
            loaded_at = driver.execute_script("return window.__loadedAt")
            driver.execute_script("window.__sameDocument = 'yes'")

            version = writer.append([segment("live-0", "2026-11-03", rows=77)])
            returned = time.monotonic()
            ok, _ = _wait(driver, SHOWS_VERSION, str(version), timeout_s=LIVE_BUDGET_S)
            late_by = time.monotonic() - returned
            if not ok:  # how late was it, if it came at all?
                shown, waited = _wait(driver, SHOWS_VERSION, str(version), timeout_s=15)
                late_by += waited if shown else float("inf")
            assert ok, f"version {version} took {late_by:.2f} s to show (budget {LIVE_BUDGET_S} s)"
            assert driver.execute_script("return window.__loadedAt") == loaded_at
            assert driver.execute_script("return window.__sameDocument") == "yes", "the page was reloaded"
            log_rows = driver.execute_script(
                "return [...document.querySelectorAll('#log-body tr')].map((r) => r.dataset.offset)"
            )
            assert str(rejected) in log_rows

            # the log catches up with the new record; then the picture
            _require(
                driver,
                'return document.querySelector(`#log-body tr[data-offset="${arguments[0]}"]`) !== null',
                str(version),
                timeout_s=10,
                what="the log shows the new record",
            )
            time.sleep(1.8)  # let the highlight of the new version fade
            _screenshot(driver, tmp_path)
            requests.drain()

            # the overview in pages of one table: accounts, then "Load more" adds orders' row;
            # then another commit moves it without a reload
            driver.get(f"{base}/?namespace={ns}&limit=1")
            # (the server's first list of a big shared test broker is slow: see OVERVIEW_FIRST_S)
            _require(
                driver, OVERVIEW_ROWS, [f"{ns}.accounts"], timeout_s=OVERVIEW_FIRST_S, what="the first page"
            )
            _require(driver, MORE_SHOWN, timeout_s=10, what="the overview offers the next page")
            driver.execute_script("document.getElementById('more').click()")
            _require(
                driver,
                OVERVIEW_SHOWS,
                name,
                str(version),
                timeout_s=30,
                what=f"overview's second page shows v{version}",
            )
            _require(driver, OVERVIEW_ROWS, [f"{ns}.accounts", name], timeout_s=10, what="both pages")
            _require(
                driver, "return document.getElementById('more').hidden", timeout_s=10, what="no third page"
            )
            _require(driver, LIVE, timeout_s=10, what="the overview's event stream opens")
            driver.execute_script("window.__sameDocument = 'overview'")
            version = writer.append([segment("live-1", "2026-11-03", rows=12)])
            # well before the list's next read (every 5 s): this is the event stream's doing
            _require(
                driver, OVERVIEW_SHOWS, name, str(version), timeout_s=3, what=f"overview shows v{version}"
            )
            assert driver.execute_script("return window.__sameDocument") == "overview"

            requests.drain()
            driver.get("about:blank")  # closes the event streams before the server stops

    assert requests.urls, "the performance log recorded no request"
    elsewhere = [
        url
        for url in requests.urls
        if urlsplit(url).scheme != "data" and urlsplit(url)[:2] != (origin.scheme, origin.netloc)
    ]
    assert not elsewhere, f"requests outside {base}: {elsewhere}"
    paths = {urlsplit(url).path for url in requests.urls}
    assert {"/static/vendor/uPlot.iife.min.js", "/api/events", f"/api/tables/{name}/events"} <= paths
    errors = [e for e in requests.console if e.get("level") == "SEVERE" and e.get("source") == "javascript"]
    assert not errors, f"JavaScript errors: {errors}"


def _screenshot(driver: WebDriver, tmp_path: Path) -> None:
    """The table page at its full height (at most 2,400 px), to docs/img/ when asked."""
    target = SCREENSHOT if os.environ.get("SEGCAT_SAVE_SCREENSHOT") == "1" else tmp_path / "dashboard.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    before = driver.get_window_size()
    frame = int(driver.execute_script("return window.outerHeight - window.innerHeight"))
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(before["width"], min(max(height, 1000), 2400) + frame)
    time.sleep(0.5)  # the plots follow the new size
    assert driver.save_screenshot(str(target))
    driver.set_window_size(before["width"], before["height"])
    size = target.stat().st_size
    assert size > 20_000, f"{target} is only {size} bytes"
