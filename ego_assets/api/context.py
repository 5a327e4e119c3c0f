"""What every route of the export API shares: the caller's identity, the export a path
names, the answers' JSON and the download links (`ApiContext`, one per app, reached by
the routes through `api_context`)."""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field
from typing import Annotated

import orjson
from fastapi import Depends, HTTPException, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ego_assets.api.config import ApiConfig, Caller, hash_token
from ego_assets.api.links import LinkSigner, Presigner, is_file
from ego_assets.api.service import ExportService, ExportState
from ego_assets.api.snapshot import ServedStates
from ego_assets.catalog.receipts import ExportReceipt
from ego_assets.dagster_client import ExportTarget, export_target
from ego_assets.errors import CaptureKeyError

SESSION_COOKIE = "ego_session"
SESSION_TTL_S = 12 * 3600
# What the captures page sends with every API call it makes with its session cookie (a
# cross-site form or image cannot set a header, so a cookie alone never exports).
PAGE_HEADER = "x-ego-page"


class Sessions:
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


@dataclass
class ApiContext:
    """The app's service, configuration, served states and signers (see `create_app`)."""

    service: ExportService
    config: ApiConfig
    served: ServedStates
    presigner: Presigner | None = None
    signer: LinkSigner = field(init=False)
    sessions: Sessions = field(init=False)
    # A state's JSON (with its download link, presigned or signed) is reused for a while:
    # far shorter than the links' lifetime, so a link handed out is always long valid.
    reuse_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.signer = LinkSigner(self.config.link_secret, self.config.link_ttl_s)
        self.sessions = Sessions(self.config.link_secret)
        self.reuse_s = min(60.0, self.config.link_ttl_s / 10)

    def caller_of(self, request: Request, *, page: bool = False) -> Caller | None:
        """The bearer token's caller, else (page calls only) the session cookie's."""
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            return self.config.caller(header[7:].strip())
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie and (page or request.headers.get(PAGE_HEADER)):
            digest = self.sessions.digest(cookie)
            return self.config.tokens.get(f"sha256:{digest}") if digest else None
        return None

    def authorize(self, request: Request) -> Caller:
        """The caller, noted for the access log; 401 without a known token or session."""
        caller = self.caller_of(request)
        if caller is None:
            raise HTTPException(
                401, "missing or unknown bearer token", headers={"WWW-Authenticate": "Bearer"}
            )
        request.state.caller = caller
        return caller

    def target_for(self, caller: Caller, capture_id: str, export_format: str) -> ExportTarget:
        """The export a path names: 422 for a bad id, 404 for another organization's."""
        try:
            target = export_target(capture_id, export_format)
        except CaptureKeyError as exc:
            raise HTTPException(422, f"invalid capture id: {exc}") from exc
        if not self.config.owns(caller, target.capture_id):
            raise HTTPException(404, f"capture {capture_id} not found")
        return target

    async def known(self, target: ExportTarget) -> None:
        """404 unless the capture is registered."""
        if not await run_in_threadpool(self.service.capture_exists, target.capture_id):
            raise HTTPException(404, f"capture {target.capture_id} not found")

    def download_url(self, receipt: ExportReceipt) -> str:
        if self.presigner is not None and is_file(receipt):
            return self.presigner.url(receipt)
        return self.signer.local_url(receipt.format, receipt.capture_key, receipt.sha256)

    def rendered(self, state: ExportState) -> bytes:
        """The state's JSON answer (made again once older than `reuse_s`)."""
        now = time.monotonic()
        if state.rendered is None or now - state.rendered[0] > self.reuse_s:
            state.rendered = (now, orjson.dumps(state.to_json(self.download_url)))
        return state.rendered[1]

    def answer(self, state: ExportState, status_code: int = 200) -> Response:
        return Response(self.rendered(state), status_code, media_type="application/json")


def api_context(request: Request) -> ApiContext:
    """The routes' dependency: the app's `ApiContext`."""
    context: ApiContext = request.app.state.api
    return context


# A route's parameter ``ctx: Context`` is the app's `ApiContext`.
Context = Annotated[ApiContext, Depends(api_context)]
