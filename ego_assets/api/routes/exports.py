"""``GET`` and ``POST /captures/{captureId}/export-…``: an export's state, and asking for it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from ego_assets.api.context import ApiContext, Context
from ego_assets.exports import registry


class ExportRequest(BaseModel):
    """Body of ``POST .../export-lerobot`` and ``.../export-webdataset``."""

    model_config = ConfigDict(extra="forbid", strict=True)  # true/false only, never "yes"
    force: bool = Field(default=False, description="export again even when a current one exists")


class Hdf5ExportRequest(ExportRequest):
    """Body of ``POST .../export-hdf5``."""

    decodeFrames: bool = Field(default=False, description="also write decoded video frames")


async def read_export(ctx: ApiContext, request: Request, capture_id: str, fmt: str) -> Response:
    """The export's state: from the mirror, else read now (and shared)."""
    caller = ctx.authorize(request)
    target = ctx.target_for(caller, capture_id, fmt)
    state = ctx.served.cached(target)
    if state is None:
        await ctx.known(target)
        state = await run_in_threadpool(ctx.served.load, target)
    return ctx.answer(state)


async def ask_export(
    ctx: ApiContext, request: Request, capture_id: str, fmt: str, model: type[ExportRequest]
) -> Response:
    """Ask for the export: 202 with a new run, 200 with the open run or a current artefact."""
    caller = ctx.authorize(request)
    target = ctx.target_for(caller, capture_id, fmt)
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(400, "the request body is not UTF-8") from exc
    try:
        ask = model.model_validate_json(text) if text.strip() else model()
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    await ctx.known(target)
    options: dict[str, Any] = {}
    if isinstance(ask, Hdf5ExportRequest):
        options["decode_frames"] = ask.decodeFrames
    queued, state = await run_in_threadpool(
        lambda: ctx.served.ask(target, force=ask.force, options=options)
    )
    return ctx.answer(state, 202 if queued else 200)


def _add_routes(router: APIRouter, fmt: str, route: str, model: type[ExportRequest]) -> None:
    path = f"/captures/{{captureId}}/{route}"

    async def get_export(captureId: str, request: Request, ctx: Context) -> Response:
        return await read_export(ctx, request, captureId, fmt)

    async def post_export(captureId: str, request: Request, ctx: Context) -> Response:
        return await ask_export(ctx, request, captureId, fmt, model)

    body_schema = {"content": {"application/json": {"schema": model.model_json_schema()}}}
    router.add_api_route(path, get_export, methods=["GET"], name=f"get {route}")
    router.add_api_route(
        path,
        post_export,
        methods=["POST"],
        name=f"post {route}",
        openapi_extra={"requestBody": {"required": False, **body_schema}},
    )


def export_router() -> APIRouter:
    """A GET and a POST route per export format."""
    router = APIRouter()
    for export in registry.formats():
        model = Hdf5ExportRequest if "decode_frames" in export.options else ExportRequest
        _add_routes(router, export.name, export.route, model)
    return router
