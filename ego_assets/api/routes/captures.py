"""``GET /captures?after=…``: the captures page (`ego_assets.api.page`)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ego_assets.api.context import Context
from ego_assets.api.page import PAGE_SIZE, CursorError, captures_rows, html_page, render_page

router = APIRouter(include_in_schema=False)
MAX_CURSOR_CHARS = 512


@router.get("/captures", response_class=HTMLResponse)
async def captures_page(request: Request, ctx: Context) -> Response:
    caller = ctx.caller_of(request, page=True)
    if caller is None:
        return RedirectResponse("/login", status_code=303)
    request.state.caller = caller
    after = request.query_params.get("after") or None
    if after is not None and len(after) > MAX_CURSOR_CHARS:
        raise HTTPException(422, "not a captures page cursor")
    try:
        rows, next_after = await run_in_threadpool(
            captures_rows, ctx.served, ctx.config, caller, ctx.download_url, after, PAGE_SIZE
        )
    except CursorError as exc:
        raise HTTPException(422, str(exc)) from exc
    next_url = f"/captures?after={quote(next_after)}" if next_after else None
    return html_page(render_page(caller, rows, next_url))
