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
``blocked``    the capture's current gate blocks this export (a POST answers 409):
               ``error`` is the gate's message, ``reasons`` its reasons; no run is
               open and no current artefact exists (a stale one stays in ``artifact``)
``failed``     the latest export run failed or was cancelled, or finished without
               an export (the exporter skipped the input, or the gate that blocked it
               is no longer current: ``error`` says which)
=============  ==============================================================

An export whose inputs are current, of a capture no longer than ``inline_max_s``, is
written by the asking process itself, inside the POST (`ExportService.inline_max_s`,
``EGO_API_INLINE_MAX_S``): the exporter's library call, then the materialization its
asset's step would record, reported to Dagster without a run (tag ``ego/exported_by``).
A run's fixed cost (queue, worker, events: 1.3-2.4 s on a quiet box) is many times a
short capture's export (0.1-0.2 s), so the answer is ``ready`` at once, with no run id.
One such export at a time per process; anything else (a longer capture, decoded HDF5
frames, inputs to recompute, a failure writing or reporting it) is a run.

`read` reads one state (one run row and two or three small objects). The serving
processes do not call it per GET: the refresher process does, and writes snapshots the
servers answer from (`ego_assets.api.snapshot`); a POST reads afresh under the export's
ask lock, which holds across processes when the snapshot store provides it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ego_assets.api.errors import DagsterUnavailable, ExportBlocked
from ego_assets.catalog.receipts import ExportReceipt, read_receipt
from ego_assets.dagster_client import (
    EXPORT_TAG,
    PARTITION_TAG,
    PHASE_TAG,
    PROGRESS_TAG,
    DagsterInstance,
    ExportTarget,
    RunInfo,
    capture_page,
    has_capture,
    has_materialization,
    instance_lock,
    latest_run,
    report_export,
    run_failure,
)
from ego_assets.exports import registry
from ego_assets.exports.run import run_export
from ego_assets.pipeline import (
    expected_gate_version,
    quality_version,
    stored_duration_s,
    stored_gate,
)
from ego_assets.quality.gate import ExportBlockedError, Gate, require_gate
from ego_assets.storage import Storage

log = logging.getLogger(__name__)

WAITING_PHASE = "waiting for a worker"
PREPARING_PHASE = "preparing"
MAX_MEMORY_DIGESTS = 4096
INLINE_EXPORTER = "export-api"  # `report_export`'s ``by``: the materialization's tag


class Launcher(Protocol):
    """Starts an export run: returns its run id."""

    def launch(
        self, target: ExportTarget, run_config: dict[str, Any], upstream: bool = True
    ) -> str:
        """``upstream`` False: the exporter asset alone (its inputs are current)."""
        ...


def _unreachable(exc: BaseException) -> BaseException | None:
    """The connection failure (refused, timed out, a proxy's 5xx) behind ``exc``, if any."""
    import requests
    from gql.transport.exceptions import TransportConnectionFailed, TransportServerError

    kinds = (requests.ConnectionError, requests.Timeout)
    kinds += (TransportConnectionFailed, TransportServerError)  # type: ignore[assignment]
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, kinds):
            return cause
        cause = cause.__cause__
    return None


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
    reasons: tuple[str, ...] = ()  # the gate's, when ``blocked``
    # (monotonic time, JSON body) of the last answer made from this state (the API's)
    rendered: tuple[float, bytes] | None = field(default=None, repr=False, compare=False)

    def to_json(self, download_url: Callable[[Artifact], str]) -> dict[str, Any]:
        artifact = None
        if self.artifact is not None:
            a = self.artifact
            artifact = {
                "filename": a.filename,
                "size": a.size,
                "sha256": a.sha256,
                "downloadUrl": download_url(a),
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
            "reasons": list(self.reasons),
        }


class DigestCache(Protocol):
    """(bytes, SHA-256) of served tars by artefact version."""

    def digest(self, key: str) -> tuple[int, str] | None: ...

    def keep_digest(self, key: str, size: int, sha256: str) -> None: ...


