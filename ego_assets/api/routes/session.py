"""``/``, ``GET`` and ``POST /login``: signing in to the captures page with a token."""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ego_assets.api.context import (
    CROSS_ORIGIN,
    SESSION_COOKIE,
    SESSION_TTL_S,
    Context,
    same_origin,
)
from ego_assets.api.page import html_page, login_page

router = APIRouter(include_in_schema=False)


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse("/captures", status_code=303)


@router.get("/login", response_class=HTMLResponse)
async def login_form() -> HTMLResponse:
    return html_page(login_page())


@router.post("/login")
async def login(request: Request, ctx: Context) -> Response:
    """A session for a known token, sent from this server's sign-in form only (no login
    from another site's form: Origin/Referer)."""
    if not same_origin(request):
        raise HTTPException(403, CROSS_ORIGIN)
    try:
        form = parse_qs((await request.body()).decode("utf-8"), max_num_fields=4)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPException(400, "the form is not UTF-8 form data") from exc
    token = (form.get("token") or [""])[0].strip()
    if ctx.config.caller(token) is None:
        return html_page(login_page("unknown token"), 401)
    response = RedirectResponse("/captures", status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        ctx.sessions.make(token),
        httponly=True,
        samesite="strict",
        secure=ctx.secure_cookie(request),
        max_age=SESSION_TTL_S,
    )
    return response
