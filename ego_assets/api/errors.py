"""How the export API answers what goes wrong: one-line JSON ``{"detail": ...}`` bodies
that never echo a request's values nor an internal message (docs/api.md, "Errors")."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from sqlalchemy.exc import OperationalError

from ego_assets.api.guard import error_body

log = logging.getLogger(__name__)

RETRY_AFTER_S = 10  # what a 503 asks the client to wait
MAX_ERRORS = 10  # validation errors listed in a 422
MAX_LOC_CHARS = 64  # a field name in a 422 is cut to this many characters


class ExportBlocked(Exception):
    """The export policy blocks this export of the capture: a run could not make it."""

    def __init__(self, message: str, reasons: tuple[str, ...]) -> None:
        super().__init__(message)
        self.reasons = reasons


class DagsterUnavailable(Exception):
    """The Dagster webserver (or instance) cannot be reached now."""


def json_error(status: int, detail: Any, headers: dict[str, str] | None = None) -> Response:
    body = error_body(detail) if isinstance(detail, str) else orjson.dumps({"detail": detail})
    return Response(body, status, headers=headers, media_type="application/json")


def validation_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic's errors without the input they were about (``loc``, ``msg``, ``type``;
    field names cut to `MAX_LOC_CHARS`)."""
    return [
        {
            "loc": [p[:MAX_LOC_CHARS] if isinstance(p, str) else p for p in e.get("loc", ())],
            "msg": str(e.get("msg", ""))[:200],
            "type": str(e.get("type", "")),
        }
        for e in list(errors)[:MAX_ERRORS]
    ]


def install_error_handlers(app: FastAPI) -> None:
    """422 without the input, 409 for a blocked export, 503 when Dagster is unreachable,
    500 with the trace in the log only."""

    async def invalid(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return json_error(422, validation_errors(exc.errors()))

    async def blocked(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ExportBlocked)
        body = orjson.dumps({"detail": str(exc), "reasons": list(exc.reasons)})
        return Response(body, 409, media_type="application/json")

    async def unavailable(request: Request, exc: Exception) -> Response:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        detail = "Dagster cannot be reached now: try again later"
        return json_error(503, detail, {"Retry-After": str(RETRY_AFTER_S)})

    async def internal(_: Request, exc: Exception) -> Response:
        # the server logs the trace (Starlette raises ``exc`` again after this answer)
        return json_error(500, "internal error (the server's log has the details)")

    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(ExportBlocked, blocked)
    app.add_exception_handler(DagsterUnavailable, unavailable)
    app.add_exception_handler(OperationalError, unavailable)  # the instance's database
    app.add_exception_handler(Exception, internal)