class MemoryDigests:
    """A `DigestCache` of this process (at most `MAX_MEMORY_DIGESTS`, oldest dropped)."""

    def __init__(self) -> None:
        self._found: dict[str, tuple[int, str]] = {}

    def digest(self, key: str) -> tuple[int, str] | None:
        return self._found.get(key)

    def keep_digest(self, key: str, size: int, sha256: str) -> None:
        if len(self._found) >= MAX_MEMORY_DIGESTS:
            self._found.pop(next(iter(self._found)))
        self._found[key] = (size, sha256)


def tar_mtime(receipt: ExportReceipt) -> int:
    """The members' modification time in a folder's tar: the export's (epoch s)."""
    return int(_epoch(receipt.exported_at))


AskLock = Callable[[ExportTarget], contextlib.AbstractContextManager[None]]


@dataclass
class ExportService:
    """Export states from the instance and the storage; export runs through ``launcher``.

    ``ask_lock`` serializes the asks for one export (default: a lock of this process;
    `SnapshotStore.ask_lock` holds across processes).
    """

    instance: DagsterInstance
    storage: Storage
    launcher: Launcher | None
    code_versions: Mapping[str, str]
    ask_lock: AskLock | None = None
    # captures up to this long (s, the stored trajectory's duration) are exported inside
    # the POST when their inputs are current; 0: every export is a run
    inline_max_s: float = 0.0
    _inline_slot: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(1))
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)
    _errors: dict[str, str] = field(default_factory=dict)
    _quality_code: str = field(default_factory=quality_version)
    _known: set[str] = field(default_factory=set)
    # the tars' digests (`served_digest`); the snapshot store shares them between processes
    digests: DigestCache = field(default_factory=lambda: MemoryDigests())

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
        found = has_capture(self.instance, capture_id)  # in its set (EGO_CAPTURE_SETS)
        if found:
            self._known.add(capture_id)
        return found

    def capture_page(self, after: str | None, limit: int) -> tuple[list[str], str | None]:
        """One page of registered captures after cursor ``after`` and the next cursor
        (`ego_assets.dagster_client.capture_page`)."""
        return capture_page(self.instance, after, limit)

    # -- reading ------------------------------------------------------------------------

    def _latest_run(self, target: ExportTarget) -> RunInfo | None:
        return latest_run(
            self.instance, {PARTITION_TAG: target.partition_key, EXPORT_TAG: target.format}
        )

    def read(self, target: ExportTarget) -> ExportState:
        """The export's state now (the run storage and the storage, no cache)."""
        run = self._latest_run(target)
        receipt = read_receipt(self.storage, target.format, target.partition_key)
        # a skipped receipt records why there is no artefact (its path: the skip record)
        exported = receipt if receipt is not None and receipt.status == "exported" else None
        artifact = self._artifact(exported) if exported is not None else None
        state = ExportState(target.capture_id, target.format, "none", artifact=artifact)
        if run is None:
            if self._blocked(target, state):
                return state
            state.status = "ready" if artifact else "none"
            state.progress = 1.0 if artifact else 0.0
            if receipt is not None and receipt.status == "skipped":
                state.status, state.error = "failed", _skip_message(receipt)
            return state
        state.run_id = run.run_id
        if run.queued:
            state.status, state.phase = "queued", WAITING_PHASE
            return state
        if run.running:
            state.status = "in_progress"
            state.progress = float(run.tags.get(PROGRESS_TAG, 0.0))
            state.phase = run.tags.get(PHASE_TAG, PREPARING_PHASE)
            return state
        written_since = receipt is not None and _epoch(receipt.exported_at) >= run.created
        if exported is not None and _epoch(exported.exported_at) > run.updated:
            state.run_id = None  # written after that run ended (inline): no run made it
        if self._blocked(target, state):
            return state
        if run.failed and not written_since:
            state.status = "failed"
            state.error = self._run_error(run)
            return state
        # finished: the artefact it wrote or found current; or why there is none
        state.progress = 1.0
        if artifact is not None and (artifact.current or written_since):
            state.status = "ready"
            return state
        state.status = "failed"
        state.error = self._why_not_exported(target, receipt)
        return state

    def _blocked(self, target: ExportTarget, state: ExportState) -> bool:
        """Mark ``state`` ``blocked`` (the gate's message and reasons) when the capture's
        current gate blocks this export and no current artefact exists: what a POST
        would answer with 409 (`blocked_formats`). Whether it did."""
        if state.artifact is not None and state.artifact.current:
            return False
        refusal = self.blocked_formats(target.partition_key).get(target.format)
        if refusal is None:
            return False
        state.status, state.error, state.reasons = "blocked", str(refusal), refusal.reasons
        state.progress = 0.0
        return True

    def _artifact(self, receipt: ExportReceipt) -> Artifact:
        from ego_assets.api.links import artefact_name

        current = self._current(receipt)
        size, sha256 = self.served_digest(receipt)
        return Artifact(
            filename=artefact_name(receipt),
            size=size,
            sha256=sha256,
            resolved_at=receipt.exported_at,
            current=current,
            receipt=receipt,
        )

    def _current(self, receipt: ExportReceipt) -> bool:
        """Whether ``receipt`` was written by the exporter's code now, from the gate data
        version the capture has now."""
        expected = expected_gate_version(self.storage, receipt.capture_key, self._quality_code)
        return (
            receipt.code_version == self.code_versions.get(receipt.format)
            and receipt.input_data_version == expected
        )

    def served_digest(self, receipt: ExportReceipt) -> tuple[int, str]:
        """(bytes, SHA-256) of what a download of the artefact serves: the receipt's for a
        file; for a folder, its tar's (`ego_assets.api.tarball`), computed once per
        artefact version and remembered in ``digests``."""
        from ego_assets.api.links import is_file
        from ego_assets.api.tarball import tar_digest

        if is_file(receipt):
            return receipt.bytes, receipt.sha256
        key = f"{receipt.format}/{receipt.capture_key}/{receipt.sha256}/{receipt.exported_at}"
        found = self.digests.digest(key)
        if found is None:
            with self.storage.read_dir(self.storage.root / receipt.path) as folder:
                found = tar_digest(folder, tar_mtime(receipt))
            self.digests.keep_digest(key, *found)
        return found

    def _why_not_exported(self, target: ExportTarget, receipt: ExportReceipt | None) -> str:
        key = target.partition_key
        gate = stored_gate(self.storage, key)
        try:
            require_gate(gate, key, registry.policy_key(target.format))
        except ExportBlockedError as exc:
            return str(exc)
        except Exception as exc:  # no gate yet, unreadable gate
            return f"capture {key}: no export: {exc}"
        if receipt is not None and receipt.status == "skipped":
            return _skip_message(receipt)
        return f"capture {key}: the export run finished without writing a current export"

    def _run_error(self, run: RunInfo) -> str:
        if run.run_id not in self._errors:
            cancelled = "the export run was cancelled" if run.canceled else ""
            message = run_failure(self.instance, run.run_id) or cancelled
            self._errors[run.run_id] = message or f"export run {run.run_id} failed"
        return self._errors[run.run_id]

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
                state.status, state.error, state.progress = "ready", None, 1.0
                return False, state
            self._refuse_if_blocked(target)
            if self.launcher is None:
                raise RuntimeError("this export service cannot launch runs (no launcher)")
            config = {**options, "force": force}
            upstream = not self._inputs_current(target)
            if not upstream:
                written = self._export_inline(target, config)
                if written is not None:
                    return False, written
            try:
                run_id = self.launcher.launch(target, target.run_config(config), upstream)
            except Exception as exc:
                cause = _unreachable(exc)
                if cause is None:
                    raise
                raise DagsterUnavailable(f"Dagster webserver: {cause}") from exc
            log.info("export %s/%s: run %s launched", target.format, target.capture_id, run_id)
            queued = ExportState(target.capture_id, target.format, "queued", run_id=run_id)
            queued.phase, queued.artifact = WAITING_PHASE, artifact
            return True, queued

    def _export_inline(self, target: ExportTarget, config: dict[str, Any]) -> ExportState | None:
        """Write the export in this process and report it to Dagster (see the module
        docstring); its state, or None when a run must do it (not short enough, decoded
        frames asked for, another inline export under way here, or this one failed: the
        run then fails with its logs in Dagster)."""
        key = target.partition_key
        if self.inline_max_s <= 0 or config.get("decode_frames"):
            return None
        duration = stored_duration_s(self.storage, key)
        if duration is None or duration > self.inline_max_s:
            return None
        if not self._inline_slot.acquire(blocking=False):
            return None
        try:
            exporter_class = registry.by_name(target.format).exporter_class()
            defaults = {option.name: option.default for option in exporter_class.OPTIONS}
            exporter = exporter_class.from_options({**defaults, **config})
            try:
                result = run_export(self.storage, key, exporter, force=bool(config["force"]))
                report_export(
                    self.instance, target, exporter, self.storage, result, INLINE_EXPORTER
                )
            except Exception as exc:  # the run records it (the same error, with its logs)
                log.warning("export %s/%s inline: %s; launching a run", target.format, key, exc)
                return None
        finally:
            self._inline_slot.release()
        log.info("export %s/%s: written inline (%.1f s capture)", target.format, key, duration)
        return self.read(target)

    def _inputs_current(self, target: ExportTarget) -> bool:
        """Whether the export's inputs need no step of the run: the capture's stored gate
        was made from the raw copy, code and waivers there are now (so were the trajectory
        it judged) and Dagster recorded it (its quality_report partition). Then the run
        is the exporter alone; otherwise the raw copy, trajectory and quality steps run
        first (reusing what is current)."""
        key = target.partition_key
        gate = stored_gate(self.storage, key)
        if gate is None:
            return False
        if gate.data_version != expected_gate_version(self.storage, key, self._quality_code):
            return False
        return has_materialization(self.instance, target.gate_key, key)

    def blocked_formats(
        self, key: str, gate: Gate | Literal["read"] | None = "read"
    ) -> dict[str, ExportBlocked]:
        """The formats a run could not export ``key`` in now, with why: the capture's
        gate (``gate``, read when not given) is current (made from the raw copy, quality
        code and waivers there are now) and its export policy blocks them. Empty when
        there is no current gate yet: the run then judges the capture first."""
        found = stored_gate(self.storage, key) if gate == "read" else gate
        if found is None:
            return {}
        refused = [f for f in registry.formats() if not found.allows(f.policy_key)]
        if not refused:
            return {}
        if found.data_version != expected_gate_version(self.storage, key, self._quality_code):
            return {}
        blocked = {}
        for export in refused:
            try:
                require_gate(found, key, export.policy_key)
            except ExportBlockedError as exc:
                blocked[export.name] = ExportBlocked(str(exc), tuple(found.reasons))
        return blocked

    def _refuse_if_blocked(self, target: ExportTarget) -> None:
        """Raise `ExportBlocked` when a run could not export ``target``: the gate blocks it,
        or the exporter skipped this very input (a current skipped receipt)."""
        refusal = self.blocked_formats(target.partition_key).get(target.format)
        if refusal is not None:
            raise refusal
        receipt = read_receipt(self.storage, target.format, target.partition_key)
        if receipt is not None and receipt.status == "skipped" and self._current(receipt):
            raise ExportBlocked(_skip_message(receipt), (receipt.reason,))

    def _options_match(self, target: ExportTarget, options: Mapping[str, Any]) -> bool:
        """Whether the stored artefact was written with ``options`` (Holos: decode_frames)."""
        if target.format != "holos_hdf5":
            return True
        from ego_assets.exports.holos import stored_notes

        notes = stored_notes(self.storage, target.partition_key) or {}
        return bool(notes.get("decode_frames", False)) == bool(options.get("decode_frames"))


def _skip_message(receipt: ExportReceipt) -> str:
    return f"capture {receipt.capture_key}: not exported: {receipt.reason}"


def _epoch(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()
