"""The HTTP/1.1 connection of ``ego-assets serve``: uvicorn's httptools protocol with a
bounded, timed request head (uvicorn bounds neither: a 1 MB header was read whole, and
a connection that never finished its head stayed open).

* A head (request line and headers) over `MAX_HEAD_BYTES` is answered 431 and the
  connection closed as soon as its bytes arrive, before the parser has kept more than
  one read of them.
* A head not complete within `HEAD_TIMEOUT_S` of the connection's start (or of its last
  answer) closes the connection (408 when part of a head had arrived).

The app's own `Guard` checks the same limit on the parsed head, and the body's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from ego_assets.api.guard import HEAD_TIMEOUT_S, MAX_HEAD_BYTES, SECURITY_HEADERS, error_body


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` with the head limits above (``uvicorn.run(http=...)``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # between an answer (or the connection's start) and a full head
        self._head_bytes = 0  # bytes received since then
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > MAX_HEAD_BYTES:
            self._refuse(431, f"request headers over {MAX_HEAD_BYTES} bytes")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes = True, 0  # what follows is the next request's

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            return  # an answer is under way: its end arms the timer again
        if self._in_head and self._head_bytes:
            self._refuse(408, f"request headers not received within {HEAD_TIMEOUT_S:g} s")
        elif not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, status: int, detail: str) -> None:
        """Answer ``status`` with a one-line JSON error and close the connection."""
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # mid-answer (pipelined): no second status line
            return
        body = error_body(detail)
        head = [STATUS_LINE[status]]
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"connection", b"close"),
            *SECURITY_HEADERS,
        ]
        head += [name + b": " + value + b"\r\n" for name, value in headers]
        self.transport.write(b"".join(head) + b"\r\n" + body)
        self.transport.close()
        self._disarm_head_timer()
