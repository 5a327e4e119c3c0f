"""``/``, ``GET`` and ``POST /login``: signing in to the captures page with a token."""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ego_assets.api.context import SESSION_COOKIE, SESSION_TTL_S, Context
from ego_assets.api.page import login_page

router = APIRouter(include_in_schema=False)


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse("/captures", status_code=303)


@router.get("/login", response_class=HTMLResponse)
async def login_form() -> HTMLResponse:
    return HTMLResponse(login_page())


@router.post("/login")
async def login(request: Request, ctx: Context) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    if ctx.config.caller(token) is None:
        return HTMLResponse(login_page("unknown token"), status_code=401)
    response = RedirectResponse("/captures", status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        ctx.sessions.make(token),
        httponly=True,
        samesite="strict",
        max_age=SESSION_TTL_S,
    )
    return response
