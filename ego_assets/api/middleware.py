"""The export API's ASGI middleware: the polls' fast path (`FastGets`) and the access
log (`AccessLog`)."""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ego_assets.api.config import Caller
from ego_assets.api.context import ApiContext
from ego_assets.dagster_client import ExportTarget, export_target
from ego_assets.errors import CaptureKeyError
from ego_assets.exports import registry

access_log = logging.getLogger("ego_assets.api.access")
# Remembered (organization, capture, format) look-ups of the GET fast path.
FAST_CACHE_SIZE = 10_000


class FastGets:
    """Answers ``GET /captures/{id}/export-…`` from the mirror when `lookup` has the
    answer (a known token, a valid id of its organization, a state in the mirror), with
    what the GET route would answer, without the router, validation and dependency
    machinery; everything else, errors included, goes on to the app."""

    def __init__(self, app: ASGIApp, context: ApiContext) -> None:
        self.app = app
        self.ctx = context
        self.formats_by_route = {f.route: f.name for f in registry.formats()}
        # (organization, capture, format) -> the export, None: the route answers 404;
        # only valid capture ids (at most 128 characters) are remembered, at most
        # `FAST_CACHE_SIZE` of them. Tokens are not remembered: a token's caller is one
        # SHA-256 and one dict look-up away (`ApiConfig.caller`).
        self.targets: dict[tuple[str, str, str], ExportTarget | None] = {}

    def lookup(self, scope: Scope) -> tuple[Caller, bytes] | None:
        """The caller and the answer's body, or None when the route must answer."""
        parts = scope["path"].split("/")
        if scope["method"] != "GET" or len(parts) != 4 or parts[1] != "captures":
            return None
        fmt = self.formats_by_route.get(parts[3])
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        if fmt is None or header[:7].lower() != b"bearer ":
            return None
        config = self.ctx.config
        caller = config.caller(header[7:].decode("latin-1").strip())
        if caller is None:
            return None  # the route answers 401
        key = (caller.organization, parts[2], fmt)
        if key not in self.targets:
            try:
                target = export_target(parts[2], fmt)
            except CaptureKeyError:
                return None  # the route answers 422
            if len(self.targets) >= FAST_CACHE_SIZE:
                self.targets.clear()
            owned = config.owns(caller, target.capture_id)
            self.targets[key] = target if owned else None  # else the route answers 404
        found = self.targets[key]
        state = self.ctx.served.cached(found) if found is not None else None
        return None if state is None else (caller, self.ctx.rendered(state))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self.lookup(scope) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        caller, body = found
        scope.setdefault("state", {})["caller"] = caller  # for the access log
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class AccessLog:
    """One log line per request: method, path, status, the token's id (never the token) and
    the time to the response's start (a plain ASGI middleware: no per-request task)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            caller = scope.get("state", {}).get("caller")
            access_log.info(
                "%s %s %d token=%s %.1fms",
                scope["method"],
                scope["path"],
                status[0],
                caller.token_id if caller else "-",
                (time.perf_counter() - started) * 1000,
            )
