"""The export API and captures page (FastAPI): see docs/api.md for every route.

``create_app(service, config, presigner, store)`` builds the ASGI app over a snapshot
store (`ego_assets.api.snapshot`); ``ego-assets serve`` (`serve_from_env`) starts the
refresher process and runs ``--workers`` server processes under uvicorn (uvloop,
httptools), each building its app from the environment (`app_from_env`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import logging.handlers
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import orjson
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ego_assets.api.config import ApiConfig, Caller, hash_token
from ego_assets.api.links import LinkSigner, Presigner, is_file
from ego_assets.api.page import PAGE_SIZE, captures_rows, login_page, render_page
from ego_assets.api.service import ExportService, ExportState
from ego_assets.api.snapshot import SYNC_S, ServedStates, SnapshotStore
from ego_assets.catalog.receipts import ExportReceipt, read_receipt
from ego_assets.defs.exports import ExportTarget, export_target
from ego_assets.errors import CaptureKeyError
from ego_assets.exports import registry
from ego_assets.storage import is_local

access_log = logging.getLogger("ego_assets.api.access")
SESSION_COOKIE = "ego_session"
SESSION_TTL_S = 12 * 3600
# What the captures page sends with every API call it makes with its session cookie (a
# cross-site form or image cannot set a header, so a cookie alone never exports).
PAGE_HEADER = "x-ego-page"
# Set by `ego-assets serve` for its worker processes (`app_from_env`).
STATE_DIR_ENV = "EGO_API_STATE_DIR"
DAGSTER_URL_ENV = "EGO_DAGSTER_URL"
# Remembered tokens and (organization, capture, format) look-ups of the GET fast path.
FAST_CACHE_SIZE = 10_000
# Mirror syncs between two hand-overs of the asked-about exports to the refresher.
WATCH_EVERY = 10


class ExportRequest(BaseModel):
    """Body of ``POST .../export-lerobot`` and ``.../export-webdataset``."""

    model_config = ConfigDict(extra="forbid")
    force: bool = Field(default=False, description="export again even when a current one exists")


class Hdf5ExportRequest(ExportRequest):
    """Body of ``POST .../export-hdf5``."""

    decodeFrames: bool = Field(default=False, description="also write decoded video frames")


class _Sessions:
    """Signed page sessions: ``<token digest>.<expiry>.<hmac>`` in an HttpOnly cookie."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _sig(self, digest: str, expires: int) -> str:
        return hmac.new(self._secret, f"{digest}.{expires}".encode(), hashlib.sha256).hexdigest()

    def make(self, token: str) -> str:
        expires = int(time.time()) + SESSION_TTL_S
        digest = hash_token(token).removeprefix("sha256:")
        return f"{digest}.{expires}.{self._sig(digest, expires)}"

    def digest(self, cookie: str) -> str | None:
        parts = cookie.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        digest, expires, sig = parts[0], int(parts[1]), parts[2]
        if not hmac.compare_digest(sig, self._sig(digest, expires)) or expires < time.time():
            return None
        return digest


