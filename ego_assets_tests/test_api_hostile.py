"""The export API under hostile and broken input (docs/api.md, "Limits and hostile
input", "Sessions and the page"): every case answers a clean 4xx/503 with a one-line
JSON error that echoes none of the request, and nothing is launched.

The app runs in this process over a local SQLite Dagster instance and local storage
(requests are ASGI calls); the connection limits run under a real uvicorn server with
``serve``'s protocol. The deployment end to end is test_api.py.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import io
import json
import socket
import tarfile
import threading
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dagster as dg
import pytest

from ego_assets import pipeline
from ego_assets.api.app import create_app
from ego_assets.api.config import hash_token, parse_config
from ego_assets.api.context import SESSION_COOKIE
from ego_assets.api.guard import MAX_BODY_BYTES, MAX_HEAD_BYTES
from ego_assets.api.service import ExportService
from ego_assets.api.snapshot import SnapshotStore
from ego_assets.catalog.receipts import folder_digest, make_receipt, write_receipt
from ego_assets.dagster_client import GraphQLLauncher
from ego_assets.defs.partitions import register_captures
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.processes import free_port
from ego_assets_tests.waiting import wait_for

TOKEN = "hostile-token-5e1f"
OTHER_TOKEN = "other-token-77aa"
GOOD = "hx-good-0001"  # registered, every export allowed
LOST = "hx-lost-0001"  # left hand never seen: the policy blocks its exports
HOST = "api.test"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    cookies: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Client:
    """ASGI calls into one app (its lifespan not run: states are read by the routes)."""

    app: Any
    service: ExportService
    launches: list[str]

    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = TOKEN,
        body: bytes | list[bytes] = b"",
        headers: dict[str, str] | None = None,
        scheme: str = "http",
        content_length: bool = True,
        then_silence: bool = False,
    ) -> Answer:
        chunks = body if isinstance(body, list) else [body]
        raw = [(b"host", HOST.encode())]
        if token:
            raw.append((b"authorization", f"Bearer {token}".encode("latin-1")))
        if content_length and method != "GET":
            raw.append((b"content-length", str(sum(map(len, chunks))).encode()))
        raw += [(k.lower().encode(), v.encode("utf-8")) for k, v in (headers or {}).items()]
        target = urlsplit(path)
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": scheme,
            "path": target.path,
            "raw_path": target.path.encode(),
            "root_path": "",
            "query_string": target.query.encode(),
            "headers": raw,
            "client": ("127.0.0.1", 1),
            "server": (HOST, 80),
        }
        messages = [
            {"type": "http.request", "body": c, "more_body": then_silence or i < len(chunks) - 1}
            for i, c in enumerate(chunks)
        ]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop(0)
            await asyncio.sleep(3600)  # a client that sends nothing more
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(self.app(scope, receive, send))
        start = sent[0]
        heads = [(k.decode(), v.decode("latin-1")) for k, v in start["headers"]]
        return Answer(
            start["status"],
            {k: v for k, v in heads},
            b"".join(m.get("body", b"") for m in sent[1:]),
            [v for k, v in heads if k == "set-cookie"],
        )


class _Launcher:
    """Records launches; a run is never started (the tests need only the ask)."""

    def __init__(self, launches: list[str]) -> None:
        self.launches = launches

    def launch(self, target: Any, run_config: dict[str, Any], upstream: bool = True) -> str:
        self.launches.append(target.capture_id)
        return f"run-{len(self.launches)}"


def _config(**session: str) -> Any:
    doc: dict[str, Any] = {
        "organizations": {
            "hx": {"captures": ["hx-*"], "tokens": {"hx-ci": hash_token(TOKEN)}},
            "other": {"captures": ["other-*"], "tokens": {"o": hash_token(OTHER_TOKEN)}},
        },
        "links": {"ttl_s": 300},
    }
    if session:
        doc["session"] = session
    return parse_config(doc, environ={"EGO_API_LINK_SECRET": "test-secret"})


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Storage]]:
    """Two captures prepared by the library (raw copy, trajectory, quality gate)."""
    tmp = tmp_path_factory.mktemp("hostile")
    landing = tmp / "landing"
    synthesize("holos-visionpro", landing / GOOD, seconds=1.5, seed=3, capture_id=GOOD)
    synthesize(
        "webxr", landing / LOST, seconds=1.5, seed=12, faults=["hand_never_seen"], capture_id=LOST
    )
    storage = Storage(tmp / "data", landing=landing)
    for key in (GOOD, LOST):
        pipeline.ingest_raw(storage, key)
        pipeline.normalize(storage, key)
        pipeline.assess_quality(storage, key)
    home = tmp / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    yield home, storage


def _client(deployment: tuple[Path, Storage], tmp: Path, launcher: Any = None, **session: str):
    home, storage = deployment
    instance = dg.DagsterInstance.from_config(str(home))
    register_captures(instance, [GOOD, LOST])
    launches: list[str] = []
    service = ExportService(instance, storage, launcher or _Launcher(launches), code_versions={})
    app = create_app(service, _config(**session), None, SnapshotStore(tmp / "state"))
    return Client(app, service, launches)


@pytest.fixture
def client(deployment: tuple[Path, Storage], tmp_path: Path) -> Iterator[Client]:
    made = _client(deployment, tmp_path)
    yield made
    made.service.instance.dispose()


def _one_line_error(answer: Answer, status: int, *, not_in: bytes = b"") -> dict[str, Any]:
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.headers["content-type"] == "application/json"
    assert b"\n" not in answer.body and len(answer.body) < 2000, answer.body[:300]
    if not_in:
        assert not_in not in answer.body
    doc = answer.json()
    assert set(doc) >= {"detail"}
    return doc


def test_bad_bodies_answer_4xx_and_echo_nothing(client: Client) -> None:
    path = f"/captures/{GOOD}/export-hdf5"
    # not UTF-8
    doc = _one_line_error(client.call("POST", path, body=b'{"force": "\xff\xfe"}'), 400)
    assert "UTF-8" in doc["detail"]
    # 10 MB with an unknown field: refused by its length, before anything is read
    big = b'{"forse": "' + b"A" * 10_000_000 + b'"}'
    doc = _one_line_error(client.call("POST", path, body=big), 413, not_in=b"AAAA")
    assert str(MAX_BODY_BYTES) in doc["detail"]
    # the same without a Content-Length (chunked): refused as it arrives
    chunks = [big[i : i + 65536] for i in range(0, len(big), 65536)]
    answer = client.call("POST", path, body=chunks, content_length=False)
    _one_line_error(answer, 413, not_in=b"AAAA")
    assert answer.headers["connection"] == "close"
    # under the limit: 422 names the field (cut), never its value
    long_field = "f" * 5000
    answer = client.call("POST", path, body=json.dumps({long_field: "V" * 9000}).encode())
    doc = _one_line_error(answer, 422, not_in=b"VVVV")
    assert doc["detail"][0]["loc"] == [long_field[:64]]
    assert doc["detail"][0]["type"] == "extra_forbidden"
    # strict booleans
    for value in ("yes", "true", 1, None):
        answer = client.call("POST", path, body=json.dumps({"force": value}).encode())
        assert _one_line_error(answer, 422)["detail"][0]["loc"] == ["force"], value
    doc = _one_line_error(client.call("POST", path, body=b"{not json"), 422)
    assert doc["detail"][0]["type"] == "json_invalid"
    assert client.launches == []


def test_oversized_heads_cookies_cursors_and_links(client: Client) -> None:
    path = f"/captures/{GOOD}/export-hdf5"
    huge = "h" * 1_000_000
    doc = _one_line_error(
        client.call("GET", "/healthz", headers={"x-big": huge}), 431, not_in=b"hhhh"
    )
    assert str(MAX_HEAD_BYTES) in doc["detail"]
    _one_line_error(client.call("GET", path, token=huge), 431, not_in=b"hhhh")
    # a session cookie whose expiry has 5,000 digits (Python's int-digit limit) is no session
    cookie = {"cookie": f"{SESSION_COOKIE}=abc.{'9' * 5000}.def", "x-ego-page": "1"}
    assert client.call("GET", path, token=None, headers=cookie).status == 401
    page = client.call("GET", "/captures", token=None, headers=cookie)
    assert (page.status, page.headers["location"]) == (303, "/login")
    for odd in ("a.b", "é.1.x", "x" * 400, "a.٣.b"):
        headers = {"cookie": f"{SESSION_COOKIE}={odd}", "x-ego-page": "1"}
        assert client.call("GET", path, token=None, headers=headers).status == 401, odd
    # a bad page cursor: no internal message ("Incorrect padding")
    session = _sign_in(client)
    answer = client.call("GET", "/captures?after=0:abc", token=None, headers=session)
    doc = _one_line_error(answer, 422)
    assert doc["detail"] == "not a captures page cursor"
    # links with absurd or foreign fields
    for query in (
        f"sha256={'a' * 64}&expires={'9' * 5000}&sig=x",
        f"sha256={'a' * 64}&expires={'9' * 4000}&sig=x",
        f"sha256={'a' * 64}&expires=1&sig=%C3%A9",
    ):
        answer = client.call("GET", f"/downloads/holos_hdf5/{GOOD}?{query}", token=None)
        assert answer.status in (403, 422), (query[:80], answer.status, answer.body[:200])
        _one_line_error(answer, answer.status, not_in=b"99999")


def test_unknown_tokens_pin_no_memory(client: Client) -> None:
    path = f"/captures/{GOOD}/export-hdf5"
    client.call("GET", path)  # the state read once, in the mirror now
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(100):
            token = f"{i:04d}" + "t" * 15_000  # just under the head limit
            assert client.call("GET", path, token=token).status == 401
            bad = f"/captures/hx-{'x' * 200}{i}/export-hdf5"  # breaks the key rule
            assert client.call("GET", bad).status == 422
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    # 100 tokens of 15 kB are 1.5 MB: none of it is kept
    assert grown < 200_000, grown


def test_dagster_unreachable_answers_503_with_retry_after(
    deployment: tuple[Path, Storage], tmp_path: Path
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    made = _client(deployment, tmp_path, GraphQLLauncher(closed))
    try:
        answer = made.call("POST", f"/captures/{GOOD}/export-lerobot")
        doc = _one_line_error(answer, 503, not_in=b"Connection refused")
        assert answer.headers["retry-after"] == "10"
        assert "try again" in doc["detail"] and "127.0.0.1" not in doc["detail"]
    finally:
        made.service.instance.dispose()


def test_blocked_capture_is_refused_at_once_with_the_gate_reasons(client: Client) -> None:
    for route in ("export-hdf5", "export-lerobot", "export-webdataset"):
        for body in (b"", b'{"force": true}'):
            answer = client.call("POST", f"/captures/{LOST}/{route}", body=body)
            doc = _one_line_error(answer, 409)
            assert "blocked" in doc["detail"] and LOST in doc["detail"]
            assert doc["reasons"] and any("hand" in r for r in doc["reasons"]), doc
    assert client.launches == []  # nothing launched
    answer = client.call("POST", f"/captures/{GOOD}/export-hdf5")
    assert answer.status == 202 and client.launches == [GOOD]
    # the page: the blocked row's buttons disabled with the reasons as their title
    page = client.call("GET", "/captures", token=None, headers=_sign_in(client)).body.decode()
    lost_row = page.split(f'id="capture-{LOST}"')[1].split("</tr>")[0]
    good_row = page.split(f'id="capture-{GOOD}"')[1].split("</tr>")[0]
    assert lost_row.count(" disabled title=") == 3 and "hand" in lost_row
    assert "disabled" not in good_row


def test_a_get_of_a_blocked_export_says_blocked_with_the_gate_s_reasons(client: Client) -> None:
    """docs/api.md, "GET answer" (#35): the capture's current gate blocks the export, so
    GET answers ``blocked`` with the same message and reasons as the POST's 409, no run
    and no artefact; an allowed capture's export with no run answers ``none``."""
    gate = pipeline.stored_gate(client.service.storage, LOST)
    assert gate is not None and not gate.passed
    expected_reasons = list(gate.reasons)
    assert "hand:left/tracking_loss_ratio = 1 (fail > 0.5)" in expected_reasons
    for route, fmt in (
        ("export-hdf5", "holos_hdf5"),
        ("export-lerobot", "ceres_episode"),
        ("export-webdataset", "egosmith_shards"),
    ):
        path = f"/captures/{LOST}/{route}"
        answer = client.call("GET", path)
        assert answer.status == 200
        state = answer.json()
        refused = _one_line_error(client.call("POST", path), 409)
        assert state == {
            "captureId": LOST,
            "format": fmt,
            "status": "blocked",
            "progress": 0.0,
            "phase": None,
            "runId": None,
            "artifact": None,
            "error": refused["detail"],
            "reasons": expected_reasons,
        }
        assert refused["reasons"] == expected_reasons
        assert state["error"] == (
            f"capture {LOST!r}: export blocked by export policy v1: " + "; ".join(expected_reasons)
        )
    allowed = client.call("GET", f"/captures/{GOOD}/export-hdf5").json()
    assert (allowed["status"], allowed["error"], allowed["reasons"]) == ("none", None, [])
    assert client.launches == []


def test_ready_answers_describe_the_bytes_served(client: Client) -> None:
    """A folder export (here a stand-in WebDataset episode written by hand) announces its
    tar's size and SHA-256; the download is exactly those bytes; ready has progress 1."""
    storage = client.service.storage
    folder = storage.root / "exports" / "egosmith" / GOOD
    (folder / "shards").mkdir(parents=True)
    (folder / "episode.json").write_text('{"frames": 3}')
    (folder / "shards" / "shard-000000.tar").write_bytes(bytes(range(256)) * 40)
    size, files, digest = folder_digest(Path(folder.path))
    receipt = make_receipt(
        storage,
        export_format="egosmith_shards",
        capture_key=GOOD,
        location=folder,
        local=Path(folder.path),
        code_version="t",
        input_data_version="gate-version",
    )
    write_receipt(storage, receipt)
    answer = client.call("GET", f"/captures/{GOOD}/export-webdataset")
    state = answer.json()
    assert (state["status"], state["progress"]) == ("ready", 1.0)
    artifact = state["artifact"]
    assert artifact["size"] != size  # the tar, not the files' sum
    link = client.call("GET", artifact["downloadUrl"], token=None)
    assert link.status == 200, link.body[:200]
    assert len(link.body) == artifact["size"]
    assert hashlib.sha256(link.body).hexdigest() == artifact["sha256"]
    assert link.headers["x-content-sha256"] == artifact["sha256"]
    with tarfile.open(fileobj=io.BytesIO(link.body)) as tar:
        names = sorted(m.name for m in tar.getmembers())
        assert names == ["episode.json", "shards/shard-000000.tar"]
        member = tar.extractfile("shards/shard-000000.tar")
        assert member is not None and member.read() == bytes(range(256)) * 40
    assert (files, len(digest)) == (2, 64)
    # the tar is the same bytes every time (and on every worker: the digest is shared)
    again = client.call("GET", artifact["downloadUrl"], token=None)
    assert again.body == link.body


def test_a_current_skip_is_refused_and_never_served(client: Client) -> None:
    """An exporter's skipped receipt (here written by hand for LeRobot) is no artefact: GET
    says failed with its reason, a POST is refused at once while it is current."""
    storage = client.service.storage
    record = storage.root / "exports" / "ceres-lerobot-v3" / GOOD
    record.mkdir(parents=True)
    (record / "skipped.json").write_text('{"reason": "no usable camera"}')
    receipt = make_receipt(
        storage,
        export_format="ceres_episode",
        capture_key=GOOD,
        location=record,
        local=Path(record.path),
        code_version="t",
        input_data_version=str(pipeline.expected_gate_version(storage, GOOD)),
        skipped_reason="no usable camera",
    )
    write_receipt(storage, receipt)
    client.service.code_versions = {"ceres_episode": "t"}
    path = f"/captures/{GOOD}/export-lerobot"
    state = client.call("GET", path).json()
    assert (state["status"], state["artifact"]) == ("failed", None)
    assert state["error"] == f"capture {GOOD}: not exported: no usable camera"
    for body in (b"", b'{"force": true}'):
        doc = _one_line_error(client.call("POST", path, body=body), 409)
        assert doc["reasons"] == ["no usable camera"]
    assert client.launches == []
    # another exporter version might export it: the skip is no longer current
    client.service.code_versions = {"ceres_episode": "u"}
    assert client.call("POST", path).status == 202 and client.launches == [GOOD]


def _sign_in(client: Client, **kwargs: Any) -> dict[str, str]:
    answer = client.call(
        "POST",
        "/login",
        token=None,
        body=f"token={TOKEN}".encode(),
        headers={"origin": f"http://{HOST}", "content-type": "application/x-www-form-urlencoded"},
        **kwargs,
    )
    assert answer.status == 303, answer.body[:300]
    cookie = answer.cookies[0].split(";")[0]
    return {"cookie": cookie, "x-ego-page": "1"}


def test_sessions_origins_and_security_headers(
    client: Client, deployment: tuple[Path, Storage], tmp_path: Path
) -> None:
    form = {"content-type": "application/x-www-form-urlencoded"}
    body = f"token={TOKEN}".encode()
    # login CSRF: a foreign or missing Origin gets no session
    for origin in ({"origin": "http://evil.example"}, {"origin": "null"}, {}):
        answer = client.call("POST", "/login", token=None, body=body, headers={**form, **origin})
        _one_line_error(answer, 403)
        assert answer.cookies == []
    referer = {**form, "referer": f"http://{HOST}/login"}
    assert client.call("POST", "/login", token=None, body=body, headers=referer).status == 303
    # the session cookie: HttpOnly, SameSite, not Secure over plain http; not the digest
    answer = client.call(
        "POST", "/login", token=None, body=body, headers={**form, "origin": f"http://{HOST}"}
    )
    cookie = answer.cookies[0]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert "secure" not in cookie.lower().replace("samesite", "")
    digest = hash_token(TOKEN).removeprefix("sha256:")
    assert digest not in cookie and digest[:32] not in cookie
    # over https (or behind a proxy saying so): Secure
    secure = client.call(
        "POST",
        "/login",
        token=None,
        body=body,
        headers={**form, "origin": f"https://{HOST}"},
        scheme="https",
    )
    assert "; secure" in secure.cookies[0].lower()
    # a page call that changes something must come from the page's origin
    session = {"cookie": cookie.split(";")[0], "x-ego-page": "1"}
    post = f"/captures/{GOOD}/export-hdf5"
    foreign = {**session, "origin": "http://evil.example"}
    assert client.call("POST", post, token=None, headers=foreign).status == 403
    assert client.call("POST", post, token=None, headers=session).status == 403  # no Origin
    own = {**session, "origin": f"http://{HOST}"}
    assert client.call("POST", post, token=None, headers=own).status == 202
    assert client.launches == [GOOD]
    # headers on every answer, the page's CSP allows its own script and style only
    for answer in (
        client.call("GET", f"/captures/{GOOD}/export-hdf5"),  # the mirror's fast path
        client.call("GET", "/healthz"),
        client.call("GET", "/captures", token=None, headers=session),
        client.call("POST", post, body=b"\xff"),
    ):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "same-origin"
    page = client.call("GET", "/captures", token=None, headers=session)
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "script-src 'sha256-" in csp
    login_page = client.call("GET", "/login", token=None)
    assert login_page.headers["content-security-policy"] == csp
    # cookie_secure = "always" (e.g. behind a TLS proxy that does not say so)
    always = _client(deployment, tmp_path / "always", cookie_secure="always")
    try:
        answer = always.call(
            "POST", "/login", token=None, body=body, headers={**form, "origin": f"http://{HOST}"}
        )
        assert "; secure" in answer.cookies[0].lower()
    finally:
        always.service.instance.dispose()


def test_a_body_that_never_arrives_is_answered_408(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ego_assets.api.guard.BODY_TIMEOUT_S", 0.5)
    path = f"/captures/{GOOD}/export-hdf5"
    # 20 bytes announced, 5 sent, then silence
    answer = client.call(
        "POST",
        path,
        body=[b'{"for'],
        headers={"content-length": "20"},
        content_length=False,
        then_silence=True,
    )
    _one_line_error(answer, 408)
    assert client.launches == []


class _Server:
    """``create_app`` under uvicorn with ``serve``'s protocol, in a thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        from ego_assets.api.protocol import GuardedHttpToolsProtocol

        self.port = free_port()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            http=GuardedHttpToolsProtocol,
            loop="asyncio",
            lifespan="off",
            log_level="warning",
            timeout_keep_alive=3600,  # this test's head timer, not uvicorn's, closes
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for("the test server to start", lambda: self.server.started, interval_s=0.05)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        return sock

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_the_connection_bounds_and_times_the_request_head(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ego_assets.api.protocol.HEAD_TIMEOUT_S", 1.0)
    server = _Server(client.app)
    try:
        # a head over the limit: 431 as soon as its bytes are in, the connection closed
        with server.connect() as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20_000)
            reply = _read_all(sock)
        assert reply.startswith(b"HTTP/1.1 431 ")
        assert b"connection: close" in reply and b"bbbb" not in reply
        assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["detail"].startswith("request head")
        # a head that never ends: 408, closed
        with server.connect() as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            reply = _read_all(sock)
        assert reply.startswith(b"HTTP/1.1 408 "), reply[:100]
        # a connection that says nothing, and one idle after its answer: closed
        with server.connect() as sock:
            assert _read_all(sock) == b""
        with server.connect() as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = _read_all(sock)
        assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b'{"status":"ok"}')
        # a good request with a large but allowed head still works
        with server.connect() as sock:
            head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 8000
            sock.sendall(head + b"\r\nConnection: close\r\n\r\n")
            assert _read_all(sock).startswith(b"HTTP/1.1 200 ")
    finally:
        server.stop()
