"""The export API and captures page (FastAPI): see docs/api.md for every route.

``create_app(service, config, presigner, store)`` builds the ASGI app over a snapshot
store (`ego_assets.api.snapshot`); ``ego-assets serve`` (`serve_from_env`) starts the
refresher process and runs ``--workers`` server processes under uvicorn (uvloop,
httptools), each building its app from the environment (`app_from_env`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import logging.handlers
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from fastapi import FastAPI

from ego_assets.api.config import ApiConfig
from ego_assets.api.context import ApiContext
from ego_assets.api.errors import install_error_handlers
from ego_assets.api.guard import IDLE_TIMEOUT_S, Guard
from ego_assets.api.links import Presigner
from ego_assets.api.middleware import AccessLog, FastGets, access_log
from ego_assets.api.routes import captures, downloads, exports, health, session
from ego_assets.api.service import ExportService
from ego_assets.api.snapshot import SYNC_S, ServedStates, SnapshotStore
from ego_assets.pipeline import seconds_setting

# Set by `ego-assets serve` for its worker processes (`app_from_env`).
STATE_DIR_ENV = "EGO_API_STATE_DIR"
DAGSTER_URL_ENV = "EGO_DAGSTER_URL"
INLINE_MAX_ENV = "EGO_API_INLINE_MAX_S"
DEFAULT_INLINE_MAX_S = 60.0  # a 60 s capture's export: about 1 s on a quiet core
# Mirror syncs between two hand-overs of the asked-about exports to the refresher.
WATCH_EVERY = 10


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
    context = ApiContext(service, config, served, presigner)

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
    app.state.api = context
    app.include_router(exports.export_router())
    for router in (downloads.router, session.router, captures.router, health.router):
        app.include_router(router)
    install_error_handlers(app)
    app.add_middleware(FastGets, context=context)
    app.add_middleware(Guard)  # limits and security headers, the fast path's too
    app.add_middleware(AccessLog)  # outermost: every request is logged
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
    inline_max_s(os.environ)  # the same for the workers' setting
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
            http="ego_assets.api.protocol:GuardedHttpToolsProtocol",  # head limits
            timeout_keep_alive=int(IDLE_TIMEOUT_S),
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
    from ego_assets.dagster_client import (
        GraphQLLauncher,
        exporter_code_versions,
        instance_from_env,
    )
    from ego_assets.storage import Storage

    endpoint = (os.environ.get("EGO_S3_ENDPOINT_URL") or "").strip()
    storage = Storage(
        os.environ.get("EGO_DATA_DIR", "data"),
        landing=os.environ.get("EGO_LANDING_DIR") or None,
        storage_options={"endpoint_url": endpoint} if endpoint else {},
    )
    service = ExportService(
        instance=instance_from_env(),
        storage=storage,
        launcher=GraphQLLauncher(dagster_url) if dagster_url else None,
        code_versions=exporter_code_versions(),
        inline_max_s=inline_max_s(os.environ),
    )
    return service


def inline_max_s(environ: Mapping[str, str]) -> float:
    """``EGO_API_INLINE_MAX_S``: captures up to this many seconds long are exported inside
    the POST when their inputs are current (`ExportService.inline_max_s`); default
    `DEFAULT_INLINE_MAX_S`, 0 turns it off. Raises ValueError naming the variable."""
    return seconds_setting(environ, INLINE_MAX_ENV, DEFAULT_INLINE_MAX_S)


def app_from_env() -> FastAPI:
    """A server worker's app (uvicorn factory): configuration, state folder and the
    webserver's URL from the environment `serve_from_env` set."""
    from ego_assets.api.config import load_config

    config = load_config(None)
    service = service_from_env(os.environ.get(DAGSTER_URL_ENV, "http://127.0.0.1:3000"))
    if service.inline_max_s > 0:  # this worker writes short exports: not on the first POST
        from ego_assets.exports.preload import preload_exports

        preload_exports()
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
