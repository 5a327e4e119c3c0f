"""What the export API knows about an export, read from Dagster and the storage each time.

Nothing is stored here: the state of a capture's export is

* its latest export run (tags ``ego/export=<format>`` and ``dagster/partition=<key>``,
  launched by `request` through Dagster's GraphQL API, so the run coordinator queues it
  and the UI shows it); the exporter writes its progress into that run's tags
  (`ego_assets.defs.exports.run_progress`);
* the export receipt (``receipts/<format>/<key>.json``, written by the exporter once the
  artefact is in place): the artefact's path, size, SHA-256 and the gate data version it
  was made from;
* the raw copy's content hash and the episode's waivers, from which the gate data version
  an up-to-date export would have is derived (`pipeline.expected_gate_version`): a
  receipt naming another one is stale.

=============  ==============================================================
status         when
=============  ==============================================================
``none``       no export run and no artefact
``queued``     the latest export run waits in the queue (or is starting)
``in_progress``the latest export run is running (``progress`` from its tags)
``ready``      an artefact exists (``artifact.current`` says whether it is stale)
``failed``     the latest export run failed or was cancelled, or finished without
               an export (the gate blocks the episode: ``error`` holds its reasons)
=============  ==============================================================

`read` reads one state (one run row and two or three small objects). The serving
processes do not call it per GET: the refresher process does, and writes snapshots the
servers answer from (`ego_assets.api.snapshot`); a POST reads afresh under the export's
ask lock, which holds across processes when the snapshot store provides it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import dagster as dg
from dagster._core.storage.dagster_run import DagsterRunStatus, RunRecord, RunsFilter

from ego_assets.catalog.receipts import ExportReceipt, read_receipt
from ego_assets.defs.exports import (
    EXPORT_TAG,
    PARTITION_TAG,
    PHASE_TAG,
    PROGRESS_TAG,
    ExportTarget,
)
from ego_assets.defs.partitions import all_sets, page_captures, partition_for_capture
from ego_assets.exports import registry
from ego_assets.pipeline import expected_gate_version, quality_version, stored_gate
from ego_assets.quality.gate import ExportBlockedError, require_gate
from ego_assets.storage import Storage

log = logging.getLogger(__name__)

QUEUED = {DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING}
RUNNING = {DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING, DagsterRunStatus.MANAGED}
FAILED = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
WAITING_PHASE = "waiting for a worker"
PREPARING_PHASE = "preparing"


class Launcher(Protocol):
    """Starts an export run: returns its run id."""

    def launch(self, target: ExportTarget, run_config: dict[str, Any]) -> str: ...


class GraphQLLauncher:
    """Launches runs through the Dagster webserver's GraphQL API (the run coordinator
    queues them, the UI lists them)."""

    def __init__(self, url: str) -> None:
        from urllib.parse import urlparse

        from dagster_graphql import DagsterGraphQLClient

        parsed = urlparse(url if "://" in url else f"http://{url}")
        self._client = DagsterGraphQLClient(
            parsed.hostname or "127.0.0.1",
            port_number=parsed.port,
            use_https=parsed.scheme == "https",
            path_prefix=parsed.path.rstrip("/").removesuffix("/graphql"),
            timeout=60,
        )

    def launch(self, target: ExportTarget, run_config: dict[str, Any]) -> str:
        return self._client.submit_job_execution(
            target.job_name,
            run_config=run_config,
            tags={PARTITION_TAG: target.partition_key, EXPORT_TAG: target.format},
        )


@dataclass
class Artifact:
    filename: str
    size: int
    sha256: str
    resolved_at: str
    current: bool
    receipt: ExportReceipt


@dataclass
class ExportState:
    capture_id: str
    format: str
    status: str
    progress: float = 0.0
    phase: str | None = None
    run_id: str | None = None
    artifact: Artifact | None = None
    error: str | None = None
    # (monotonic time, JSON body) of the last answer made from this state (the API's)
    rendered: tuple[float, bytes] | None = field(default=None, repr=False, compare=False)

    def to_json(self, download_url: Callable[[ExportReceipt], str]) -> dict[str, Any]:
        artifact = None
        if self.artifact is not None:
            a = self.artifact
            artifact = {
                "filename": a.filename,
                "size": a.size,
                "sha256": a.sha256,
                "downloadUrl": download_url(a.receipt),
                "resolvedAt": a.resolved_at,
                "current": a.current,
            }
        return {
            "captureId": self.capture_id,
            "format": self.format,
            "status": self.status,
            "progress": round(self.progress, 3),
            "phase": self.phase,
            "runId": self.run_id,
            "artifact": artifact,
            "error": self.error,
        }


AskLock = Callable[[ExportTarget], contextlib.AbstractContextManager[None]]


@dataclass
class ExportService:
    """Export states from the instance and the storage; export runs through ``launcher``.

    ``ask_lock`` serializes the asks for one export (default: a lock of this process;
    `SnapshotStore.ask_lock` holds across processes).
    """

    instance: dg.DagsterInstance
    storage: Storage
    launcher: Launcher | None
    code_versions: Mapping[str, str]
    ask_lock: AskLock | None = None
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)
    _errors: dict[str, str] = field(default_factory=dict)
    _quality_code: str = field(default_factory=quality_version)
    _known: set[str] = field(default_factory=set)

    @contextlib.contextmanager
    def _asking(self, target: ExportTarget) -> Iterator[None]:
        """Held while one ask reads the state and maybe launches: this process's lock,
        ``ask_lock`` (this host's processes) and, on a Postgres instance, an advisory lock
        (every host asking through the same instance)."""
        key = (target.capture_id, target.format)
        with self._locks_guard:
            local = self._locks.setdefault(key, threading.Lock())
        with (
            local,
            self.ask_lock(target) if self.ask_lock else contextlib.nullcontext(),
            instance_lock(self.instance, f"ego/export/{target.format}/{target.partition_key}"),
        ):
            yield

    def capture_exists(self, capture_id: str) -> bool:
        """Whether the capture is a partition (a yes is remembered: captures stay)."""
        if capture_id in self._known:
            return True
        where = partition_for_capture(capture_id)  # the capture's set (EGO_CAPTURE_SETS)
        found = self.instance.has_dynamic_partition(where.partitions_name, capture_id)
        if found:
            self._known.add(capture_id)
        return found

    def capture_page(self, after: str | None, limit: int) -> tuple[list[str], str | None]:
        """One page of registered captures after cursor ``after`` and the next cursor.

        The captures of every partition set, set after set (a page holds one set's:
        `page_captures`); the cursor is ``<set index>:<the set's cursor>``. Raises
        ValueError for a cursor that is not one.
        """
        sets = all_sets()
        index, inner = 0, None
        if after:
            head, sep, rest = after.partition(":")
            if not (sep and head.isdigit() and int(head) < len(sets)):
                raise ValueError(f"not a captures page cursor: {after!r}")
            index, inner = int(head), rest or None
        keys, next_inner = page_captures(self.instance, inner, limit, sets[index])
        if next_inner is not None:
            return keys, f"{index}:{next_inner}"
        return keys, f"{index + 1}:" if index + 1 < len(sets) else None

    # -- reading ------------------------------------------------------------------------

    def _latest_run(self, target: ExportTarget) -> RunRecord | None:
        records = self.instance.get_run_records(
            filters=RunsFilter(
                tags={PARTITION_TAG: target.partition_key, EXPORT_TAG: target.format}
            ),
            limit=1,
        )
        return records[0] if records else None

    def read(self, target: ExportTarget) -> ExportState:
        """The export's state now (the run storage and the storage, no cache)."""
        record = self._latest_run(target)
        receipt = read_receipt(self.storage, target.format, target.partition_key)
        artifact = self._artifact(receipt) if receipt is not None else None
        state = ExportState(target.capture_id, target.format, "none", artifact=artifact)
        if record is None:
            state.status = "ready" if artifact else "none"
            return state
        run = record.dagster_run
        state.run_id = run.run_id
        if run.status in QUEUED:
            state.status, state.phase = "queued", WAITING_PHASE
            return state
        if run.status in RUNNING:
            state.status = "in_progress"
            state.progress = float(run.tags.get(PROGRESS_TAG, 0.0))
            state.phase = run.tags.get(PHASE_TAG, PREPARING_PHASE)
            return state
        created = record.create_timestamp.timestamp()
        written_since = receipt is not None and _epoch(receipt.exported_at) >= created
        if run.status in FAILED and not written_since:
            state.status = "failed"
            state.error = self._run_error(run.run_id, run.status)
            return state
        # finished: the artefact it wrote or found current; or why there is none
        state.progress = 1.0
        if artifact is not None and (artifact.current or written_since):
            state.status = "ready"
            return state
        state.status = "failed"
        state.error = self._why_not_exported(target)
        return state

    def _artifact(self, receipt: ExportReceipt) -> Artifact:
        from ego_assets.api.links import artefact_name

        expected = expected_gate_version(self.storage, receipt.capture_key, self._quality_code)
        current = (
            receipt.code_version == self.code_versions.get(receipt.format)
            and receipt.input_data_version == expected
        )
        return Artifact(
            filename=artefact_name(receipt),
            size=receipt.bytes,
            sha256=receipt.sha256,
            resolved_at=receipt.exported_at,
            current=current,
            receipt=receipt,
        )

    def _why_not_exported(self, target: ExportTarget) -> str:
        key = target.partition_key
        gate = stored_gate(self.storage, key)
        try:
            require_gate(gate, key, registry.policy_key(target.format))
        except ExportBlockedError as exc:
            return str(exc)
        except Exception as exc:  # no gate yet, unreadable gate
            return f"capture {key}: no export: {exc}"
        if target.format == "egosmith_shards":
            from ego_assets.formats.egosmith_export import stored_episode

            summary = stored_episode(self.storage, key)
            if summary is not None and summary.status == "skipped":
                return f"capture {key}: not exported: {summary.reason}"
        return f"capture {key}: the export run finished without writing a current export"

    def _run_error(self, run_id: str, status: DagsterRunStatus) -> str:
        if run_id in self._errors:
            return self._errors[run_id]
        message = "the export run was cancelled" if status == DagsterRunStatus.CANCELED else ""
        records = self.instance.all_logs(
            run_id, of_type={dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE}
        )
        for entry in records:
            event = entry.dagster_event
            if event is None:
                continue
            data = event.event_specific_data
            error = getattr(data, "error", None)
            if error is not None and getattr(error, "message", None):
                step = f"step {event.step_key}: " if event.step_key else ""
                message = step + error.message.strip()
                break
            if not message and event.message:
                message = event.message
        self._errors[run_id] = message or f"export run {run_id} failed"
        return self._errors[run_id]

    # -- asking -------------------------------------------------------------------------

    def request(
        self, target: ExportTarget, *, force: bool = False, options: dict[str, Any] | None = None
    ) -> tuple[bool, ExportState]:
        """Ask for the export: (whether a new run was queued, the state to answer with).

        An open run is returned as it is (never a second one for the same export); a
        current artefact is returned unless ``force``; otherwise one run is launched.
        """
        options = dict(options or {})
        with self._asking(target):
            state = self.read(target)
            if state.status in ("queued", "in_progress"):
                return False, state
            artifact = state.artifact
            matches = self._options_match(target, options)
            if not force and artifact is not None and artifact.current and matches:
                state.status, state.error = "ready", None
                return False, state
            if self.launcher is None:
                raise RuntimeError("this export service cannot launch runs (no launcher)")
            config = {**options, "force": force}
            run_id = self.launcher.launch(target, {"ops": {target.format: {"config": config}}})
            log.info("export %s/%s: run %s launched", target.format, target.capture_id, run_id)
            queued = ExportState(target.capture_id, target.format, "queued", run_id=run_id)
            queued.phase, queued.artifact = WAITING_PHASE, artifact
            return True, queued

    def _options_match(self, target: ExportTarget, options: Mapping[str, Any]) -> bool:
        """Whether the stored artefact was written with ``options`` (Holos: decode_frames)."""
        if target.format != "holos_hdf5":
            return True
        from ego_assets.holos_export import stored_notes

        notes = stored_notes(self.storage, target.partition_key) or {}
        return bool(notes.get("decode_frames", False)) == bool(options.get("decode_frames"))


@contextlib.contextmanager
def instance_lock(instance: dg.DagsterInstance, name: str) -> Iterator[None]:
    """A Postgres advisory lock named ``name`` held in the block, on its own connection to
    the instance's run storage (released with it, also when this process dies); nothing
    on an instance that is not on Postgres."""
    storage = instance.run_storage
    engine = getattr(storage, "_engine", None)
    if engine is None or engine.dialect.name != "postgresql":
        yield
        return
    from sqlalchemy import text

    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    lock_id = int.from_bytes(digest, "big", signed=True)
    with storage.connect() as conn:  # type: ignore[attr-defined]
        conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": lock_id})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": lock_id})


def _epoch(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()