def create_app(
    service: ExportService,
    config: ApiConfig,
    presigner: Presigner | None = None,
    store: SnapshotStore | None = None,
) -> FastAPI:
    """The ASGI app over ``service`` and the snapshots in ``store`` (a private one in a
    temporary folder when None); presigned S3 links when ``presigner`` is given."""
    if store is None:
        store = SnapshotStore(tempfile.mkdtemp(prefix="ego-api-state-"))
    service.ask_lock = store.ask_lock
    served = ServedStates(service, store)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(_keep_synced(served))
        try:
            yield
        finally:
            task.cancel()

    app = FastAPI(
        title="ego_assets export API",
        description="Ask for a capture's export, follow its Dagster run, download the file.",
        version="1",
        lifespan=lifespan,
    )
    signer = LinkSigner(config.link_secret, config.link_ttl_s)
    sessions = _Sessions(config.link_secret)

    def caller_of(request: Request, *, page: bool = False) -> Caller | None:
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            return config.caller(header[7:].strip())
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie and (page or request.headers.get(PAGE_HEADER)):
            digest = sessions.digest(cookie)
            return config.tokens.get(f"sha256:{digest}") if digest else None
        return None

    def authorize(request: Request) -> Caller:
        caller = caller_of(request)
        if caller is None:
            raise HTTPException(
                401, "missing or unknown bearer token", headers={"WWW-Authenticate": "Bearer"}
            )
        request.state.caller = caller
        return caller

    def target_for(caller: Caller, capture_id: str, export_format: str) -> ExportTarget:
        try:
            target = export_target(capture_id, export_format)
        except CaptureKeyError as exc:
            raise HTTPException(422, f"invalid capture id: {exc}") from exc
        if not config.owns(caller, target.capture_id):
            raise HTTPException(404, f"capture {capture_id} not found")
        return target

    def download_url(receipt: ExportReceipt) -> str:
        if presigner is not None and is_file(receipt):
            return presigner.url(receipt)
        return signer.local_url(receipt.format, receipt.capture_key, receipt.sha256)

    # A state's JSON (with its download link, presigned or signed) is reused for a while:
    # far shorter than the links' lifetime, so a link handed out is always long valid.
    reuse_s = min(60.0, config.link_ttl_s / 10)

    def rendered(state: ExportState) -> bytes:
        now = time.monotonic()
        if state.rendered is None or now - state.rendered[0] > reuse_s:
            state.rendered = (now, orjson.dumps(state.to_json(download_url)))
        return state.rendered[1]

    def answer(state: ExportState, status_code: int = 200) -> Response:
        return Response(rendered(state), status_code, media_type="application/json")

    # The polls' fast path (`FastGets`): what the GET route answers for a state in the
    # mirror, without the router, validation and dependency machinery. Tokens and
    # (organization, capture, format) look-ups are remembered (bounded).
    formats_by_route = {f.route: f.name for f in registry.formats()}
    callers: dict[bytes, Caller | None] = {}
    targets: dict[tuple[str, str, str], ExportTarget | None] = {}

    def fast_get(scope: Scope) -> tuple[Caller, bytes] | None:
        parts = scope["path"].split("/")
        if scope["method"] != "GET" or len(parts) != 4 or parts[1] != "captures":
            return None
        fmt = formats_by_route.get(parts[3])
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        if fmt is None or header[:7].lower() != b"bearer ":
            return None
        if header not in callers:
            if len(callers) >= FAST_CACHE_SIZE:
                callers.clear()
            callers[header] = config.caller(header[7:].decode("latin-1").strip())
        caller = callers[header]
        if caller is None:
            return None  # the route answers 401
        key = (caller.organization, parts[2], fmt)
        if key not in targets:
            if len(targets) >= FAST_CACHE_SIZE:
                targets.clear()
            try:
                target: ExportTarget | None = export_target(parts[2], fmt)
            except CaptureKeyError:
                target = None  # the route answers 422
            if target is not None and not config.owns(caller, target.capture_id):
                target = None  # the route answers 404
            targets[key] = target
        found = targets[key]
        state = served.cached(found) if found is not None else None
        return None if state is None else (caller, rendered(state))

    app.add_middleware(FastGets, lookup=fast_get)
    app.add_middleware(AccessLog)  # outside FastGets: every request is logged

    async def known(target: ExportTarget) -> None:
        if not await run_in_threadpool(service.capture_exists, target.capture_id):
            raise HTTPException(404, f"capture {target.capture_id} not found")

    for export in registry.formats():
        export_format, route = export.name, export.route
        body_model: type[ExportRequest] = (
            Hdf5ExportRequest if "decode_frames" in export.options else ExportRequest
        )

        def make_routes(fmt: str, model: type[ExportRequest], route: str) -> None:
            @app.get(f"/captures/{{captureId}}/{route}", name=f"get {route}")
            async def get_export(captureId: str, request: Request) -> Response:
                caller = authorize(request)
                target = target_for(caller, captureId, fmt)
                state = served.cached(target)
                if state is None:
                    await known(target)
                    state = await run_in_threadpool(served.load, target)
                return answer(state)

            body_schema = {"content": {"application/json": {"schema": model.model_json_schema()}}}

            @app.post(
                f"/captures/{{captureId}}/{route}",
                name=f"post {route}",
                openapi_extra={"requestBody": {"required": False, **body_schema}},
            )
            async def post_export(captureId: str, request: Request) -> Response:
                caller = authorize(request)
                target = target_for(caller, captureId, fmt)
                raw = await request.body()
                try:
                    ask = model.model_validate_json(raw) if raw.strip() else model()
                except ValidationError as exc:
                    raise RequestValidationError(exc.errors(include_url=False)) from exc
                await known(target)
                options: dict[str, Any] = {}
                if isinstance(ask, Hdf5ExportRequest):
                    options["decode_frames"] = ask.decodeFrames
                queued, state = await run_in_threadpool(
                    lambda: served.ask(target, force=ask.force, options=options)
                )
                return answer(state, 202 if queued else 200)

        make_routes(export_format, body_model, route)

    @app.get("/downloads/{fmt}/{captureId}", name="download")
    async def download(fmt: str, captureId: str, sha256: str, expires: int, sig: str) -> Response:
        problem = signer.check(fmt, captureId, sha256, expires, sig)
        if problem is not None:
            raise HTTPException(403, problem)
        try:
            target = export_target(captureId, fmt)
        except (CaptureKeyError, KeyError) as exc:
            raise HTTPException(404, str(exc)) from exc
        receipt = await run_in_threadpool(
            read_receipt, service.storage, target.format, target.partition_key
        )
        if receipt is None or receipt.sha256 != sha256:
            raise HTTPException(410, "this export was replaced or removed: ask for it again")
        return await run_in_threadpool(_send, service, receipt)

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/captures", status_code=303)

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    async def login_form() -> HTMLResponse:
        return HTMLResponse(login_page())

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        if config.caller(token) is None:
            return HTMLResponse(login_page("unknown token"), status_code=401)
        response = RedirectResponse("/captures", status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            sessions.make(token),
            httponly=True,
            samesite="strict",
            max_age=SESSION_TTL_S,
        )
        return response

    @app.get("/captures", response_class=HTMLResponse, include_in_schema=False)
    async def captures_page(request: Request) -> Response:
        caller = caller_of(request, page=True)
        if caller is None:
            return RedirectResponse("/login", status_code=303)
        request.state.caller = caller
        after = request.query_params.get("after") or None
        try:
            rows, next_after = await run_in_threadpool(
                captures_rows, served, config, caller, download_url, after, PAGE_SIZE
            )
        except ValueError as exc:  # not a page cursor
            raise HTTPException(422, str(exc)) from exc
        next_url = f"/captures?after={quote(next_after)}" if next_after else None
        return HTMLResponse(render_page(caller, rows, next_url))

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


