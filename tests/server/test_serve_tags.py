"""Tags in ``segcat serve``: in the table's JSON, at ``/tags``, and read by ``/snapshot?tag=``."""

from __future__ import annotations

import httpx
import pytest

from segcat import Table, load_catalog
from segcat.catalog.config import Config
from tests.factories import segment
from tests.server_support import serving

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


def test_tags_are_listed_and_readable_by_name(config: Config, table: Table) -> None:
    name = table.name.qualified
    with load_catalog(config).load_table(name) as writer:
        first = writer.append([segment("a")])
        writer.append([segment("b")])
        writer.tag("v1", first)
    with serving(config) as url:
        api = f"{url}/api/tables/{name}"
        head = httpx.get(api, timeout=60).json()
        assert head["tags"] == {"v1": first}
        listed = httpx.get(f"{api}/tags", timeout=60).json()
        assert listed["table"] == name and listed["tags"] == [{"name": "v1", "version": first}]
        snap = httpx.get(f"{api}/snapshot", params={"tag": "v1"}, timeout=60).json()
        assert snap["version"] == first and [s["segment_id"] for s in snap["segments"]] == ["a"]
        missing = httpx.get(f"{api}/snapshot", params={"tag": "v2"}, timeout=60)
        assert missing.status_code == 404 and "no tag 'v2'" in missing.text
        bad = httpx.get(f"{api}/snapshot", params={"tag": "9x"}, timeout=60)
        assert bad.status_code == 400 and "Traceback" not in bad.text
        both = httpx.get(f"{api}/snapshot", params={"tag": "v1", "version": first}, timeout=60)
        assert both.status_code == 400
