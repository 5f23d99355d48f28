"""The dashboard's pages and static files (the project's own JS/CSS and uPlot, vendored from npm)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from segcat.catalog.protocol.names import table_name

STATIC = Path(__file__).parent / "static"
_PAGE_HEADERS = {
    # the page may load nothing from anywhere but this server
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def overview() -> FileResponse:
    return FileResponse(STATIC / "index.html", headers=_PAGE_HEADERS)


@router.get("/tables/{table}")
async def table_page(table: str) -> FileResponse:
    table_name(table)  # a bad name is a 400 here too, not an empty page
    return FileResponse(STATIC / "table.html", headers=_PAGE_HEADERS)


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC, check_dir=False), name="static")