async def _keep_synced(served: ServedStates) -> None:
    """The worker's mirror synced every `SYNC_S` (one indexed query on the loop); the
    exports asked about handed to the refresher every `WATCH_EVERY` syncs (off the loop)."""
    rounds = 0
    while True:
        try:
            served.mirror.sync()
            rounds += 1
            if rounds % WATCH_EVERY == 0:
                await asyncio.to_thread(served.mirror.flush_watched)
        except Exception as exc:  # the snapshot file is busy or gone: try again
            logging.getLogger(__name__).warning("snapshot sync failed: %s", exc)
        await asyncio.sleep(SYNC_S)


class FastGets:
    """Answers ``GET /captures/{id}/export-…`` from the mirror when ``lookup`` has the
    answer (a known token, a valid id of its organization, a state in the mirror);
    everything else, errors included, goes on to the app."""

    def __init__(self, app: ASGIApp, lookup: Callable[[Scope], tuple[Caller, bytes] | None]):
        self.app = app
        self.lookup = lookup

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


def _send(service: ExportService, receipt: ExportReceipt) -> Response:
    """The artefact as a download: the file itself, or a folder as one tar."""
    from ego_assets.api.links import artefact_name

    storage = service.storage
    location = storage.root / receipt.path
    name = artefact_name(receipt)
    headers = {"X-Content-SHA256": receipt.sha256} if is_file(receipt) else {}
    if is_file(receipt) and is_local(location):
        return FileResponse(Path(location.path), filename=name, headers=headers)
    tmp = Path(tempfile.mkdtemp(prefix="ego-download-"))
    cleanup = BackgroundTask(shutil.rmtree, tmp, ignore_errors=True)
    try:
        if is_file(receipt):
            with storage.read_file(location) as local:
                shutil.copyfile(local, tmp / name)
        else:
            with storage.read_dir(location) as folder, tarfile.open(tmp / name, "w") as tar:
                for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                    tar.add(path, arcname=path.relative_to(folder).as_posix())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return FileResponse(
        tmp / name,
        filename=name,
        media_type="application/octet-stream",
        headers=headers,
        background=cleanup,
    )


