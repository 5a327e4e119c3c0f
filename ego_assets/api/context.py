"""What every route of the export API shares: the caller's identity, the export a path
names, the answers' JSON and the download links (`ApiContext`, one per app, reached by
the routes through `api_context`)."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import urlsplit

import orjson
from fastapi import Depends, HTTPException, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ego_assets.api.config import ApiConfig, Caller, hash_token
from ego_assets.api.links import LinkSigner, Presigner, is_file
from ego_assets.api.service import Artifact, ExportService, ExportState
from ego_assets.api.snapshot import ServedStates
from ego_assets.dagster_client import ExportTarget, export_target
from ego_assets.errors import CaptureKeyError

SESSION_COOKIE = "ego_session"
SESSION_TTL_S = 12 * 3600
# What the captures page sends with every API call it makes with its session cookie (a
# cross-site form or image cannot set a header, so a cookie alone never exports).
PAGE_HEADER = "x-ego-page"
MAX_COOKIE_CHARS = 256  # a session cookie is about 120 characters
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CROSS_ORIGIN = "refused: not sent from this server's page (Origin/Referer)"


class Sessions:
    """Signed page sessions in an HttpOnly cookie: ``<session id>.<expiry>.<hmac>``.

    The session id is an HMAC of the token's digest under the server's key: it names the
    token to this server only (not the digest ``api.toml`` stores, not derivable from
    it without the key), and a token removed from the configuration ends its sessions.
    A cookie of another shape (too long, not ASCII, an expiry that is no epoch second)
    is no session.
    """

    def __init__(self, secret: bytes, tokens: Mapping[str, Caller]) -> None:
        self._secret = secret
        self._callers = {self._session_id(digest): c for digest, c in tokens.items()}

    def _mac(self, text: str) -> str:
        return hmac.new(self._secret, text.encode(), hashlib.sha256).hexdigest()

    def _session_id(self, token_digest: str) -> str:
        return self._mac(f"session id\n{token_digest}")[:32]

    def make(self, token: str) -> str:
        expires = int(time.time()) + SESSION_TTL_S
        session_id = self._session_id(hash_token(token))
        return f"{session_id}.{expires}.{self._mac(f'{session_id}.{expires}')}"

    def caller(self, cookie: str) -> Caller | None:
        """The cookie's caller (None: not a valid, unexpired session of a known token)."""
        if len(cookie) > MAX_COOKIE_CHARS or not cookie.isascii():
            return None
        parts = cookie.split(".")
        if len(parts) != 3 or not (parts[1].isdigit() and len(parts[1]) <= 12):
            return None
        session_id, expires, sig = parts
        expected = self._mac(f"{session_id}.{expires}")
        if not hmac.compare_digest(sig, expected) or int(expires) < time.time():
            return None
        return self._callers.get(session_id)


def same_origin(request: Request) -> bool:
    """Whether a browser sent ``request`` from this server's own pages: its ``Origin``
    (else its ``Referer``) names the host the request was sent to (``Host``)."""
    source = request.headers.get("origin") or request.headers.get("referer")
    host = request.headers.get("host")
    if not source or not host or source == "null":
        return False
    try:
        parts = urlsplit(source)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


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
        self.sessions = Sessions(self.config.link_secret, self.config.tokens)
        self.reuse_s = min(60.0, self.config.link_ttl_s / 10)

    def caller_of(self, request: Request, *, page: bool = False) -> Caller | None:
        """The bearer token's caller, else (page calls only) the session cookie's."""
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            return self.config.caller(header[7:].strip())
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie and (page or request.headers.get(PAGE_HEADER)):
            return self.sessions.caller(cookie)
        return None

    def authorize(self, request: Request) -> Caller:
        """The caller, noted for the access log; 401 without a known token or session,
        403 for a page call (session cookie) that changes something from another origin."""
        caller = self.caller_of(request)
        if caller is None:
            raise HTTPException(
                401, "missing or unknown bearer token", headers={"WWW-Authenticate": "Bearer"}
            )
        by_cookie = request.headers.get("authorization", "")[:7].lower() != "bearer "
        if by_cookie and request.method not in SAFE_METHODS and not same_origin(request):
            raise HTTPException(403, CROSS_ORIGIN)
        request.state.caller = caller
        return caller

    def secure_cookie(self, request: Request) -> bool:
        """Whether the session cookie is marked Secure (``session.cookie_secure``)."""
        mode = self.config.cookie_secure
        return mode == "always" or (mode == "auto" and request.url.scheme == "https")

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

    def download_url(self, artifact: Artifact) -> str:
        """A presigned S3 URL of a file on S3, else the API's signed link (bound to the
        SHA-256 of the bytes it serves)."""
        receipt = artifact.receipt
        if self.presigner is not None and is_file(receipt):
            return self.presigner.url(receipt)
        return self.signer.local_url(receipt.format, receipt.capture_key, artifact.sha256)

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
