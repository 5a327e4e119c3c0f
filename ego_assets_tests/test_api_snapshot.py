"""The export API's snapshots: the refresher process's loop, the server workers' mirror,
the staleness bound and the cross-process ask lock (docs/api.md, "Where the answers come
from"). A local SQLite Dagster instance stands in for the deployment's (runs are added
and moved through their states by hand); the HTTP end to end is test_api.py."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

from ego_assets.api.service import ExportService, ExportState
from ego_assets.api.snapshot import (
    REVALIDATE_S,
    SYNC_S,
    TICK_S,
    Mirror,
    Refresher,
    ServedStates,
    SnapshotStore,
    state_from_doc,
    state_to_doc,
)
from ego_assets.catalog.receipts import ExportReceipt, write_receipt
from ego_assets.defs.exports import (
    EXPORT_TAG,
    PARTITION_TAG,
    PHASE_TAG,
    PROGRESS_TAG,
    ExportTarget,
    export_target,
)
from ego_assets.storage import Storage
from ego_assets_tests.waiting import CEILING_S, wait_for

KEY = "snap-0001"
FMT = "holos_hdf5"


def _service(home: Path, data: Path, launcher: Any = None) -> ExportService:
    instance = dg.DagsterInstance.from_config(str(home))
    return ExportService(instance, Storage(data), launcher, code_versions={FMT: "1"})


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ExportService, SnapshotStore, Path, Path]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    data = tmp_path / "data"
    service = _service(home, data)
    return service, SnapshotStore(tmp_path / "state"), home, data


def _add_run(instance: dg.DagsterInstance, target: ExportTarget) -> str:
    run_id = str(uuid.uuid4())
    instance.add_run(
        DagsterRun(
            job_name=target.job_name,
            run_id=run_id,
            status=DagsterRunStatus.NOT_STARTED,  # queued as the API sees it
            tags={EXPORT_TAG: target.format, PARTITION_TAG: target.partition_key},
        )
    )
    return run_id


def _event(instance: dg.DagsterInstance, run_id: str, kind: DagsterEventType) -> None:
    instance.run_storage.handle_run_event(
        run_id, DagsterEvent(kind.value, job_name=export_target(KEY, FMT).job_name)
    )


def _receipt(key: str) -> ExportReceipt:
    return ExportReceipt(
        capture_key=key,
        format=FMT,
        path=f"exports/holos_hdf5/{key}.h5",
        bytes=10,
        files=1,
        sha256="b" * 64,
        code_version="1",
        input_data_version="v1",
        exported_at=dt.datetime.now(dt.UTC).isoformat(),
    )


def test_status_transitions_reach_the_mirror_through_the_refresher(setup: Any) -> None:
    service, store, _, _ = setup
    target = export_target(KEY, FMT)
    served = ServedStates(service, store)
    # the first GET reads the state itself, shares it and has the refresher watch it
    assert served.load(target).status == "none"
    refresher = Refresher(service, store, revalidate_s=3600)
    worker = Mirror(store)  # another server worker
    assert refresher.tick() == 0  # nothing changed, nothing due: no read at all

    def seen() -> Any:
        refresher.tick()
        worker.sync()
        return worker.get(target)

    run_id = _add_run(service.instance, target)
    state = seen()
    assert (state.status, state.run_id, state.phase) == ("queued", run_id, "waiting for a worker")
    _event(service.instance, run_id, DagsterEventType.RUN_START)
    service.instance.add_run_tags(run_id, {PROGRESS_TAG: "0.420", PHASE_TAG: "write"})
    state = seen()
    assert (state.status, state.progress, state.phase) == ("in_progress", 0.42, "write")
    service.instance.add_run_tags(run_id, {PROGRESS_TAG: "0.700"})
    assert seen().progress == 0.7  # a progress tag alone bumps the run's update time
    _event(service.instance, run_id, DagsterEventType.RUN_FAILURE)
    state = seen()
    assert state.status == "failed" and state.error == f"export run {run_id} failed"
    assert refresher.tick() == 0  # the failed run is handled: no re-read
    # an unwatched capture's run is not read at all
    _add_run(service.instance, export_target("snap-other", FMT))
    assert refresher.tick() == 0


def test_a_blocked_state_reaches_another_worker_with_its_reasons(setup: Any) -> None:
    """A ``blocked`` answer (#35) keeps the gate's message and reasons through the
    snapshot file, so every worker's GET says why; a row written before states had
    reasons reads as none."""
    _, store, _, _ = setup
    target = export_target(KEY, FMT)
    reasons = ("hand:left/tracking_loss_ratio = 1 (fail > 0.5)", "stream:x/longest_gap_s = 3 s")
    message = f"capture {KEY!r}: export blocked by export policy v1: " + "; ".join(reasons)
    blocked = ExportState(KEY, FMT, "blocked", error=message, reasons=reasons)
    assert state_from_doc(state_to_doc(blocked)) == blocked
    assert store.put(blocked)
    store.beat()  # the refresher's heartbeat: the worker answers from its mirror
    worker = Mirror(store)
    worker.sync()
    seen = worker.get(target)
    assert seen is not None and seen.to_json(lambda a: "")["reasons"] == list(reasons)
    assert (seen.status, seen.error) == ("blocked", message)
    old = {k: v for k, v in state_to_doc(blocked).items() if k != "reasons"}
    assert state_from_doc(old).reasons == ()


def test_a_get_is_at_most_about_a_second_stale(setup: Any) -> None:
    """The bound in rounds, not seconds (a loaded machine stretches every round): a run's
    change is in every worker's mirror after the first refresher round that starts after
    it, a change in storage alone after the first round `REVALIDATE_S` later; rounds
    start every `TICK_S` and workers sync every `SYNC_S`, the docs' 0.3 s and 1.3 s."""
    assert pytest.approx((0.3, 1.3)) == (TICK_S + SYNC_S, REVALIDATE_S + TICK_S + SYNC_S)
    service, store, _, _ = setup
    target = export_target(KEY, FMT)
    ServedStates(service, store).load(target)
    worker = Mirror(store)
    stop = threading.Event()
    thread = threading.Thread(target=Refresher(service, store).run, args=(stop,))
    thread.start()
    try:

        def seen_after(moment: float) -> Any:
            """The worker's state once a round that started after ``moment`` is done."""
            wait_for(
                f"a refresher round started after {moment:.3f}",
                lambda: (store.heartbeat() or 0.0) > moment,
                interval_s=SYNC_S,
                state=lambda: f"last heartbeat {store.heartbeat()}",
            )
            worker.sync()
            return worker.get(target)

        run_id = _add_run(service.instance, target)
        assert seen_after(time.time()).status == "queued"
        assert worker.refresher_alive()
        # a change in storage alone (a receipt written after the cancelled run, no run
        # update): seen at the next revalidation
        _event(service.instance, run_id, DagsterEventType.RUN_CANCELED)
        assert seen_after(time.time()).status == "failed"
        write_receipt(service.storage, _receipt(KEY))
        state = seen_after(time.time() + REVALIDATE_S)
        assert state is not None and state.status == "ready" and state.artifact is not None
        assert state.artifact.current is False  # no raw copy: not current
    finally:
        stop.set()
        thread.join(CEILING_S)
    # the refresher is silent now: after HEARTBEAT_MAX_S the worker no longer answers
    # from the mirror (its caller reads the state itself)
    assert worker.refresher_alive(now=time.time() + 10) is False


def test_a_silent_refresher_makes_workers_read_again(setup: Any) -> None:
    service, store, _, _ = setup
    target = export_target(KEY, FMT)
    served = ServedStates(service, store)
    served.mirror.sync()  # no heartbeat yet
    assert served.cached(target) is None
    served.load(target)
    assert served.cached(target) is not None  # its own read, for REVALIDATE_S
    served.mirror._own_reads[(KEY, FMT)] -= REVALIDATE_S
    assert served.cached(target) is None


class _SlowLauncher:
    """Adds a queued run after a pause (the GraphQL launch's time), as Dagster would."""

    def __init__(self, home: str) -> None:
        self.home = home

    def launch(
        self, target: ExportTarget, run_config: dict[str, Any], upstream: bool = True
    ) -> str:
        time.sleep(0.5)
        instance = dg.DagsterInstance.from_config(self.home)
        return _add_run(instance, target)


def _ask_in_a_worker(args: tuple[str, str, str, float]) -> tuple[bool, str | None]:
    home, data, state_dir, start_at = args
    service = _service(Path(home), Path(data), _SlowLauncher(home))
    store = SnapshotStore(state_dir)
    service.ask_lock = store.ask_lock
    served = ServedStates(service, store)
    time.sleep(max(0.0, start_at - time.time()))
    queued, state = served.ask(export_target(KEY, FMT), force=False, options={})
    return queued, state.run_id


def test_two_worker_processes_asked_at_once_launch_one_run(setup: Any) -> None:
    service, store, home, data = setup
    start_at = time.time() + 8.0  # both workers imported and ready by then
    args = (str(home), str(data), str(store.folder), start_at)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        answers = pool.map(_ask_in_a_worker, [args, args])
    assert sorted(queued for queued, _ in answers) == [False, True]
    assert len({run_id for _, run_id in answers}) == 1
    runs = service.instance.get_runs()
    assert [r.run_id for r in runs] == [answers[0][1]]


def test_the_captures_page_is_paged_by_cursor(setup: Any) -> None:
    from ego_assets.api.config import Caller, hash_token, parse_config
    from ego_assets.api.page import captures_rows, render_page
    from ego_assets.defs.partitions import register_captures

    service, store, _, _ = setup
    keys = [f"snap-{i:04d}" for i in range(12)]
    register_captures(service.instance, [*keys[:5], "other-0001", *keys[5:]])
    config = parse_config(
        {"organizations": {"snap": {"captures": ["snap-*"], "tokens": {"t": hash_token("x")}}}},
        environ={"EGO_API_LINK_SECRET": "k"},
    )
    caller = Caller("t", "snap")
    served = ServedStates(service, store)
    first, after = captures_rows(served, config, caller, lambda r: "", None, limit=8)
    # 8 registered captures, one of them another organization's: 7 rows
    assert [row["id"] for row in first] == keys[:7] and after is not None
    assert all(row["exports"][FMT]["status"] == "none" for row in first)
    second, last = captures_rows(served, config, caller, lambda r: "", after, limit=8)
    assert [row["id"] for row in second] == keys[7:] and last is None
    page = render_page(caller, first, f"/captures?after={after}")
    assert f'href="/captures?after={after}"' in page and "snap-0006" in page
    assert "next-page" not in render_page(caller, second, None)
    # every cell read once is shared through the snapshot, and watched by the refresher
    assert len(store.changed_since(0)) == 3 * len(keys)
    assert len(store.due(time.time() + 10, 1.0, 60.0)) == 3 * len(keys)


def test_captures_pages_walk_every_capture_set(setup: Any, monkeypatch: Any) -> None:
    from ego_assets.defs.partitions import register_captures

    monkeypatch.setenv("EGO_CAPTURE_SETS", "3")
    monkeypatch.setattr("ego_assets.defs.partitions.configured_sets", lambda: 3)  # cached
    service, _, _, _ = setup
    keys = [f"snap-{i:04d}" for i in range(20)]
    register_captures(service.instance, keys, sets=3)
    seen: list[str] = []
    after: str | None = None
    for _ in range(20):
        page, after = service.capture_page(after, 4)
        assert len(page) <= 4
        seen += page
        if after is None:
            break
    assert sorted(seen) == keys  # each capture once, whichever set it is in
    with pytest.raises(ValueError, match="cursor"):
        service.capture_page("7:abc", 4)


def _asgi_get(app: Any, path: str, token: str | None) -> tuple[int, bytes]:
    import asyncio

    headers = [(b"host", b"test")]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_polls_answered_from_the_mirror_match_the_route(
    setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import json

    from ego_assets.api.app import create_app
    from ego_assets.api.config import hash_token, parse_config
    from ego_assets.defs.partitions import register_captures

    service, store, _, _ = setup
    register_captures(service.instance, [KEY])
    config = parse_config(
        {
            "organizations": {
                "snap": {"captures": ["snap-*"], "tokens": {"snap-ci": hash_token("tok")}},
                "other": {"captures": ["other-*"], "tokens": {"o": hash_token("tok2")}},
            }
        },
        environ={"EGO_API_LINK_SECRET": "k"},
    )
    app = create_app(service, config, None, store)
    path = f"/captures/{KEY}/export-hdf5"
    caplog.set_level("INFO", logger="ego_assets.api.access")
    first = _asgi_get(app, path, "tok")  # the route: reads the state, shares it
    second = _asgi_get(app, path, "tok")  # the mirror
    assert first == second and first[0] == 200
    assert json.loads(first[1])["status"] == "none"
    assert caplog.text.count(f"GET {path} 200 token=snap-ci") == 2
    # everything the fast path does not answer goes to the routes, as before
    assert _asgi_get(app, path, None)[0] == 401
    assert _asgi_get(app, path, "nope")[0] == 401
    assert _asgi_get(app, path, "tok2")[0] == 404
    assert _asgi_get(app, "/captures/snap..x/export-hdf5", "tok")[0] == 422
    assert _asgi_get(app, "/captures/snap-9999/export-hdf5", "tok")[0] == 404


def test_two_hosts_on_one_postgres_instance_launch_one_run(tmp_path: Path) -> None:
    """Two services with their own state folders (two hosts: no shared lock file) ask at
    once: the instance's advisory lock lets one launch."""
    import concurrent.futures
    import json

    from ego_assets_tests.processes import PG, fresh_database, require_postgres

    require_postgres()
    with fresh_database("ego_api_lock") as db_name:
        home = tmp_path / "home"
        home.mkdir()
        db = {"hostname": PG["host"], "port": PG["port"], "username": PG["user"]}
        db |= {"password": "", "db_name": db_name, "scheme": "postgresql+psycopg2"}
        config = {"storage": {"postgres": {"postgres_db": db}}, "telemetry": {"enabled": False}}
        (home / "dagster.yaml").write_text(json.dumps(config))
        launcher = _SlowLauncher(str(home))
        hosts = []
        for name in ("a", "b"):
            service = _service(home, tmp_path / "data", launcher)
            store = SnapshotStore(tmp_path / f"state-{name}")
            service.ask_lock = store.ask_lock
            hosts.append(ServedStates(service, store))
        target = export_target(KEY, FMT)
        try:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                answers = list(pool.map(lambda h: h.ask(target, force=False, options={}), hosts))
            assert sorted(queued for queued, _ in answers) == [False, True]
            assert len({state.run_id for _, state in answers}) == 1
            assert len(hosts[0].service.instance.get_runs()) == 1
        finally:
            for host in hosts:
                host.service.instance.dispose()


def test_the_refresher_stops_when_its_serving_process_is_gone(setup: Any) -> None:
    import os

    service, store, _, _ = setup
    refresher = Refresher(service, store)
    # not our parent: as if serve had died; it returns before its first round
    thread = threading.Thread(target=refresher.run, kwargs={"parent": os.getppid() + 1})
    thread.start()
    thread.join(CEILING_S)
    assert not thread.is_alive() and store.heartbeat() is None  # stopped, no round
