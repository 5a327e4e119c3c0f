"""What every request meets before a route: size and time limits, and the security
headers of every answer (docs/api.md, "Limits and hostile input").

`Guard` (ASGI, in the app itself, so it holds under any server): a request whose line
and headers exceed `MAX_HEAD_BYTES` is answered 431, a body over `MAX_BODY_BYTES` 413
(by its ``Content-Length`` at once, else as it arrives), a body that does not arrive
within `BODY_TIMEOUT_S` 408; each with a one-line JSON ``{"detail": ...}`` that echoes
none of the request, and ``Connection: close``. The limits' bytes are read and dropped,
never kept. Every answer carries `SECURITY_HEADERS`.

Under ``ego-assets serve`` the connection itself is guarded too
(`ego_assets.api.protocol`): a head larger than `MAX_HEAD_BYTES` or slower than
`HEAD_TIMEOUT_S` closes it before the app sees a request.
"""

from __future__ import annotations

import asyncio
import time

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_HEAD_BYTES = 16 * 1024  # request line + headers (names and values)
MAX_BODY_BYTES = 16 * 1024  # a request body (the API's are a few dozen bytes)
HEAD_TIMEOUT_S = 10.0  # from a connection's start (or its last answer) to a complete head
BODY_TIMEOUT_S = 10.0  # from a complete head to the body's last byte
IDLE_TIMEOUT_S = 5.0  # a keep-alive connection with no request after an answer is closed
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# On every answer: no MIME sniffing, never in a frame, no Referer to other origins (the
# download links' signatures stay here; same-origin POSTs keep their Origin header).
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]


def error_body(detail: str) -> bytes:
    """A one-line JSON error: ``{"detail": "..."}``."""
    return orjson.dumps({"detail": detail})


async def refuse(send: Send, status: int, detail: str, close: bool = True) -> None:
    """Answer ``status`` with a one-line JSON ``detail`` (and close the connection)."""
    body = error_body(detail)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def head_bytes(scope: Scope) -> int:
    """Bytes of the request's path, query and headers (about its head's size)."""
    size = len(scope.get("raw_path") or b"") + len(scope.get("query_string", b""))
    return size + sum(len(name) + len(value) + 4 for name, value in scope["headers"])


class Guard:
    """Limits every request (see the module docstring) and adds `SECURITY_HEADERS`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *SECURITY_HEADERS]
            await send(message)

        if head_bytes(scope) > MAX_HEAD_BYTES:
            await refuse(send_secured, 431, f"request headers over {MAX_HEAD_BYTES} bytes")
            return
        length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if length is not None and (not length.isdigit() or len(length) > 12):
            await refuse(send_secured, 400, "Content-Length is not a number of bytes")
            return
        if length is not None and int(length) > MAX_BODY_BYTES:
            await refuse(send_secured, 413, f"request body over {MAX_BODY_BYTES} bytes")
            return
        if scope["method"] in BODY_METHODS:
            body, problem = await _read_body(receive)
            if problem is not None:
                if problem[0]:  # not a client that went away
                    await refuse(send_secured, *problem)
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send_secured)


async def _read_body(receive: Receive) -> tuple[bytes, tuple[int, str] | None]:
    """The whole body, or (status, detail) why not (status 0: the client disconnected)."""
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + BODY_TIMEOUT_S
    while True:
        try:
            message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return b"", (408, f"request body not received within {BODY_TIMEOUT_S:g} s")
        if message["type"] == "http.disconnect":
            return b"", (0, "")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return b"", (413, f"request body over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` first, then whatever the connection says."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
