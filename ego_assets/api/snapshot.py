"""Export states as snapshots, read by the serving processes without any I/O per request.

The export API's GETs are polls: hundreds of clients ask for the same few states every
half second. Reading those states (the latest run from the Dagster instance, the export
receipt and the gate inputs from storage) costs milliseconds of interpreter time each,
so it is done *outside* the serving processes:

* `SnapshotStore`: one SQLite file (WAL mode) in the API's state folder, one row per
  capture x format holding the state as JSON with a global sequence number, plus the
  list of exports the servers were asked about (``watched``) and the refresher's
  heartbeat. The snapshot is a cache of what Dagster and the storage say, never a record
  of its own: deleting the folder loses nothing.
* `Refresher`: the loop of the refresher process (``python -m ego_assets.api.refresher``,
  started and restarted by ``ego-assets serve``). Every `TICK_S` it asks the run storage
  for the runs updated since its cursor (``RunsFilter(updated_after=...)``: status
  changes and progress tags both bump a run's update time) and re-reads the states of
  the watched exports those runs belong to; every watched export is also re-read at most
  every `REVALIDATE_S` (an artefact turns stale without any run when its capture or
  waivers change). Only changed states are written.
* `Mirror`: each server worker's in-memory copy, synced every `SYNC_S` with one indexed
  query (``seq > cursor``) on the event loop: a GET is a dict lookup.
* `ask_lock`: a per-export lock that holds across processes (``flock`` on a file in
  the state folder), so two workers asked for the same export at once launch one run.

How stale a GET can be: a run's change is visible after at most ``TICK_S + SYNC_S``
plus the refresher's read (0.3 s on an idle machine); a change in storage alone after
``REVALIDATE_S + TICK_S + SYNC_S`` (1.3 s). If the refresher stops beating for
`HEARTBEAT_MAX_S`, the workers read states themselves again (at most once per
`REVALIDATE_S` per export), so a GET is never older than that bound plus one read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ego_assets.api.service import Artifact, ExportService, ExportState
from ego_assets.catalog.receipts import ExportReceipt
from ego_assets.dagster_client import (
    EXPORT_TAG,
    PARTITION_TAG,
    ExportTarget,
    export_target,
    runs_updated_since,
)
from ego_assets.storage import exclusive_lock

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "exports.sqlite"
TICK_S = 0.2  # refresher: runs updated since the cursor, this often
REVALIDATE_S = 1.0  # refresher: every watched export re-read at least this often
WATCH_S = 120.0  # an export is watched while a server was asked about it this recently
SYNC_S = 0.1  # server worker: mirror synced this often
HEARTBEAT_MAX_S = 5.0  # older refresher heartbeat: workers read states themselves
CURSOR_OVERLAP_S = 2.0  # run updates re-read this far back (commits land out of order)

SCHEMA = """
CREATE TABLE IF NOT EXISTS states (
    capture_id TEXT NOT NULL,
    format TEXT NOT NULL,
    seq INTEGER NOT NULL,
    read_at REAL NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (capture_id, format)
);
CREATE INDEX IF NOT EXISTS states_seq ON states (seq);
CREATE TABLE IF NOT EXISTS watched (
    capture_id TEXT NOT NULL,
    format TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    asked_at REAL NOT NULL,
    PRIMARY KEY (capture_id, format)
);
CREATE INDEX IF NOT EXISTS watched_partition ON watched (format, partition_key);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS digests (
    artefact TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    sha256 TEXT NOT NULL
);
"""


def state_to_doc(state: ExportState) -> dict[str, Any]:
    """The state as a JSON-able dict (the artefact with its whole receipt)."""
    doc: dict[str, Any] = {
        "capture_id": state.capture_id,
        "format": state.format,
        "status": state.status,
        "progress": state.progress,
        "phase": state.phase,
        "run_id": state.run_id,
        "error": state.error,
        "reasons": list(state.reasons),
        "artifact": None,
    }
    if state.artifact is not None:
        a = state.artifact
        doc["artifact"] = {
            "filename": a.filename,
            "size": a.size,
            "sha256": a.sha256,
            "resolved_at": a.resolved_at,
            "current": a.current,
            "receipt": asdict(a.receipt),
        }
    return doc


def state_from_doc(doc: dict[str, Any]) -> ExportState:
    artifact = None
    if doc["artifact"] is not None:
        a = doc["artifact"]
        artifact = Artifact(
            filename=a["filename"],
            size=a["size"],
            sha256=a["sha256"],
            resolved_at=a["resolved_at"],
            current=a["current"],
            receipt=ExportReceipt(**a["receipt"]),
        )
    return ExportState(
        capture_id=doc["capture_id"],
        format=doc["format"],
        status=doc["status"],
        progress=doc["progress"],
        phase=doc["phase"],
        run_id=doc["run_id"],
        artifact=artifact,
        error=doc["error"],
        reasons=tuple(doc.get("reasons", ())),  # rows written before there were reasons
    )


class SnapshotStore:
    """The snapshot file of a state folder (one connection per thread)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / SNAPSHOT_FILE
        self._local = threading.local()
        self._conn().executescript(SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def put(self, state: ExportState, read_at: float | None = None) -> bool:
        """Store ``state`` (read at ``read_at``, epoch s); True when its content changed."""
        body = json.dumps(state_to_doc(state), separators=(",", ":"), sort_keys=True)
        read_at = time.time() if read_at is None else read_at
        key = (state.capture_id, state.format)
        with self._write() as conn:
            row = conn.execute(
                "SELECT body, read_at FROM states WHERE capture_id = ? AND format = ?", key
            ).fetchone()
            if row is not None and row[1] > read_at:
                return False  # a newer read (e.g. a POST's, after its launch) is stored
            if row is not None and row[0] == body:
                conn.execute(
                    "UPDATE states SET read_at = ? WHERE capture_id = ? AND format = ?",
                    (read_at, *key),
                )
                return False
            (seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM states").fetchone()
            conn.execute(
                "INSERT OR REPLACE INTO states (capture_id, format, seq, read_at, body) "
                "VALUES (?, ?, ?, ?, ?)",
                (*key, seq, read_at, body),
            )
            return True

    def changed_since(self, seq: int) -> list[tuple[int, float, ExportState]]:
        """(seq, read_at, state) of every state written after ``seq``, in order."""
        rows = self._conn().execute(
            "SELECT seq, read_at, body FROM states WHERE seq > ? ORDER BY seq", (seq,)
        )
        return [(s, r, state_from_doc(json.loads(b))) for s, r, b in rows]

    def read_at(self, capture_id: str, export_format: str) -> float | None:
        row = (
            self._conn()
            .execute(
                "SELECT read_at FROM states WHERE capture_id = ? AND format = ?",
                (capture_id, export_format),
            )
            .fetchone()
        )
        return None if row is None else float(row[0])

    def watch(self, targets: list[ExportTarget], at: float | None = None) -> None:
        """Note that servers were asked about ``targets`` (the refresher keeps them fresh)."""
        if not targets:
            return
        at = time.time() if at is None else at
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO watched (capture_id, format, partition_key, asked_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (capture_id, format) "
                "DO UPDATE SET asked_at = MAX(asked_at, excluded.asked_at)",
                [(t.capture_id, t.format, t.partition_key, at) for t in targets],
            )

    def due(self, now: float, revalidate_s: float, watch_s: float) -> list[ExportTarget]:
        """Watched exports whose state was read more than ``revalidate_s`` ago (or never)."""
        rows = self._conn().execute(
            "SELECT w.capture_id, w.format FROM watched w LEFT JOIN states s "
            "ON s.capture_id = w.capture_id AND s.format = w.format "
            "WHERE w.asked_at >= ? AND (s.read_at IS NULL OR s.read_at < ?) "
            "ORDER BY s.read_at",
            (now - watch_s, now - revalidate_s),
        )
        return [export_target(c, f) for c, f in rows]

    def watched_for(self, export_format: str, partition_key: str) -> list[ExportTarget]:
        """The watched exports of one format over ``partition_key``."""
        rows = self._conn().execute(
            "SELECT capture_id FROM watched WHERE format = ? AND partition_key = ?",
            (export_format, partition_key),
        )
        return [export_target(c, export_format) for (c,) in rows]

    def beat(self, at: float | None = None) -> None:
        at = time.time() if at is None else at
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('heartbeat', ?)", (at,))

    def heartbeat(self) -> float | None:
        row = self._conn().execute("SELECT value FROM meta WHERE name = 'heartbeat'").fetchone()
        return None if row is None else float(row[0])

    def digest(self, key: str) -> tuple[int, str] | None:
        """A served tar's (bytes, SHA-256) by artefact version (`ExportService.digests`)."""
        row = (
            self._conn()
            .execute("SELECT size, sha256 FROM digests WHERE artefact = ?", (key,))
            .fetchone()
        )
        return None if row is None else (int(row[0]), str(row[1]))

    def keep_digest(self, key: str, size: int, sha256: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO digests (artefact, size, sha256) VALUES (?, ?, ?)",
                (key, size, sha256),
            )

    @contextlib.contextmanager
    def ask_lock(self, target: ExportTarget) -> Iterator[None]:
        """Held by one process (and thread) at a time per export: ``flock`` on its file."""
        with exclusive_lock(self.folder / "locks" / target.format / f"{target.capture_id}.lock"):
            yield


class Refresher:
    """Keeps the watched exports' snapshots fresh (the refresher process's loop)."""

    def __init__(
        self,
        service: ExportService,
        store: SnapshotStore,
        tick_s: float = TICK_S,
        revalidate_s: float = REVALIDATE_S,
        watch_s: float = WATCH_S,
    ) -> None:
        self.service = service
        self.store = store
        service.digests = store  # tar digests shared with the server workers
        self.tick_s = tick_s
        self.revalidate_s = revalidate_s
        self.watch_s = watch_s
        self._cursor: float | None = None  # epoch s: run updates after this were seen
        self._seen: dict[str, float] = {}  # run id -> update time already handled

    def _changed_runs(self) -> list[ExportTarget]:
        """Watched exports whose latest run may have changed since the last call."""
        now = time.time()
        since = (self._cursor if self._cursor is not None else now) - CURSOR_OVERLAP_S
        targets: dict[tuple[str, str], ExportTarget] = {}
        newest = self._cursor or now
        for run in runs_updated_since(self.service.instance, since):
            updated = run.updated
            newest = max(newest, updated)
            if self._seen.get(run.run_id) == updated:
                continue
            self._seen[run.run_id] = updated
            export_format = run.tags.get(EXPORT_TAG)
            partition = run.tags.get(PARTITION_TAG)
            if export_format and partition:
                for target in self.store.watched_for(export_format, partition):
                    targets[(target.capture_id, target.format)] = target
        self._cursor = newest
        horizon = newest - 2 * CURSOR_OVERLAP_S
        self._seen = {k: v for k, v in self._seen.items() if v >= horizon}
        return list(targets.values())

    def tick(self) -> int:
        """One round: changed runs' exports, then the due ones; returns states re-read."""
        now = time.time()
        targets = {(t.capture_id, t.format): t for t in self._changed_runs()}
        for target in self.store.due(now, self.revalidate_s, self.watch_s):
            targets.setdefault((target.capture_id, target.format), target)
        for target in targets.values():
            read_at = time.time()
            try:
                state = self.service.read(target)
            except Exception as exc:  # the next round tries again
                log.warning("export %s/%s: read failed: %s", target.format, target.capture_id, exc)
                continue
            self.store.put(state, read_at)
        self.store.beat(now)
        return len(targets)

    def run(self, stop: threading.Event | None = None, parent: int | None = None) -> None:
        """Rounds every `tick_s` until ``stop`` is set or the process ``parent`` (a pid:
        the ``serve`` that started this process) is gone."""
        stop = stop or threading.Event()
        while not stop.is_set():
            if parent is not None and os.getppid() != parent:
                log.info("refresher: the serving process %d is gone, stopping", parent)
                return
            started = time.monotonic()
            try:
                self.tick()
            except Exception:
                log.exception("refresher round failed")
            stop.wait(max(0.0, self.tick_s - (time.monotonic() - started)))


class Mirror:
    """A server worker's copy of the snapshot: GETs look states up here, no I/O.

    `sync` (on the event loop, every `SYNC_S`) applies the rows written since the last
    sync; `remember` adds a state this worker read or asked for itself; asked-about
    exports are handed to the refresher in batches (`flush_watched`, off the loop).
    """

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store
        self._states: dict[tuple[str, str], ExportState] = {}
        self._seq = 0
        self._asked: dict[tuple[str, str], ExportTarget] = {}
        self._heartbeat: float | None = None
        self._own_reads: dict[tuple[str, str], float] = {}  # monotonic time of own reads

    def get(self, target: ExportTarget) -> ExportState | None:
        """The export's state (None before its first read, or while the refresher is
        silent and this worker's own read of it is older than `REVALIDATE_S`: the
        caller then reads it itself)."""
        key = (target.capture_id, target.format)
        self._asked[key] = target
        if not self.refresher_alive():
            own = self._own_reads.get(key)
            if own is None or time.monotonic() - own >= REVALIDATE_S:
                return None
        return self._states.get(key)

    def refresher_alive(self, now: float | None = None) -> bool:
        beat = self._heartbeat
        return beat is not None and (now or time.time()) - beat < HEARTBEAT_MAX_S

    def remember(self, state: ExportState) -> None:
        """A state this worker read or made itself (stored in the snapshot too)."""
        key = (state.capture_id, state.format)
        self._states[key] = state
        self._own_reads[key] = time.monotonic()

    def sync(self) -> int:
        """Apply the states written since the last sync; returns how many."""
        rows = self.store.changed_since(self._seq)
        for seq, _read_at, state in rows:
            self._states[(state.capture_id, state.format)] = state
            self._seq = seq
        self._heartbeat = self.store.heartbeat()
        return len(rows)

    def flush_watched(self) -> None:
        """Hand the exports asked about since the last flush to the refresher."""
        asked, self._asked = self._asked, {}
        self.store.watch(list(asked.values()))


class ServedStates:
    """What a server worker answers with: the mirror, and the reads a worker still makes
    itself (an export's first GET, a POST, the captures page) stored in the snapshot for
    every worker and watched by the refresher from then on."""

    def __init__(self, service: ExportService, store: SnapshotStore) -> None:
        self.service = service
        self.store = store
        service.digests = store  # tar digests shared with the refresher and other workers
        self.mirror = Mirror(store)

    def cached(self, target: ExportTarget) -> ExportState | None:
        """No I/O (the event loop calls it); None when the caller must `load`."""
        return self.mirror.get(target)

    def _keep(self, state: ExportState, target: ExportTarget, read_at: float) -> None:
        self.store.put(state, read_at)
        self.store.watch([target])
        self.mirror.remember(state)

    def load(self, target: ExportTarget) -> ExportState:
        """Read the state now (blocking I/O: call it from a thread) and share it."""
        read_at = time.time()
        state = self.service.read(target)
        self._keep(state, target, read_at)
        return state

    def ask(
        self, target: ExportTarget, *, force: bool, options: dict[str, Any]
    ) -> tuple[bool, ExportState]:
        """`ExportService.request` (blocking: from a thread), its answer shared."""
        queued, state = self.service.request(target, force=force, options=options)
        self._keep(state, target, time.time())
        return queued, state