def serve_from_env(
    host: str, port: int, config_path: str | None, dagster_url: str, workers: int = 1
) -> None:
    """Serve the API: the refresher process plus ``workers`` uvicorn server processes.

    The workers and the refresher share a state folder (``$EGO_API_STATE_DIR``, else a
    temporary one removed on exit); a link secret is made once here when none is
    configured, so every worker signs and checks links and sessions with the same key.
    """
    import uvicorn

    from ego_assets.api.config import load_config

    config = load_config(config_path)  # fail here, before any process starts
    own_state = not os.environ.get(STATE_DIR_ENV)
    state_dir = os.environ.get(STATE_DIR_ENV) or tempfile.mkdtemp(prefix="ego-api-state-")
    os.environ[STATE_DIR_ENV] = state_dir
    os.environ[DAGSTER_URL_ENV] = dagster_url
    if config_path:
        os.environ["EGO_API_CONFIG"] = str(Path(config_path).resolve())
    if not os.environ.get(config.secret_env):
        os.environ[config.secret_env] = secrets.token_hex(32)
    SnapshotStore(state_dir)  # the schema, before any process opens it
    _log_to_stderr()
    # uvicorn re-raises the SIGTERM it shut down on once it is done: exit through the
    # finally below (refresher stopped, state folder removed), not the default handler
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    refresher = _Supervised(
        [sys.executable, "-m", "ego_assets.api.refresher", state_dir, str(os.getpid())]
    )
    try:
        uvicorn.run(
            "ego_assets.api.app:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            loop="uvloop",
            http="httptools",
            access_log=False,
            log_level="info",
        )
    finally:
        refresher.stop()
        if own_state:
            shutil.rmtree(state_dir, ignore_errors=True)


class _Supervised:
    """A child process, started again whenever it exits until `stop` (never after)."""

    def __init__(self, args: list[str]) -> None:
        self._args = args
        self._stopping = threading.Event()
        self._guard = threading.Lock()  # no start after stop has begun
        self._process = subprocess.Popen(args)
        self._thread = threading.Thread(target=self._watch, name="ego-api-supervisor", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:
            code = self._process.wait()
            if self._stopping.wait(1.0):
                return
            with self._guard:
                if self._stopping.is_set():
                    return
                logging.getLogger(__name__).warning("refresher exited (%s): started again", code)
                self._process = subprocess.Popen(self._args)

    def stop(self) -> None:
        with self._guard:
            self._stopping.set()
            process = self._process
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def service_from_env(dagster_url: str | None) -> ExportService:
    """The export service over ``DAGSTER_HOME`` and ``EGO_DATA_DIR`` (launching through
    the webserver at ``dagster_url``; None: a service that only reads)."""
    import dagster as dg

    from ego_assets.api.service import GraphQLLauncher
    from ego_assets.defs.exports import exporter_code_versions
    from ego_assets.defs.resources import StorageResource

    storage = StorageResource(
        root=os.environ.get("EGO_DATA_DIR", "data"),
        landing=os.environ.get("EGO_LANDING_DIR") or None,
        endpoint_url=os.environ.get("EGO_S3_ENDPOINT_URL") or None,
    ).get_storage()
    service = ExportService(
        instance=dg.DagsterInstance.get(),
        storage=storage,
        launcher=GraphQLLauncher(dagster_url) if dagster_url else None,
        code_versions=exporter_code_versions(),
    )
    return service


def app_from_env() -> FastAPI:
    """A server worker's app (uvicorn factory): configuration, state folder and the
    webserver's URL from the environment `serve_from_env` set."""
    from ego_assets.api.config import load_config

    config = load_config(None)
    service = service_from_env(os.environ.get(DAGSTER_URL_ENV, "http://127.0.0.1:3000"))
    storage = service.storage
    presigner = None if storage.is_local else Presigner(storage, config.link_ttl_s)
    _log_to_stderr()
    return create_app(service, config, presigner, SnapshotStore(os.environ[STATE_DIR_ENV]))


_logging_set_up = False


def _log_to_stderr() -> None:
    """The API's own loggers on stderr through a queue (uvicorn configures only its own):
    a request's log line is formatted on the loop and written by a listener thread."""
    global _logging_set_up
    if _logging_set_up:
        return
    _logging_set_up = True
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(records, handler)
    listener.start()
    for name in ("ego_assets.api", access_log.name):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.addHandler(logging.handlers.QueueHandler(records))
        logger.propagate = False
